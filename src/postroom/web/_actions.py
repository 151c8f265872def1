"""The dashboard's actions (POST, CSRF-checked, allowed by the request's access, audited).

Each goes through the client's public API: ``retry_job``, ``cancel_job``, ``pause_queue``,
``resume_queue``, ``reset_group``, ``replay_dead_letters``, and ``enqueue`` for a schedule's
"run now". Deleting a job has no public call; it is the one write of ``_sql/web.sql``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from postroom.errors import InvalidArgument, NotFound, PostroomError

from ._pages import DLQ_SUFFIX, STATES, job_filters, letter_filters, matching_letters
from ._security import Access

if TYPE_CHECKING:
    from ._app import Dashboard

# An action on "all jobs matching the filter" touches at most this many.
MAX_MATCHING = 10_000


def _back(request: Request, form: FormData, message: str) -> Response:
    base = request.scope.get("root_path", "")
    target = str(form.get("next") or "/")
    if not target.startswith("/") or target.startswith("//"):
        target = "/"  # never redirect off the dashboard
    separator = "&" if "?" in target else "?"
    return RedirectResponse(
        f"{base}{target}{separator}{urlencode({'flash': message})}", status_code=303
    )


async def _checked(d: Dashboard, request: Request, access: Access, action: str) -> FormData:
    form = await request.form()
    token = form.get("csrf")
    if not d.guard.csrf_ok(request, token if isinstance(token, str) else None):
        raise _Refused(403, "refused: the CSRF token is missing or wrong; reload the page")
    if not access.may(action):
        raise _Refused(403, f"refused: this session may not {action.replace('_', ' ')}")
    return form


class _Refused(PostroomError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"the form has no {name}")
    return value.strip()


async def _job_ids(d: Dashboard, form: FormData) -> list[int]:
    """The selected jobs, or with ``all=1`` every job matching the form's filter."""
    if form.get("all") == "1":
        state = _field(form, "state")
        if state not in STATES:
            raise InvalidArgument(f"state={state!r}: use one of {', '.join(STATES)}")
        return await d.store.job_ids(state, job_filters(form), MAX_MATCHING)
    ids = []
    for raw in form.getlist("id"):
        try:
            ids.append(int(str(raw)))
        except ValueError:
            raise InvalidArgument(f"job id {raw!r} is not a whole number") from None
    if not ids:
        raise InvalidArgument("select at least one job")
    return ids


async def _on_jobs(d: Dashboard, request: Request, access: Access, action: str) -> Response:
    form = await _checked(d, request, access, action)
    ids = await _job_ids(d, form)
    done = 0
    for job_id in ids:
        try:
            if action == "retry_job":
                await d.client.retry_job(job_id)
                done += 1
            elif action == "cancel_job":
                await d.client.cancel_job(job_id)
                done += 1
            else:
                done += await d.store.delete_job(job_id)
        except PostroomError:
            continue  # gone or not in a state the action applies to: the count says so
    target = ",".join(map(str, ids[:20])) + (" ..." if len(ids) > 20 else "")
    d.guard.audit(access, action, f"jobs {target}", done)
    verb = action.removesuffix("_job")
    return _back(request, form, f"{verb}: {done} of {len(ids)} job(s)")


async def retry_jobs(d: Dashboard, request: Request, access: Access) -> Response:
    return await _on_jobs(d, request, access, "retry_job")


async def cancel_jobs(d: Dashboard, request: Request, access: Access) -> Response:
    return await _on_jobs(d, request, access, "cancel_job")


async def delete_jobs(d: Dashboard, request: Request, access: Access) -> Response:
    return await _on_jobs(d, request, access, "delete_job")


async def pause_queue(d: Dashboard, request: Request, access: Access) -> Response:
    form = await _checked(d, request, access, "pause_queue")
    queue = _field(form, "queue")
    changed = await d.client.pause_queue(queue)
    d.guard.audit(access, "pause_queue", f"queue {queue}", int(changed))
    return _back(request, form, f"queue {queue} {'paused' if changed else 'was paused already'}")


async def resume_queue(d: Dashboard, request: Request, access: Access) -> Response:
    form = await _checked(d, request, access, "resume_queue")
    queue = _field(form, "queue")
    changed = await d.client.resume_queue(queue)
    d.guard.audit(access, "resume_queue", f"queue {queue}", int(changed))
    return _back(request, form, f"queue {queue} {'resumed' if changed else 'was not paused'}")


