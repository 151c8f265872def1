"""Log output of ``postroom worker``: ``--log-level`` and ``--log-format text|json``."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from postroom.errors import InvalidArgument

LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("text", "json")
# The attributes every LogRecord has; anything else was passed with ``extra=`` (job fields).
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the record's extra fields
    (``job_id``, ``kind``, ``attempt``, ``duration``, ...) and the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(level: str, fmt: str) -> None:
    """Send postroom's logs to stderr at ``level`` in ``fmt``."""
    if level.lower() not in LEVELS:
        raise InvalidArgument(f"invalid --log-level {level!r}: one of {', '.join(LEVELS)}")
    if fmt.lower() not in FORMATS:
        raise InvalidArgument(f"invalid --log-format {fmt!r}: one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    if fmt.lower() == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("postroom")
    logger.handlers = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
