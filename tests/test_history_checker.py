"""The history checker proven able to fail (issue 18): a clean hand-made history passes, and
one history per anomaly of docs/guarantees.md is flagged with that anomaly's name. No database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.history.checker import LOG_ANOMALIES, QUEUE_ANOMALIES, check
from tests.history.recorder import Op

P, G, TG = "pollgroup", "pollgroup", "txgroup"


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []

    def op(self, process: str, type_: str, f: str, value: Any) -> History:
        self.ops.append(
            {"process": process, "type": type_, "f": f, "value": value, "time": len(self.ops)}
        )
        return self

    def send(self, value: str, p: int, o: int, seq: int, key: str = "k0") -> History:
        v = {"value": value, "key": key, "seq": seq}
        self.op("producer-0.0", "invoke", "send", v)
        return self.op("producer-0.0", "ok", "send", {**v, "partition": p, "offset": o})

    def poll(self, process: str, messages: list[list[Any]]) -> History:
        self.op(process, "invoke", "poll", {"group": G})
        return self.op(process, "ok", "poll", {"group": G, "messages": messages})

    def commit(self, process: str, offsets: list[list[int]], type_: str = "ok") -> History:
        self.op(process, "invoke", "commit", {"group": G, "offsets": offsets})
        return self.op(process, type_, "commit", {"group": G, "offsets": offsets})

    def run(self, process: str, job: int, n: int, attempt: int, end: str | None = "ok") -> History:
        v = {"n": n, "id": job, "attempt": attempt, "max_attempts": 4, "worker": process}
        self.op(process, "invoke", "run", v)
        return self.op(process, end, "run", v) if end else self


A, B, TX = [0, 0, "a"], [0, 1, "b"], [1, 0, "tx"]


def writes(h: History) -> History:
    h.send("a", 0, 0, 1).send("b", 0, 1, 2)
    h.op("producer-0.0", "invoke", "send-tx", {"value": "tx"})
    h.op("producer-0.0", "ok", "send-tx", {"value": "tx", "partition": 1})
    h.op("producer-0.0", "invoke", "send-tx", {"value": "rb", "rollback": True})
    return h.op("producer-0.0", "fail", "send-tx", {"value": "rb", "partition": 1})


def consume(h: History) -> History:
    h.op("member-0.0", "ok", "assign", {"group": G, "partitions": [0, 1]})
    h.poll("member-0.0", [A, B, TX]).commit("member-0.0", [[0, 2], [1, 1]])
    h.op("txmember-0.0", "ok", "assign", {"group": TG, "partitions": [0, 1]})
    h.op("txmember-0.0", "ok", "txbatch", {"group": TG, "messages": [A, B]})
    return h.op("txmember-0.0", "ok", "txbatch", {"group": TG, "messages": [TX]})


def queue(h: History) -> History:
    h.op("enqueuer-0.0", "invoke", "enqueue", {"n": 1})
    h.op("enqueuer-0.0", "ok", "enqueue", {"n": 1, "id": 1})
    h.op("enqueuer-0.0", "invoke", "enqueue", {"n": 2, "rollback": True})
    h.op("enqueuer-0.0", "fail", "enqueue", {"n": 2, "rollback": True})
    return h.run("worker-0.0", 1, 1, 1)


def final(
    h: History,
    log: list[list[Any]] | None = None,
    committed: list[list[int]] | None = None,
    effects: list[list[Any]] | None = None,
    jobs: list[list[Any]] | None = None,
) -> History:
    h.op("final", "ok", "final-read", {"messages": [A, B, TX] if log is None else log})
    h.op("final", "ok", "final-committed", {"group": G, "offsets": committed or [[0, 2], [1, 1]]})
    h.op("final", "ok", "final-effects", {"group": TG, "effects": effects or [A, B, TX]})
    return h.op("final", "ok", "final-jobs", {"jobs": jobs or [[1, 1, "done", 1, 4]]})


def clean() -> History:
    return final(queue(consume(writes(History()))))


def test_a_clean_history_passes() -> None:
    report = check(clean().ops)
    assert report.valid, report.render()


def test_a_redelivery_after_a_failed_commit_is_allowed_and_counted() -> None:
    h = queue(consume(writes(History())))
    h.op("member-1.0", "ok", "assign", {"group": G, "partitions": [2]})
    h.send("c", 2, 0, 3, key="k2")
    h.poll("member-1.0", [[2, 0, "c"]]).commit("member-1.0", [[2, 1]], type_="fail")
    h.op("member-1.0", "ok", "revoke", {"group": G, "partitions": [2]})
    h.op("member-0.0", "ok", "assign", {"group": G, "partitions": [2]})
    h.poll("member-0.0", [[2, 0, "c"]]).commit("member-0.0", [[2, 1]])
    report = check(final(h, log=[A, B, TX, [2, 0, "c"]], effects=[A, B, TX, [2, 0, "c"]]).ops)
    assert report.valid, report.render()
    assert report.counts["redelivery-bound"] == 20  # one batch per refused commit
    assert report.counts["redelivered:pollgroup"] == 1


def inconsistent(h: History) -> History:
    return final(queue(consume(writes(h))), log=[A, [0, 1, "x"], TX])


def gap(h: History) -> History:
    log = [A, B, TX, [1, 2, "y"]]
    return final(
        queue(consume(writes(h).send("y", 1, 2, 9, key="k9"))),
        log=log,
        effects=[A, B, TX, [1, 2, "y"]],
    )


def duplicate(h: History) -> History:
    return final(queue(consume(writes(h))), log=[A, B, TX, [1, 1, "a"]])


def lost_write(h: History) -> History:
    return final(queue(consume(writes(h).send("c", 2, 0, 3, key="k2"))))


def aborted_read(h: History) -> History:
    consume(writes(h)).poll("member-0.0", [[1, 1, "rb"]])
    return final(queue(h))


def duplicate_effect(h: History) -> History:
    return final(queue(consume(writes(h))), effects=[A, A, B, TX])


def duplicate_delivery(h: History) -> History:
    consume(writes(h))
    h.op("member-0.0", "ok", "revoke", {"group": G, "partitions": [0, 1]})
    h.op("member-1.0", "ok", "assign", {"group": G, "partitions": [0]})
    return final(queue(h.poll("member-1.0", [B])))


def poll_skip(h: History) -> History:
    writes(h).op("member-0.0", "ok", "assign", {"group": G, "partitions": [0, 1]})
    h.poll("member-0.0", [A]).poll("member-0.0", [TX]).send("c", 0, 2, 3)
    h.poll("member-0.0", [[0, 2, "c"]]).poll("member-0.0", [B])
    log, effects = [A, B, [0, 2, "c"], TX], [A, B, [0, 2, "c"], TX]
    return final(queue(h), log=log, effects=effects, committed=[[0, 3], [1, 1]])


def nonmonotonic_poll(h: History) -> History:
    consume(writes(h)).poll("member-0.0", [A])
    return final(queue(h))


def commit_regression(h: History) -> History:
    consume(writes(h)).commit("member-0.0", [[0, 1]])
    return final(queue(h))


def unseen(h: History) -> History:
    writes(h).op("member-0.0", "ok", "assign", {"group": G, "partitions": [0, 1]})
    h.poll("member-0.0", [A, TX]).commit("member-0.0", [[0, 2], [1, 1]])
    h.op("txmember-0.0", "ok", "txbatch", {"group": TG, "messages": [A, B, TX]})
    return final(queue(h))


def key_order(h: History) -> History:
    h.send("a", 0, 1, 1).send("b", 0, 0, 2)
    h.op("producer-0.0", "invoke", "send-tx", {"value": "tx"})
    h.op("producer-0.0", "ok", "send-tx", {"value": "tx", "partition": 1})
    consume(h)
    return final(queue(h), log=[[0, 0, "b"], [0, 1, "a"], TX])


def lost(h: History) -> History:
    queue(consume(writes(h)))
    h.op("enqueuer-0.0", "invoke", "enqueue", {"n": 3})
    h.op("enqueuer-0.0", "ok", "enqueue", {"n": 3, "id": 3})
    return final(h)


def unexpected(h: History) -> History:
    queue(consume(writes(h))).run("worker-1.0", 2, 2, 1)
    return final(h)


def completed_twice(h: History) -> History:
    queue(consume(writes(h))).run("worker-1.0", 1, 1, 2)
    return final(h, jobs=[[1, 1, "done", 2, 4]])


def lease_overlap(h: History) -> History:
    consume(writes(h)).op("enqueuer-0.0", "ok", "enqueue", {"n": 1, "id": 1})
    h.run("worker-0.0", 1, 1, 1, end=None).run("worker-1.0", 1, 1, 2, end="ok")
    h.op("worker-0.0", "ok", "run", {"n": 1, "id": 1, "attempt": 1})
    return final(h, jobs=[[1, 1, "done", 2, 4]])


def attempts_over_limit(h: History) -> History:
    consume(writes(h)).op("enqueuer-0.0", "ok", "enqueue", {"n": 1, "id": 1})
    for attempt in range(1, 6):
        h.run(f"worker-0.{attempt}", 1, 1, attempt, end=None)
        h.op("nemesis", "info", "kill", {"target": f"worker-0.{attempt}"})
    h.run("worker-0.9", 1, 1, 6)
    return final(h, jobs=[[1, 1, "done", 6, 4]])


BROKEN: dict[str, Callable[[History], History]] = {
    "inconsistent-offsets": inconsistent,
    "offset-gap": gap,
    "duplicate": duplicate,
    "lost-write": lost_write,
    "aborted-read": aborted_read,
    "duplicate-effect": duplicate_effect,
    "duplicate-delivery": duplicate_delivery,
    "poll-skip": poll_skip,
    "nonmonotonic-poll": nonmonotonic_poll,
    "commit-regression": commit_regression,
    "unseen": unseen,
    "key-order": key_order,
    "lost": lost,
    "unexpected": unexpected,
    "completed-twice": completed_twice,
    "lease-overlap": lease_overlap,
    "attempts-over-limit": attempts_over_limit,
}


def test_every_anomaly_has_a_broken_history() -> None:
    assert set(BROKEN) == set(LOG_ANOMALIES) | set(QUEUE_ANOMALIES)


@pytest.mark.parametrize("name", list(BROKEN))
def test_each_anomaly_is_flagged_with_an_excerpt(name: str) -> None:
    report = check(BROKEN[name](History()).ops)
    assert name in report.names(), report.render()
    flagged = next(a for a in report.anomalies if a.name == name)
    assert name in flagged.render()
    if name not in ("offset-gap", "unseen"):  # a fact about the end, not an operation
        assert flagged.excerpt, flagged.render()


def test_a_batch_of_unknown_outcome_may_have_committed_or_not() -> None:
    """A transactional batch whose COMMIT was lost (``info``, a server crash) is followed by a
    batch at its first offset (it rolled back) or after it (it committed): neither skips."""
    for next_offset in (0, 2):
        h = writes(History()).op("txmember-0.0", "ok", "assign", {"group": TG, "partitions": [0]})
        h.op("txmember-0.0", "info", "txbatch", {"group": TG, "messages": [A, B]})
        h.send("c", 0, 2, 3)
        again = [A, B, [0, 2, "c"]] if next_offset == 0 else [[0, 2, "c"]]
        h.op("txmember-0.0", "ok", "txbatch", {"group": TG, "messages": again})
        report = check(h.ops)
        assert not report.names() & {"poll-skip", "nonmonotonic-poll"}, report.render()


def test_redeliveries_above_the_bound_are_flagged() -> None:
    """Each refused commit (or killed member) allows one batch again, no more: two messages
    redelivered after one refused commit are beyond a bound of one message per batch."""

    def history() -> History:
        h = queue(consume(writes(History())))
        h.op("member-1.0", "ok", "assign", {"group": G, "partitions": [2]})
        h.send("c", 2, 0, 3, key="k2").send("d", 2, 1, 4, key="k2")
        h.poll("member-1.0", [[2, 0, "c"]]).poll("member-1.0", [[2, 1, "d"]])
        h.commit("member-1.0", [[2, 2]], type_="fail")
        h.op("member-1.0", "ok", "revoke", {"group": G, "partitions": [2]})
        h.op("member-0.0", "ok", "assign", {"group": G, "partitions": [2]})
        h.poll("member-0.0", [[2, 0, "c"], [2, 1, "d"]]).commit("member-0.0", [[2, 2]])
        log = [A, B, TX, [2, 0, "c"], [2, 1, "d"]]
        return final(h, log=log, effects=log)

    report = check(history().ops, batch=1)
    assert "duplicate-delivery" in report.names(), report.render()
    assert check(history().ops, batch=2).valid


@pytest.mark.parametrize(("pause", "excused"), [(1.0, False), (4.5, True)])
def test_only_a_pause_of_half_a_lease_or_more_excuses_a_second_run(
    pause: float, excused: bool
) -> None:
    h = consume(writes(History())).op("enqueuer-0.0", "ok", "enqueue", {"n": 1, "id": 1})
    h.run("worker-0.0", 1, 1, 1, end=None)
    h.op("nemesis", "info", "pause", {"target": "worker-0.0", "s": pause})
    h.run("worker-1.0", 1, 1, 2)
    h.op("worker-0.0", "ok", "run", {"n": 1, "id": 1, "attempt": 1})
    report = check(final(h, jobs=[[1, 1, "done", 2, 4]]).ops, lease=3.0)
    assert ("lease-overlap" not in report.names()) == excused, report.render()


def test_a_job_whose_enqueuer_died_mid_call_is_not_unexpected() -> None:
    """Found by a long run (seed 1430059045): the enqueuer was killed after sending an enqueue
    and before recording its outcome; the job is stored and runs. Unknown, not unexpected."""
    h = queue(consume(writes(History())))
    h.op("enqueuer-0.0", "invoke", "enqueue", {"n": 3})
    h.op("nemesis", "info", "kill", {"target": "enqueuer-0.0"})
    h.run("worker-0.0", 3, 3, 1)
    report = check(final(h, jobs=[[1, 1, "done", 1, 4], [3, 3, "done", 1, 4]]).ops)
    assert report.valid, report.render()


def test_a_completion_after_a_pause_mid_run_excuses_the_rerun() -> None:
    """Found by a long run (seed 1190710886): a worker paused mid-run past its lease completes
    attempt 1 on SIGCONT (a stale, fenced write-back) after the job was rescued; attempt 2
    then runs. The pause began before the completion, after the run started."""
    h = consume(writes(History())).op("enqueuer-0.0", "ok", "enqueue", {"n": 1, "id": 1})
    h.op("worker-0.0", "invoke", "run", {"n": 1, "id": 1, "attempt": 1, "max_attempts": 4})
    h.op("nemesis", "info", "pause", {"target": "worker-0.0", "s": 7.5})
    h.op("nemesis", "info", "resume", {"target": "worker-0.0"})
    h.op("worker-0.0", "ok", "run", {"n": 1, "id": 1, "attempt": 1})
    h.run("worker-0.0", 1, 1, 2)
    report = check(final(h, jobs=[[1, 1, "done", 2, 4]]).ops)
    assert report.valid, report.render()
    assert report.counts["reruns-after-fault"] == 1


def test_a_rerun_logged_before_the_crash_restart_ends_is_excused() -> None:
    """Found by a long run (seed 839865604): an immediate restart began while attempt 2 ran;
    its completion could not be written back, and another worker rescued the job after the
    lease, 16 ms before the nemesis logged the server back. The crash excuses the rerun from
    its start, not from the "restarted" line."""
    h = consume(writes(History())).op("enqueuer-0.0", "ok", "enqueue", {"n": 1, "id": 1})
    h.op("worker-0.0", "invoke", "run", {"n": 1, "id": 1, "attempt": 1, "max_attempts": 4})
    h.op("nemesis", "info", "restart", {"target": "server", "mode": "immediate"})
    h.op("worker-0.0", "ok", "run", {"n": 1, "id": 1, "attempt": 1})
    h.run("worker-1.0", 1, 1, 2)
    h.op("nemesis", "info", "restarted", {"target": "server", "mode": "immediate", "error": None})
    report = check(final(h, jobs=[[1, 1, "done", 2, 4]]).ops)
    assert report.valid, report.render()
    assert report.counts["reruns-after-fault"] == 1


@pytest.mark.parametrize("claimed_before_crash", [True, False])
def test_a_job_claimed_before_a_crash_and_started_after_it_may_run_again(
    claimed_before_crash: bool,
) -> None:
    """Found in CI (seed 20261204): a worker sent a claim and was paused (briefly: no excuse
    by itself); the claim committed asynchronously and was lost in an immediate restart; the
    worker, resumed after the server was back, read the reply and started the job, completed
    it (the fenced write-back matched nothing), and the job was claimed again with the same
    attempt number. The crash counts from the run's claim, not from its start; a claim sent
    after the server was back is not excused."""
    h = consume(writes(History())).op("enqueuer-0.0", "ok", "enqueue", {"n": 1, "id": 1})
    h.op("nemesis", "info", "restart", {"target": "server", "mode": "immediate"})
    h.op("nemesis", "info", "restarted", {"target": "server", "mode": "immediate", "error": None})
    claimed = 0 if claimed_before_crash else len(h.ops)
    first = {"n": 1, "id": 1, "attempt": 1, "max_attempts": 4, "worker": "w", "claimed": claimed}
    h.op("worker-0.0", "invoke", "run", first)
    h.op("worker-0.0", "ok", "run", {"n": 1, "id": 1, "attempt": 1})
    h.run("worker-0.0", 1, 1, 1)
    report = check(final(h, jobs=[[1, 1, "done", 1, 4]]).ops)
    assert report.valid == claimed_before_crash, report.render()
    if not claimed_before_crash:
        assert report.names() == {"completed-twice"}, report.render()
