"""The log half of the checker (tests/history/checker.py): one ``step`` per operation."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, ClassVar

from tests.history.checker import Report, cut
from tests.history.recorder import Op

Position = tuple[int, int]  # (partition, offset)
READS = ("poll", "txbatch", "final-read", "final-effects")


class LogChecker:
    handlers: ClassVar[dict[tuple[str, str], Callable[[LogChecker, Op], None]]]

    def __init__(self, report: Report, batch: int) -> None:
        self.report = report
        self.batch = batch
        self.writes: dict[str, Op] = {}  # value -> the op that settled its write
        self.at: dict[Position, tuple[str, Op]] = {}  # the first value seen at each offset
        self.where: dict[str, tuple[Position, Op]] = {}  # the first offset seen for a value
        self.observed: dict[str, Op] = {}  # value -> first read of it (poll, batch, final)
        self.final: dict[str, Position] = {}
        self.final_seen = False
        self.final_partitions: dict[int, list[int]] = defaultdict(list)
        self.delivered: dict[str, set[Position]] = defaultdict(set)  # poll group -> read
        self.effects: dict[str, Counter[str]] = {}  # tx group -> value -> times
        self.effect_ops: dict[str, Op] = {}
        # Acknowledged commits: (group, partition) -> (highest next offset, its ok op).
        self.acked: dict[tuple[str, int], tuple[int, Op]] = {}
        self.pending: dict[tuple[str, str], dict[tuple[str, int], tuple[int, Op]]] = {}
        # Ownership: (process, group, partition) -> last offset delivered (-1: none yet).
        self.owned: dict[tuple[str, str, int], tuple[int, Op | None]] = {}
        # After a batch whose COMMIT was lost: the offset the next batch may also start at.
        self.or_at: dict[tuple[str, str, int], int] = {}
        self.keys: dict[str, tuple[int, Op]] = {}  # key -> (partition, first ok send)
        self.key_order: dict[tuple[str, str], tuple[int, int, Op]] = {}

    # -- one operation -------------------------------------------------------------------

    def step(self, op: Op) -> None:
        f, type_ = op["f"], op["type"]
        if f in ("send", "send-tx") and type_ != "invoke":
            self.settle_write(op)
        elif f == "kill":
            self.member_faults(op)
        elif f in ("poll", "commit") and type_ == "invoke":
            self.pending[op["process"], f] = dict(self.acked)
        else:
            handler = self.handlers.get((f, type_))
            if handler is not None:
                handler(self, op)

    def member_faults(self, op: Op) -> None:
        """The redelivery bound: a member killed, or whose commit was refused or lost, hands
        over at most the one batch it had polled and not committed (``batch`` messages)."""
        if op["f"] == "kill" and any(p == op["value"]["target"] for p, _g, _t in self.owned):
            self.report.counts["redelivery-bound"] += self.batch

    def commit_failed(self, op: Op) -> None:
        self.report.counts["redelivery-bound"] += self.batch

    def txbatch_ok(self, op: Op) -> None:
        self.read(op, op["value"]["messages"])
        self.advance(op, op["value"]["messages"])

    def assign(self, op: Op) -> None:
        for p in op["value"]["partitions"]:
            self.owned[op["process"], op["value"]["group"], p] = (-1, None)

    def revoke(self, op: Op) -> None:
        for p in op["value"]["partitions"]:
            self.owned.pop((op["process"], op["value"]["group"], p), None)

    def final_read(self, op: Op) -> None:
        self.final_seen = True
        self.read(op, op["value"]["messages"])
        for p, o, v in op["value"]["messages"]:
            self.final[v] = (p, o)
            self.final_partitions[p].append(o)

    def final_effects(self, op: Op) -> None:
        self.read(op, op["value"]["effects"])
        counts = self.effects.setdefault(op["value"]["group"], Counter())
        for _p, _o, v in op["value"]["effects"]:
            counts[v] += 1
        self.effect_ops[op["value"]["group"]] = op

    def settle_write(self, op: Op) -> None:
        value = op["value"]
        self.writes[value["value"]] = op
        if op["type"] != "ok":
            return
        if value.get("offset") is not None:
            self.read(op, [(value["partition"], value["offset"], value["value"])])
        key = value.get("key")
        if key is None or op["f"] != "send":
            return
        partition = value["partition"]
        first = self.keys.setdefault(key, (partition, op))
        if first[0] != partition:
            self.report.add("key-order", f"key {key!r} written to two partitions", first[1], op)
        last = self.key_order.get((op["process"], key))
        here = (value["seq"], value["offset"], op)
        if last is not None and (last[0] - here[0]) * (last[1] - here[1]) < 0:
            self.report.add(
                "key-order", f"key {key!r}: sent in one order, stored in the other", last[2], op
            )
        if last is None or here[0] > last[0]:
            self.key_order[op["process"], key] = here

    def read(self, op: Op, messages: list[Any]) -> None:
        """Offsets and values must agree across every observation (version order)."""
        for p, o, v in messages:
            first = self.at.setdefault((p, o), (v, op))
            if first[0] != v:
                self.report.add(
                    "inconsistent-offsets",
                    f"partition {p} offset {o} holds {first[0]!r} and {v!r}",
                    cut(first[1], messages=[[p, o, first[0]]]),
                    cut(op, messages=[[p, o, v]]),
                )
            place = self.where.setdefault(v, ((p, o), op))
            if place[0] != (p, o):
                self.report.add(
                    "duplicate",
                    f"{v!r} stored at {place[0]} and {(p, o)}",
                    cut(place[1], messages=[[*place[0], v]]),
                    cut(op, messages=[[p, o, v]]),
                )
            if op["f"] in READS:
                self.observed.setdefault(v, cut(op, messages=[[p, o, v]]))

    def poll_ok(self, op: Op) -> None:
        group, messages = op["value"]["group"], op["value"]["messages"]
        self.read(op, messages)
        before = self.pending.pop((op["process"], "poll"), {})
        seen = self.delivered[group]
        for p, o, v in messages:
            if (p, o) in seen:
                self.report.counts[f"redelivered:{group}"] += 1
            seen.add((p, o))
            committed = before.get((group, p))
            if committed is not None and o < committed[0]:
                self.report.add(
                    "duplicate-delivery",
                    f"{group} got partition {p} offset {o} after a commit of {committed[0]}"
                    " was acknowledged",
                    committed[1],
                    cut(op, messages=[[p, o, v]]),
                )
        self.advance(op, messages)

    def advance(self, op: Op, messages: list[Any]) -> None:
        """Within one member's ownership of a partition, each read starts where the last ended."""
        group = op["value"]["group"]
        for p, o, v in messages:
            key = (op["process"], group, p)
            last, last_op = self.owned.get(key, (-1, None))
            if self.or_at.pop(key, None) == o:  # the batch before, of unknown outcome, was not
                pass
            elif last_op is not None and o <= last:
                self.report.add(
                    "nonmonotonic-poll",
                    f"{op['process']} read partition {p} offset {o} after offset {last}",
                    cut(last_op, messages=[[p, last, "..."]]),
                    cut(op, messages=[[p, o, v]]),
                )
            elif last_op is not None and o > last + 1:
                self.report.add(
                    "poll-skip",
                    f"{op['process']} read partition {p} offset {o} right after {last}",
                    cut(last_op, messages=[[p, last, "..."]]),
                    cut(op, messages=[[p, o, v]]),
                )
            self.owned[key] = (o, op)

    def unknown_batch(self, op: Op) -> None:
        """A transactional batch whose COMMIT was lost (``info``): the member's next batch on
        its partition starts after it if it committed, at its first offset if not."""
        group = op["value"]["group"]
        messages = op["value"]["messages"]
        for p, o, _v in messages[:1]:
            key = (op["process"], group, p)
            if key in self.owned:
                self.or_at[key] = o
                self.owned[key] = (messages[-1][1], op)

    def commit_ok(self, op: Op) -> None:
        group = op["value"]["group"]
        before = self.pending.pop((op["process"], "commit"), {})
        for p, offset in op["value"]["offsets"]:
            earlier = before.get((group, p))
            if earlier is not None and offset < earlier[0]:
                self.report.add(
                    "commit-regression",
                    f"{group} partition {p} committed {offset} after {earlier[0]}",
                    earlier[1],
                    op,
                )
            current = self.acked.get((group, p))
            if current is None or offset > current[0]:
                self.acked[group, p] = (offset, op)

    def final_committed(self, op: Op) -> None:
        group = op["value"]["group"]
        for p, offset in op["value"]["offsets"]:
            acked = self.acked.get((group, p))
            if acked is not None and offset < acked[0]:
                self.report.add(
                    "commit-regression",
                    f"{group} partition {p} ends at {offset} below its acknowledged {acked[0]}",
                    acked[1],
                    cut(op, offsets=[[p, offset]]),
                )

    # -- after the last operation --------------------------------------------------------

    def finish(self) -> None:
        self.finish_writes()
        if self.final_seen:
            self.finish_groups()

    def finish_writes(self) -> None:
        for value, op in self.writes.items():
            seen = self.observed.get(value)
            if op["type"] == "fail" and seen is not None:
                self.report.add("aborted-read", f"{value!r} failed or rolled back", op, seen)
            elif op["type"] == "ok" and self.final_seen and value not in self.final:
                self.report.add("lost-write", f"{value!r} is not in the final read", op)
            elif op["type"] == "info" and value in self.final:
                self.report.counts["unknown-writes-stored"] += 1
        for p, offsets in self.final_partitions.items():
            if offsets != list(range(len(offsets))):
                gap = next(i for i, o in enumerate(offsets) if o != i)
                self.report.add(
                    "offset-gap",
                    f"partition {p}: the final read has offset {offsets[gap]} at place {gap}",
                )

    def finish_groups(self) -> None:
        redelivered = sum(v for k, v in self.report.counts.items() if k.startswith("redelivered:"))
        bound = self.report.counts["redelivery-bound"]
        if redelivered - bound > 0:
            self.report.add(
                "duplicate-delivery", f"{redelivered} redeliveries, above the bound of {bound}"
            )
        for group, delivered in self.delivered.items():
            missing = [(v, pos) for v, pos in self.final.items() if pos not in delivered]
            for value, (p, o) in missing[:20]:
                self.report.add("unseen", f"{group} never got partition {p} offset {o} ({value!r})")
        for group, counts in self.effects.items():
            for value in self.final:
                times = counts.get(value, 0)
                if times == 0:
                    self.report.add("unseen", f"{group} has no effect of {value!r}")
                elif times > 1:
                    self.report.add(
                        "duplicate-effect",
                        f"{group} applied {value!r} {times} times",
                        cut(self.effect_ops[group], effects=f"{times} rows of {value!r}"),
                    )


LogChecker.handlers = {
    ("poll", "ok"): LogChecker.poll_ok,
    ("txbatch", "ok"): LogChecker.txbatch_ok,
    ("txbatch", "info"): LogChecker.unknown_batch,
    ("commit", "ok"): LogChecker.commit_ok,
    ("commit", "fail"): LogChecker.commit_failed,
    ("commit", "info"): LogChecker.commit_failed,
    ("assign", "ok"): LogChecker.assign,
    ("revoke", "ok"): LogChecker.revoke,
    ("final-read", "ok"): LogChecker.final_read,
    ("final-committed", "ok"): LogChecker.final_committed,
    ("final-effects", "ok"): LogChecker.final_effects,
}
