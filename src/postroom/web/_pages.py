"""The dashboard's pages (GET): each reads through the public API or the bounded named queries
of ``_sql/web.sql`` and renders one template."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from postroom import Message
from postroom.errors import GroupNotFound, InvalidArgument, JobNotFound, TopicNotFound

from . import _store
from ._samples import PICKS
from ._security import Access

if TYPE_CHECKING:
    from ._app import Dashboard

DLQ_SUFFIX = ".dlq"
HEADER = "postroom-dlq-"
REPLAY_GROUP = "postroom-replay"  # the cursor of client.replay_dead_letters' replay of all
LISTED = 200  # dead letters a page lists
STATES = ("ready", "running", "failed", "waiting", "held", "done", "cancelled")
LAG_AMBER_SECONDS = 60.0


async def overview(d: Dashboard, request: Request, access: Access) -> Response:
    topics = await d.client.list_topics()
    groups = await d.client.list_groups()
    counts, estimated = await d.store.job_counts()
    relays = await d.client.relay_status()
    members = await d.store.members()
    workers = await d.store.rows("web_workers")
    by_state: dict[str, int] = defaultdict(int)
    for _queue, state, n in counts:
        by_state[state] += n
    max_lag_seconds = max((r.oldest_pending_seconds for r in relays), default=0.0)
    health = "green"
    sink_failing = any(r.sink_errors for r in relays)  # a relay stuck on its sink
    if by_state["failed"] or sink_failing or max_lag_seconds > LAG_AMBER_SECONDS * 10:
        health = "red"
    elif any(g.lag for g in groups) or by_state["held"]:
        health = "amber"
    return d.render(
        request,
        "overview.html",
        access,
        topics=topics,
        groups=groups,
        by_state=dict(by_state),
        estimated=estimated,
        relays=relays,
        members_alive=sum(1 for m in members if m[4]),
        workers_alive=sum(1 for w in workers if w[8] != "gone"),
        health=health,
        dead_letter_topics=[t for t in topics if t.name.endswith(DLQ_SUFFIX)],
    )


async def topics_page(d: Dashboard, request: Request, access: Access) -> Response:
    topics = await d.client.list_topics()
    estimates = await d.store.table_estimates()
    total = sum(t.high_water for t in topics) or 1
    messages_bytes = estimates.get("messages", (0, 0))[1]
    return d.render(
        request,
        "topics.html",
        access,
        topics=topics,
        # One messages table holds every topic: a topic's share of its size, by offsets.
        sizes={t.name: messages_bytes * t.high_water // total for t in topics},
    )


def _int(request: Request, name: str, default: int | None = None) -> int | None:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgument(f"{name}={raw!r} is not a whole number") from None


def _json_param(request: Request, name: str) -> str | None:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return None
    try:
        json.loads(raw)
    except ValueError as exc:
        raise InvalidArgument(f"{name}={raw!r} is not JSON: {exc}") from None
    return raw


async def topic_page(d: Dashboard, request: Request, access: Access) -> Response:
    name = request.path_params["name"]
    # list_topics, not describe_topic: that one sums every message's size (a full scan).
    info = next((t for t in await d.client.list_topics() if t.name == name), None)
    if info is None:
        raise TopicNotFound(f"no topic {name!r}")
    partitions = await d.store.partitions(name)
    partition = _int(request, "partition", 0) or 0
    bounds = next((p for p in partitions if p[0] == partition), None)
    if bounds is None:
        raise InvalidArgument(f"topic {name!r} has no partition {partition}")
    low, high = int(bounds[1]), int(bounds[2])
    limit = 50
    start = _int(request, "offset")
    at = request.query_params.get("at", "").strip()
    if at:
        try:
            moment = datetime.fromisoformat(at)
        except ValueError:
            raise InvalidArgument(f"at={at!r} is not an ISO time") from None
        if moment.tzinfo is None:
            raise InvalidArgument(f"at={at!r} needs a timezone (e.g. 2026-12-02T07:00:00+00:00)")
        start = await d.store.offset_at(name, partition, moment, low, high)
    if start is None:
        start = max(low, high - limit)  # the newest page: what a tail shows
    key = request.query_params.get("key") or None
    messages = await d.store.browse(
        name,
        partition,
        start,
        limit=limit,
        key=key.encode() if key else None,
        headers=_json_param(request, "headers"),
        contains=_json_param(request, "contains"),
    )
    params = request.query_params
    filtered = bool(key or params.get("headers") or params.get("contains"))
    # A filter reads at most SCAN_LIMIT rows a page: say where the search stopped.
    searched_to = start + _store.SCAN_LIMIT if filtered and len(messages) < limit else None
    return d.render(
        request,
        "topic.html",
        access,
        searched_to=searched_to if searched_to is not None and searched_to < high else None,
        topic=info,
        partitions=partitions,
        partition=partition,
        start=start,
        messages=messages,
        params=request.query_params,
        tail=request.query_params.get("tail") == "1",
    )


async def groups_page(d: Dashboard, request: Request, access: Access) -> Response:
    return d.render(request, "groups.html", access, groups=await d.client.list_groups())


async def group_page(d: Dashboard, request: Request, access: Access) -> Response:
    name = request.path_params["name"]
    info = await d.client.describe_group(name)  # raises GroupNotFound
    members = [m for m in await d.store.members() if m[0] == name]
    preview = None
    topic = request.query_params.get("topic", "")
    to = request.query_params.get("to", "")
    if topic and to:
        preview = await reset_preview(d, name, topic, to, request)
    return d.render(
        request,
        "group.html",
        access,
        group=info,
        members=members,
        preview=preview,
        params=request.query_params,
    )


async def reset_preview(
    d: Dashboard, group: str, topic: str, to: str, request: Request
) -> list[dict[str, Any]]:
    """What a reset would move, per partition: the dry run (nothing is written)."""
    partition = _int(request, "partition")
    value = request.query_params.get("value", "").strip()
    info = await d.client.describe_group(group)
    committed = {p.partition: p.committed for p in info.partitions if p.topic == topic}
    rows = []
    for p, low, high, _n, _newest in await d.store.partitions(topic):
        if partition is not None and p != partition:
            continue
        if to == "earliest":
            target = int(low)
        elif to == "latest":
            target = int(high)
        elif to == "offset":
            target = _int(request, "value") or 0
            if not low <= target <= high:
                raise InvalidArgument(
                    f"offset {target} is outside partition {p}'s range {low}..{high}"
                )
        elif to == "time":
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                raise InvalidArgument(f"time {value!r} is not an ISO time") from None
            if moment.tzinfo is None:
                raise InvalidArgument(f"time {value!r} needs a timezone")
            target = await d.store.offset_at(topic, p, moment, int(low), int(high))
        else:
            raise InvalidArgument(f"to={to!r}: use earliest, latest, offset or time")
        now = committed.get(p)
        rows.append(
            {
                "partition": p,
                "committed": now,
                "target": target,
                "moves": None if now is None else target - now,
            }
        )
    return rows


async def queues_page(d: Dashboard, request: Request, access: Access) -> Response:
    counts, estimated = await d.store.job_counts()
    table: dict[str, dict[str, int]] = defaultdict(dict)
    for queue, state, n in counts:
        table[queue][state] = n
    paused = {q: at for q, at in await d.store.rows("web_paused")}
    schedules = await d.store.rows("web_schedules")
    limits = await d.store.rows("web_limits")
    # Queues with nothing in them still show when paused, scheduled into or limited.
    limited = [lim[1] for lim in limits if lim[0] == "queue"]
    for queue in [*paused, *(s[3] for s in schedules), *limited]:
        table.setdefault(queue, {})
    oldest = {q: s for q, s in await d.store.rows("web_oldest_ready")}
    return d.render(
        request,
        "queues.html",
        access,
        table=dict(sorted(table.items())),
        states=STATES,
        estimated=estimated,
        paused=paused,
        oldest=oldest,
        schedules=schedules,
        limits=limits,
    )


def job_filters(params: Any) -> dict[str, Any]:
    """The job list's filters from a query string or form: kind, queue, args, error."""
    args = (params.get("args") or "").strip() or None
    if args is not None:
        try:
            json.loads(args)
        except ValueError as exc:
            raise InvalidArgument(f"args={args!r} is not JSON: {exc}") from None
    return {
        "kind": (params.get("kind") or "").strip() or None,
        "queue": (params.get("queue") or "").strip() or None,
        "args": args,
        "error": (params.get("error") or "").strip() or None,
    }


