"""The worker's per-job log lines (logger ``postroom.jobs``, INFO): one at the start and one at
the end of every attempt, with structured fields in the record (``job_id``, ``kind``,
``queue``, ``attempt``, ``max_attempts``, ``outcome``, ``duration``, ``delay``), which
``postroom worker --log-format json`` prints as JSON. When INFO is off for ``postroom.jobs``,
the worker skips them after one level check per job."""

from __future__ import annotations

import logging

from .outcomes import Claimed, Outcome

log = logging.getLogger("postroom.jobs")


def enabled() -> bool:
    return log.isEnabledFor(logging.INFO)


def _fields(job: Claimed) -> dict[str, object]:
    return {
        "job_id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
    }


def started(job: Claimed) -> None:
    log.info(
        "job %s started: %s (attempt %d/%d)",
        job.id,
        job.kind,
        job.attempt,
        job.max_attempts,
        extra={**_fields(job), "outcome": "started"},
    )


def finished(outcome: Outcome, duration: float) -> None:
    job = outcome.job
    if outcome.kind == "fail":
        what = "failed" if outcome.final or job.attempt >= job.max_attempts else "retry"
    else:
        what = {"done": "done", "cancelled": "cancelled", "release": "released"}.get(
            outcome.kind, "snoozed"
        )
    fields = {**_fields(job), "outcome": what, "duration": round(duration, 6)}
    detail = ""
    if what in ("retry", "snoozed"):
        fields["delay"] = round(outcome.delay, 3)
        detail = f", again in {outcome.delay:.1f} s"
    if what in ("failed", "retry") and outcome.error:
        last_line = outcome.error.strip().splitlines()[-1]
        fields["error"] = last_line
        detail += f": {last_line}"
    log.info(
        "job %s %s: %s (attempt %d/%d, %.3f s%s)",
        job.id,
        what,
        job.kind,
        job.attempt,
        job.max_attempts,
        duration,
        detail,
        extra=fields,
    )
