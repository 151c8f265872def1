"""Dead letters' headers, with no I/O: what a dead letter carries (``postroom-dlq-*``), how
its replay is marked for the group that failed (``postroom-replay-*``), and who passes over a
replay (``deadletters_async.py`` writes and replays; the runner and the relay read these)."""

from __future__ import annotations

from collections.abc import Mapping

from .records import MAX_HEADER_BYTES, MAX_HEADERS, HeaderValue, Message, check_name
from .subscription import DLQ_SUFFIX

HEADER_PREFIX = "postroom-dlq-"
REPLAY_GROUP = "postroom-replay-group"
"""Header of a replayed dead letter: the group it is for (the one that failed on it)."""
REPLAY_OF = "postroom-replay-of"
"""Header of a replayed dead letter: the id of the message first dead-lettered."""

TRIMMED_HEADER = f"{HEADER_PREFIX}trimmed"
"""Set on a dead letter whose original headers did not all fit beside postroom's own."""


def _header_size(name: str, value: HeaderValue) -> int:
    """What a header counts against MAX_HEADER_BYTES (as records.encode_headers counts)."""
    raw = value if isinstance(value, bytes) else value.encode("utf-8", "replace")
    return len(name) + len(raw)


def fit_headers(
    original: Mapping[str, HeaderValue], own: dict[str, HeaderValue]
) -> dict[str, HeaderValue]:
    """A dead letter's headers: ``original`` then postroom's ``own``, always within the header
    limits. A poison whose headers leave no room (a message may carry up to MAX_HEADERS) keeps
    those that fit, in order, and gets ``postroom-dlq-trimmed`` saying how many were dropped:
    a dead letter that cannot be written would stop its partition for good (issue 23, item 8).
    ``own`` must fit by itself (a few short headers and an error cut to its limit)."""
    rest = {k: v for k, v in original.items() if k not in own}
    sizes = [_header_size(k, v) for k, v in rest.items()]
    own_size = sum(_header_size(k, v) for k, v in own.items())
    if len(rest) + len(own) <= MAX_HEADERS and sum(sizes) + own_size <= MAX_HEADER_BYTES:
        return {**rest, **own}
    note_room = len(TRIMMED_HEADER) + 120  # the note below is shorter than this
    room, slots = MAX_HEADER_BYTES - own_size - note_room, MAX_HEADERS - len(own) - 1
    kept: dict[str, HeaderValue] = {}
    for (name, value), size in zip(rest.items(), sizes, strict=True):
        if len(kept) < slots and size <= room:
            kept[name] = value
            room -= size
    note = (
        f"{len(rest) - len(kept)} of {len(rest)} original headers dropped to fit the limits "
        f"({MAX_HEADERS} headers, {MAX_HEADER_BYTES} bytes)"
    )
    return {**kept, **own, TRIMMED_HEADER: note}


def dead_letter_topic(topic: str) -> str:
    """``topic`` if it is already a dead-letter topic, else ``<topic>.dlq``."""
    check_name("topic", topic)
    return topic if topic.endswith(DLQ_SUFFIX) else f"{topic}{DLQ_SUFFIX}"


def replay_for_another_group(message: Message, group: str) -> bool:
    """True if ``message`` is a dead letter's replay for a group other than ``group``: that
    group's consumers pass over it (it succeeded for them the first time)."""
    target = message.headers.get(REPLAY_GROUP)
    if target is None:
        return False
    return (target if isinstance(target, str) else target.decode("utf-8", "replace")) != group


def header_text(value: HeaderValue | None) -> str | None:
    return value if value is None or isinstance(value, str) else value.decode("utf-8", "replace")


def replay_headers(letter: Mapping[str, HeaderValue]) -> dict[str, HeaderValue]:
    """The headers of a dead letter's replay: the failed message's own, marked for the group
    that failed (a dead letter that names none, written before postroom recorded it, goes to
    every group) and with the id of the message first dead-lettered."""
    headers = {k: v for k, v in letter.items() if not k.startswith(HEADER_PREFIX)}
    failed_group = letter.get(HEADER_PREFIX + "group")
    if failed_group is None:
        headers.pop(REPLAY_GROUP, None)
    else:
        headers[REPLAY_GROUP] = failed_group
    original = letter.get(REPLAY_OF) or letter.get(HEADER_PREFIX + "id")
    if original is not None:
        headers[REPLAY_OF] = original
    return headers