async def jobs_page(d: Dashboard, request: Request, access: Access) -> Response:
    state = request.query_params.get("state", "failed")
    if state not in STATES:
        raise InvalidArgument(f"state={state!r}: use one of {', '.join(STATES)}")
    filters = job_filters(request.query_params)
    jobs = await d.store.job_list(state, filters, _int(request, "before"))
    return d.render(
        request,
        "jobs.html",
        access,
        jobs=jobs,
        state=state,
        states=STATES,
        filters={k: v or "" for k, v in filters.items()},
        next_before=jobs[-1][0] if len(jobs) == 50 else None,
    )


async def job_page(d: Dashboard, request: Request, access: Access) -> Response:
    try:
        job_id = int(request.path_params["id"])
    except ValueError:
        raise JobNotFound(f"no job {request.path_params['id']!r}") from None
    job = await d.client.get_job(job_id)
    workflow = await d.store.rows("web_job_workflow", {"id": job_id})
    return d.render(request, "job.html", access, job=job, workflow=workflow)


def letter_filters(params: Any) -> dict[str, str]:
    """The dead-letter list's filters: the group that failed, text in the error."""
    return {k: (params.get(k) or "").strip() for k in ("group", "error")}


async def matching_letters(
    d: Dashboard, source: str, filters: Mapping[str, str], limit: int
) -> list[Message]:
    """The first ``limit`` dead letters of ``source`` (oldest first) that match ``filters``."""
    letters = await d.client.list_dead_letters(source, limit=limit)
    group, error = filters.get("group"), (filters.get("error") or "").lower()

    def text(m: Message, name: str) -> str:
        value = m.headers.get(HEADER + name, "")
        return value if isinstance(value, str) else value.decode("utf-8", "replace")

    return [
        m
        for m in letters
        if (not group or text(m, "group") == group) and error in text(m, "error").lower()
    ]


