"""The enqueue side: one request type for both clients, one options type, clear errors for
bad input (Python and SQL), and the serializer's round trip."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg.types.json import Jsonb

import postroom
from postroom.errors import InvalidArgument, InvalidType
from postroom.queue.options import ENQUEUE_OPTION_NAMES
from postroom.queue.records import ENQUEUE_PARAMETERS

from .helpers import running, scalar


def test_a_request_prepared_by_the_sync_client_is_enqueued_by_the_async_one(
    client: postroom.Client, dsn: str
) -> None:
    @client.job("shared")
    def shared(n: int) -> None: ...

    request = shared.prepare(n=1, priority=3)

    async def main() -> tuple[int, int]:
        async with await postroom.connect_async(dsn) as aclient:

            @aclient.job("shared_async")
            async def shared_async(n: int) -> None: ...

            (job,) = await aclient.enqueue_batch([request])
            async_request = shared_async.prepare(n=2, queue="other")
            return job.id, async_request  # type: ignore[return-value]

    job_id, async_request = asyncio.run(main())
    assert isinstance(request, postroom.JobRequest)
    assert client.get_job(job_id).priority == 3
    (job,) = client.enqueue_batch([async_request])
    info = client.get_job(job.id)
    assert (info.kind, info.queue, info.args) == ("shared_async", "other", {"n": 2})


def test_the_enqueue_options_are_defined_once() -> None:
    assert ENQUEUE_OPTION_NAMES == set(postroom.EnqueueOptions.__annotations__)
    assert ENQUEUE_PARAMETERS == ENQUEUE_OPTION_NAMES | {"conn"}
    assert {"queue", "priority", "run_at", "delay", "max_attempts", "unique_key"} <= (
        ENQUEUE_OPTION_NAMES
    )


def test_a_job_function_may_not_name_a_parameter_after_an_option(
    client: postroom.Client,
) -> None:
    with pytest.raises(InvalidArgument, match="parameter 'after' clashes"):

        @client.job("clash")
        def clash(after: int) -> None: ...


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda c: c.enqueue("k", [1, 2]), InvalidType, "must be a mapping"),
        (lambda c: c.enqueue("k", delay=1e20), InvalidArgument, "invalid delay 1e\\+20"),
        (lambda c: c.enqueue("k", delay=timedelta(days=10**6)), InvalidArgument, "100 years"),
        (lambda c: c.enqueue("k", {"a": "x\x00y"}), InvalidArgument, "argument 'a'.*NUL"),
        (lambda c: c.enqueue("k", {"a": ["\ud800"]}), InvalidArgument, "'a'.*lone surrogate"),
        (lambda c: c.enqueue("k", {"a": {"\x00": 1}}), InvalidArgument, "'a'.*NUL"),
        (lambda c: c.enqueue("k", unique_key="a\x00"), InvalidArgument, "unique_key.*NUL"),
        (lambda c: c.enqueue("k", unique_key="\udfff"), InvalidArgument, "unique_key.*surrog"),
        (lambda c: c.enqueue("k", sequence=""), InvalidArgument, "invalid sequence"),
        (lambda c: c.enqueue("k", after=[0]), InvalidArgument, "parent job id"),
        (lambda c: c.enqueue("k", after="12"), InvalidArgument, "invalid after"),
        (lambda c: c.enqueue("k", on_parent_failure="x"), InvalidArgument, "on_parent_fail"),
        (lambda c: c.enqueue("k", {"a": object()}), InvalidType, "argument 'a' of job 'k'"),
        (lambda c: c.enqueue("k", {"d": Decimal("NaN")}), InvalidType, "argument 'd'"),
        (lambda c: c.enqueue("k", colour=1), InvalidArgument, "unknown enqueue options"),
        (lambda c: c.enqueue_batch([{"kind": "k", "after": [-1]}]), InvalidArgument, "parent"),
        (lambda c: c.enqueue("k", unique_key="u", sequence="s"), InvalidArgument, "combined"),
    ],
)
def test_bad_enqueue_input_raises_one_clear_error(
    client: postroom.Client, dsn: str, call: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        call(client)
    assert scalar(dsn, "SELECT count(*) FROM postroom.jobs") == 0


def test_a_text_with_an_escaped_nul_is_stored(client: postroom.Client) -> None:
    # "\\u0000" is six ordinary characters: the NUL check must not refuse it.
    job = client.enqueue("k", {"a": "\\u0000", "b": "\\ud800", "c": "😀"})
    assert client.get_job(job.id).args == {"a": "\\u0000", "b": "\\ud800", "c": "😀"}


def test_datetime_date_uuid_and_decimal_round_trip(client: postroom.Client) -> None:
    seen: list[dict[str, Any]] = []
    when = datetime(2026, 1, 31, 12, 30, tzinfo=UTC)
    ident = uuid4()

    @client.job("typed")
    def typed(when: datetime, day: date, ident: UUID, amount: Decimal, nested: list[Any]) -> Any:
        seen.append({"when": when, "day": day, "ident": ident, "amount": amount, "nested": nested})
        return {"echo": amount, "at": when}

    job = typed.enqueue(
        when=when, day=date(2026, 2, 1), ident=ident, amount=Decimal("10.50"), nested=[{"d": when}]
    )
    stored = client.get_job(job.id).args
    assert stored["amount"] == {"$decimal": "10.50"}  # the documented encoding
    assert stored["when"] == {"$datetime": "2026-01-31T12:30:00+00:00"}
    with running(client.worker(["default"], poll_interval=0.05)):
        raw = job.result(timeout=30)
    assert seen == [
        {
            "when": when,
            "day": date(2026, 2, 1),
            "ident": ident,
            "amount": Decimal("10.50"),
            "nested": [{"d": when}],
        }
    ]
    assert raw == {"echo": Decimal("10.50"), "at": when}  # the result round-trips too
    stored = client.get_job(job.id).result
    assert stored == {"echo": {"$decimal": "10.50"}, "at": {"$datetime": when.isoformat()}}
    assert postroom.Serializer().decode(stored) == raw


@dataclasses.dataclass
class Point:
    x: int
    y: int


class PointSerializer(postroom.Serializer):
    tags = (*postroom.Serializer.tags, "$point")

    def default(self, value: Any) -> Any:
        if isinstance(value, Point):
            return {"$point": dataclasses.asdict(value)}
        return super().default(value)

    def decode_tagged(self, tag: str, payload: Any) -> Any:
        if tag == "$point":
            return Point(**payload)
        return super().decode_tagged(tag, payload)


def test_a_client_serializer_encodes_other_types(dsn: str) -> None:
    seen: list[Point] = []
    with postroom.connect(dsn, serializer=PointSerializer()) as client:

        @client.job("plot")
        def plot(point: Point) -> None:
            seen.append(point)

        @client.job("mirror")
        def mirror(point: Point) -> Point:
            return point

        job = plot.enqueue(point=Point(1, 2))
        echoed = mirror.enqueue(point=Point(3, 4))
        with pytest.raises(InvalidType, match="argument 'other' of job 'plot2'"):
            client.enqueue("plot2", {"other": {1, 2}})
        with running(client.worker(["default"], poll_interval=0.05)):
            job.result(timeout=30)
            assert echoed.result(timeout=30) == Point(3, 4)
    assert seen == [Point(1, 2)]
    with pytest.raises(InvalidType, match=r"pass a postroom\.Serializer"):
        postroom.connect(dsn, serializer=object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("SELECT postroom.enqueue('bad kind!')", "invalid job kind name 'bad kind!'"),
        ("SELECT postroom.enqueue('k', '[1, 2]')", "invalid args \\[1, 2\\]: a JSON object"),
        ("SELECT postroom.enqueue('k', 'not json')", "invalid args 'not json': JSON object"),
        ("SELECT postroom.enqueue('k', queue => 'a b')", "invalid queue name 'a b'"),
        ("SELECT postroom.enqueue('k', priority => 40000)", "invalid priority 40000"),
        ("SELECT postroom.enqueue('k', max_attempts => 0)", "invalid max_attempts 0"),
        ("SELECT postroom.enqueue('k', unique_key => '')", "invalid unique_key"),
        ("SELECT postroom.enqueue('k', after => ARRAY[424242])", "parent job 424242 not found"),
        ("SELECT postroom.enqueue('k', on_parent_failure => 'x')", "invalid on_parent_failure"),
        ("SELECT postroom.enqueue(NULL)", "invalid job kind name NULL"),
        ("SELECT postroom.enqueue('k', unique_key => 'u', sequence => 's')", "cannot be combined"),
    ],
)
def test_sql_enqueue_rejects_bad_input_with_one_clear_error(
    client: postroom.Client, dsn: str, statement: str, message: str
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message) as caught:
            conn.execute(statement.encode())
    assert caught.value.diag.sqlstate == "22023"
    assert "violates check constraint" not in str(caught.value)
    assert scalar(dsn, "SELECT count(*) FROM postroom.jobs") == 0


def test_sql_enqueue_takes_jsonb_or_text_without_casts(client: postroom.Client, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        by_text = conn.execute(b"SELECT postroom.enqueue('k', %s)", ['{"n": 1}']).fetchone()
        by_json = conn.execute(
            b"SELECT postroom.enqueue('k', %s, queue => 'q')", [Jsonb({"n": 2})]
        ).fetchone()
        literal = conn.execute(b"""SELECT postroom.enqueue('k', '{"n": 3}')""").fetchone()
        bare = conn.execute(b"SELECT postroom.enqueue('k')").fetchone()
    assert by_text and by_json and literal and bare
    assert client.get_job(by_text[0]).args == {"n": 1}
    assert (client.get_job(by_json[0]).args, client.get_job(by_json[0]).queue) == ({"n": 2}, "q")
    assert client.get_job(literal[0]).args == {"n": 3}
    assert client.get_job(bare[0]).args == {}


def test_types_shared_by_the_twins_are_one_class() -> None:
    from postroom.queue import enqueue, enqueue_async, jobs

    for name in ("JobRequest", "JobRegistry"):
        assert vars(enqueue)[name] is vars(enqueue_async)[name], name
    assert vars(enqueue)["JobRequest"] is postroom.JobRequest
    for name in ("JobRegistry", "AsyncJob", "AsyncJobFunction"):
        assert name.removeprefix("Async") in vars(jobs), name
    assert postroom.Client.__mro__ == (postroom.Client, object)  # composition, no mixin


def test_a_list_as_args_of_a_registered_kind_is_refused(client: postroom.Client) -> None:
    @client.job("registered")
    def registered(n: int) -> None: ...

    with pytest.raises(InvalidType, match="args of job 'registered' must be a mapping"):
        client.enqueue("registered", [1, 2])  # type: ignore[arg-type]


def test_the_serializer_writes_what_the_json_encoder_writes() -> None:
    """The C encoder is made once (not per call, as JSONEncoder.encode does): same text, same
    errors, and a cycle is a ValueError, not a RecursionError."""
    serializer = postroom.Serializer()
    reference = json.JSONEncoder(
        separators=(",", ":"), allow_nan=False, default=serializer.default
    ).encode
    values: list[Any] = [
        {"n": 1, "s": 'é\u2028"\\', "l": [1, 2.5, None, True, False], "d": {"x": []}},
        {"at": datetime(2030, 1, 1, tzinfo=UTC), "u": UUID(int=5), "m": Decimal("1.50")},
        {1: "int key", None: "none key"},
        "text",
        1e300,
    ]
    for value in values:
        assert serializer.dumps(value) == reference(value)
    for bad in ({"x": float("nan")}, {"x": object()}, {(1, 2): 3}):
        with pytest.raises((TypeError, ValueError)):
            serializer.dumps(bad)
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="circular"):
        serializer.dumps({"c": cycle})


def test_a_cyclic_argument_is_named(client: postroom.Client) -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(InvalidType, match="argument 'c' of job 'k' cannot be serialized"):
        client.enqueue("k", {"c": cycle})


def test_loads_reads_jsonb_text_as_decode_reads_the_parsed_value() -> None:
    """The worker reads job arguments as jsonb text through ``Serializer.loads``, which skips
    the walk for tags when no tag occurs in the text: same values as ``decode(json.loads())``
    for tagged and untagged documents, a subclass's tags and ``decode``, and bad JSON."""
    serializer = postroom.Serializer()
    texts = [
        '{"n": 1}',
        '{"at": {"$datetime": "2030-01-01T00:00:00+00:00"}, "l": [{"$date": "2030-01-02"}]}',
        '{"u": {"$uuid": "00000000-0000-0000-0000-000000000005"}, "m": {"$decimal": "1.50"}}',
        '{"s": "$date", "d": {"$date": "2030-01-02", "other": 1}}',  # not tagged objects
        '{"point": {"$point": {"x": 1, "y": 2}}}',
        ' {"n": 2} ',
        "[1, 2]",
    ]
    for text in texts:
        assert serializer.loads(text) == serializer.decode(json.loads(text)), text
    points = PointSerializer()
    assert points.loads('{"p": {"$point": {"x": 1, "y": 2}}}') == {"p": Point(1, 2)}
    points.tags = ("$point",)  # tags changed on the instance after a first call
    assert points.loads('{"p": {"$date": "2030-01-02"}}') == {"p": {"$date": "2030-01-02"}}

    class Upper(postroom.Serializer):
        def decode(self, value: Any) -> Any:
            return {k.upper(): v for k, v in value.items()}

    assert Upper().loads('{"n": 1}') == {"N": 1}
    for bad in ("", "{", '{"n": 1} x'):
        with pytest.raises(json.JSONDecodeError):
            serializer.loads(bad)


def test_a_tagged_argument_reaches_the_job_decoded(client: postroom.Client) -> None:
    seen: list[Any] = []

    @client.job("tagged")
    def tagged(at: datetime, plain: dict[str, Any]) -> None:
        seen.append((at, plain))

    at = datetime(2030, 1, 1, tzinfo=UTC)
    job = tagged.enqueue(at=at, plain={"$note": "not a tag", "d": date(2030, 1, 2)})
    with running(client.worker(["default"], poll_interval=0.05)):
        job.result(timeout=30)
    assert seen == [(at, {"$note": "not a tag", "d": date(2030, 1, 2)})]
