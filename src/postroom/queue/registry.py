"""The job registry: the kinds and periodic schedules registered in this process, and the
checked enqueue requests built from them. Sans-IO and shared by both flavours: ``Jobs`` and
``AsyncJobs`` each hold one, and their enqueuers and workers read it (unit-tested without a
database)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ..errors import InvalidArgument, InvalidType
from .cron import Schedule, parse_cron
from .options import ENQUEUE_OPTION_NAMES, EnqueueOptions
from .records import JobDefinition, check_kind, make_definition
from .requests import JobOptions, JobRequest, encode_args, job_options, split_options
from .serializer import Serializer, check_serializer

_KIND_AND_ARGS = frozenset({"kind", "args"})


class JobRegistry:
    """Job kinds (``definitions``) and periodic schedules (``schedules``) by name, and the
    serializer their arguments are encoded with.

        registry = JobRegistry()
        definition = registry.define("send_receipt", send_receipt, allow_coroutines=False)
        request = registry.request("send_receipt", {"order_id": 42}, {})
    """

    def __init__(self, serializer: Serializer | None = None) -> None:
        self.serializer = check_serializer(serializer)
        self.definitions: dict[str, JobDefinition] = {}
        self.schedules: dict[str, Schedule] = {}
        self._default_options: dict[str, JobOptions] = {}

    # -- registration ---------------------------------------------------------------------

    def register(self, definition: JobDefinition) -> JobDefinition:
        """Add ``definition``; raises :class:`InvalidArgument` if its kind is taken."""
        if definition.kind in self.definitions:
            raise InvalidArgument(f"job kind {definition.kind!r} is already registered")
        self.definitions[definition.kind] = definition
        self._default_options.pop(definition.kind, None)
        return definition

    def define(
        self,
        kind: str | None,
        func: Callable[..., Any],
        *,
        allow_coroutines: bool,
        **options: Any,
    ) -> JobDefinition:
        """Register ``func`` as job ``kind`` (default: its name) with its default options; a
        coroutine function only where ``allow_coroutines`` (the asyncio client)."""
        is_coroutine = inspect.iscoroutinefunction(func)
        if is_coroutine and not allow_coroutines:
            raise InvalidType(
                f"job {kind or func.__name__!r}: {func.__name__} is a coroutine function; "
                "register coroutine functions on postroom.AsyncClient"
            )
        name = kind if isinstance(kind, str) else func.__name__
        return self.register(make_definition(name, func, is_coroutine=is_coroutine, **options))

    def add_schedule(
        self,
        cron: str,
        definition: JobDefinition,
        *,
        name: str | None,
        args: Mapping[str, Any] | None,
        queue: str | None,
        priority: int | None,
        time_zone: str | None = None,
    ) -> None:
        """Enqueue ``definition`` at every tick of ``cron`` (see ``Client.periodic``)."""
        parsed = parse_cron(cron, time_zone)
        schedule_name = check_kind(name or definition.kind)
        if schedule_name in self.schedules:
            raise InvalidArgument(f"periodic job {schedule_name!r} is already registered")
        bound = definition.bind_args((), args or {})
        options = job_options(definition, {"queue": queue, "priority": priority})
        self.schedules[schedule_name] = Schedule(
            schedule_name,
            parsed,
            definition.kind,
            encode_args(definition.kind, bound, self.serializer),
            options.queue,
            options.priority,
            options.max_attempts,
        )

    def queues(self) -> set[str]:
        """The queues of the registered kinds and schedules (a worker's default queues)."""
        return {d.queue for d in self.definitions.values()} | {
            s.queue for s in self.schedules.values()
        }

    def limited(self) -> bool:
        """Whether a registered kind has a concurrency or rate limit."""
        return any(
            d.max_concurrency is not None or d.rate_limit is not None
            for d in self.definitions.values()
        )

    # -- requests -------------------------------------------------------------------------

    def request(
        self, kind: str, args: Mapping[str, Any] | None, options: EnqueueOptions
    ) -> JobRequest:
        """A checked request: ``args`` fit the registered function (if any), ``options`` are
        checked against its defaults."""
        definition = self.definitions.get(kind)
        if args is None:
            args = {}
        elif type(args) is not dict and not isinstance(args, Mapping):
            raise InvalidType(
                f"args of job {kind!r} must be a mapping of argument names to values, "
                f"got {type(args).__name__}"
            )
        if definition is not None and args:
            definition.bind_args((), args)
        if options and any(value is not None for value in options.values()):
            checked = job_options(definition, options)
            check_kind(kind)
        else:
            # Batches repeat a few kinds with default options: check those once per kind.
            cached = self._default_options.get(kind)
            if cached is None:
                check_kind(kind)
                cached = self._default_options[kind] = job_options(definition, {})
            checked = cached
        return JobRequest(kind, encode_args(kind, args, self.serializer), checked)

    def prepare(
        self, definition: JobDefinition, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> JobRequest:
        """``func.prepare(*args, **kwargs)``: the job's arguments and enqueue options mixed."""
        job_kwargs, options = split_options(kwargs)
        bound = definition.bind_args(args, job_kwargs)
        return JobRequest(
            definition.kind,
            encode_args(definition.kind, bound, self.serializer),
            job_options(definition, options),
        )

    def request_from(self, item: object) -> JobRequest:
        """A batch item: a ``JobRequest`` (``func.prepare(...)``, from any client) or a mapping
        with ``kind``, ``args`` and any enqueue options."""
        if type(item) is dict and item.keys() <= _KIND_AND_ARGS and "kind" in item:
            # The usual item (kind and args, the kind's default options), checked with less.
            return self.request(item["kind"], item.get("args"), {})
        if isinstance(item, JobRequest):
            return item
        if isinstance(item, Mapping) and "kind" in item:
            fields = dict(item)
            kind = fields.pop("kind")
            args = fields.pop("args", None)
            extra = set(fields) - ENQUEUE_OPTION_NAMES
            if extra:
                raise InvalidArgument(
                    f"unknown job fields {sorted(extra)}: use kind, args, "
                    f"{', '.join(sorted(ENQUEUE_OPTION_NAMES))}"
                )
            return self.request(kind, args, fields)  # type: ignore[arg-type]
        raise InvalidType(
            f"invalid batch item {item!r}: pass func.prepare(...) or a dict with kind and args"
        )

    def requests_from(self, items: Iterable[object]) -> list[JobRequest]:
        """Every batch item checked (``request_from``), before anything is written; bad input
        raises naming the item's position in the batch."""
        return list(self.checked(items))

    def checked(self, items: Iterable[object]) -> Iterator[JobRequest]:
        """The batch items checked one by one as they are taken (see ``requests_from``)."""
        position = 0
        request_from = self.request_from
        try:
            for item in items:
                yield request_from(item)
                position += 1
        except (InvalidArgument, InvalidType) as exc:  # InvalidName is an InvalidArgument
            raise type(exc)(f"batch item {position}: {exc}") from None