async def dead_letters_page(d: Dashboard, request: Request, access: Access) -> Response:
    topics = [t for t in await d.client.list_topics() if t.name.endswith(DLQ_SUFFIX)]
    selected = request.query_params.get("topic") or (topics[0].name if topics else "")
    filters = letter_filters(request.query_params)
    letters: list[Message] = []
    replayed_to: dict[int, int] = {}
    if selected:
        letters = await matching_letters(d, selected.removesuffix(DLQ_SUFFIX), filters, LISTED)
        try:  # how far "replay all" went: the replay's cursor on the dead-letter topic
            cursor = await d.client.describe_group(REPLAY_GROUP)
        except GroupNotFound:
            pass
        else:
            replayed_to = {
                p.partition: p.committed or 0 for p in cursor.partitions if p.topic == selected
            }
    return d.render(
        request,
        "deadletters.html",
        access,
        topics=topics,
        selected=selected,
        letters=letters,
        filters=filters,
        replayed_to=replayed_to,
        listed=LISTED,
    )


async def relays_page(d: Dashboard, request: Request, access: Access) -> Response:
    relays = await d.client.relay_status()
    dlq = {t.name: t.high_water for t in await d.client.list_topics()}
    return d.render(
        request, "relays.html", access, relays=relays, dlq=dlq, rates=d.sampler.latest("relayed")
    )


async def workers_page(d: Dashboard, request: Request, access: Access) -> Response:
    return d.render(
        request,
        "workers.html",
        access,
        workers=await d.store.rows("web_workers"),
        members=await d.store.members(),
    )


async def audit_page(d: Dashboard, request: Request, access: Access) -> Response:
    return d.render(request, "audit.html", access, entries=list(d.guard.recent))


async def series(d: Dashboard, request: Request, access: Access) -> Response:
    pick = request.query_params.get("pick", "rate")
    if pick not in PICKS:
        raise InvalidArgument(f"pick={pick!r}: use one of {', '.join(PICKS)}")
    return JSONResponse(d.sampler.series(pick, request.query_params.get("name") or None))


async def events(d: Dashboard, request: Request, access: Access) -> Response:
    assert d.live is not None
    return StreamingResponse(
        d.live.events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


ROUTES = [
    ("/", overview),
    ("/topics", topics_page),
    ("/topics/{name}", topic_page),
    ("/groups", groups_page),
    ("/groups/{name}", group_page),
    ("/queues", queues_page),
    ("/jobs", jobs_page),
    ("/jobs/{id}", job_page),
    ("/deadletters", dead_letters_page),
    ("/relays", relays_page),
    ("/workers", workers_page),
    ("/audit", audit_page),
    ("/api/series", series),
    ("/events", events),
]

NOT_FOUND = (TopicNotFound, GroupNotFound, JobNotFound)