async def run_schedule(d: Dashboard, request: Request, access: Access) -> Response:
    form = await _checked(d, request, access, "run_schedule")
    name = _field(form, "name")
    rows = await d.store.rows("web_schedule", {"name": name})
    if not rows:
        raise NotFound(f"no cron schedule {name!r}")
    _name, _cron, kind, queue, args, priority, max_attempts, _last, _next = rows[0]
    job = await d.client.enqueue(
        kind, args, queue=queue, priority=priority, max_attempts=max_attempts
    )
    d.guard.audit(access, "run_schedule", f"schedule {name} -> job {job.id}", 1)
    return _back(request, form, f"schedule {name}: enqueued job {job.id}")


async def reset_group(d: Dashboard, request: Request, access: Access) -> Response:
    form = await _checked(d, request, access, "reset_group")
    group, topic, to = _field(form, "group"), _field(form, "topic"), _field(form, "to")
    raw_partition = str(form.get("partition") or "").strip()
    target: str | int | datetime
    try:
        partition = int(raw_partition) if raw_partition else None
        if to in ("earliest", "latest"):
            target = to
        elif to == "offset":
            target = int(_field(form, "value"))
        elif to == "time":
            target = datetime.fromisoformat(_field(form, "value"))
        else:
            raise InvalidArgument(f"to={to!r}: use earliest, latest, offset or time")
    except ValueError as exc:
        raise InvalidArgument(f"cannot reset {group} on {topic}: {exc}") from None
    moved = await d.client.reset_group(group, topic, to=target, partition=partition)
    d.guard.audit(access, "reset_group", f"group {group} on {topic} to {to} {moved}", len(moved))
    return _back(request, form, f"group {group} reset on {topic}: {json.dumps(moved)}")


def _letters(form: FormData) -> list[tuple[int, int]]:
    """The selected dead letters: ``letter`` fields ``PARTITION:OFFSET`` on the .dlq topic."""
    letters = []
    for raw in form.getlist("letter"):
        try:
            partition, offset = str(raw).split(":")
            letters.append((int(partition), int(offset)))
        except ValueError:
            raise InvalidArgument(f"dead letter {raw!r} is not PARTITION:OFFSET") from None
    if not letters:
        raise InvalidArgument("select at least one dead letter")
    return letters


async def replay_dead_letters(d: Dashboard, request: Request, access: Access) -> Response:
    """Replay the selected dead letters of a source topic, or with ``all=1`` every one matching
    the filter; with no filter that is the engine's replay of all (each dead letter once)."""
    form = await _checked(d, request, access, "replay_dead_letters")
    topic = _field(form, "topic").removesuffix(DLQ_SUFFIX)
    filters = letter_filters(form)
    if form.get("all") == "1" and not any(filters.values()):
        count = await d.client.replay_dead_letters(topic)
        target = f"topic {topic}: every dead letter not replayed yet"
    else:
        if form.get("all") == "1":
            found = await matching_letters(d, topic, filters, MAX_MATCHING)
            letters = [(m.partition, m.offset) for m in found]
            target = f"topic {topic}: {len(letters)} matching {filters}"
        else:
            letters = _letters(form)
            shown = " ".join(f"{p}:{o}" for p, o in letters[:20])
            target = f"topic {topic}: {shown}{' ...' if len(letters) > 20 else ''}"
        count = await d.client.replay_dead_letters(topic, letters=letters) if letters else 0
    d.guard.audit(access, "replay_dead_letters", target, count)
    return _back(request, form, f"replayed {count} dead letter(s) of {topic}")


def refused(exc: Exception) -> Response | None:
    if isinstance(exc, _Refused):
        return PlainTextResponse(str(exc), status_code=exc.status)
    return None


ROUTES: list[tuple[str, Any]] = [
    ("/actions/retry", retry_jobs),
    ("/actions/cancel", cancel_jobs),
    ("/actions/delete", delete_jobs),
    ("/actions/pause", pause_queue),
    ("/actions/resume", resume_queue),
    ("/actions/run-schedule", run_schedule),
    ("/actions/reset-group", reset_group),
    ("/actions/replay", replay_dead_letters),
]
