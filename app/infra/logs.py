"""Logs as JSON, one object per line (ENGRAM_LOG_FORMAT=json, `engram serve`'s default), or as
plain text (ENGRAM_LOG_FORMAT=text).

A JSON line holds the time, level, logger and message, and the fields a record carries in
`extra` among FIELDS (the request line's: app/http/observe.py). Nothing else of a record is
written: keys, signatures, payment headers, tokens and memory content are never put in a log
record's fields, and a test greps a paid flow's logs for each of them
(tests/http/test_observability.py)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

FIELDS = ("request_id", "method", "route", "status", "duration_ms", "wallet", "paid")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            if name in record.__dict__:
                line[name] = record.__dict__[name]
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(log_format: str, level: int = logging.INFO) -> None:
    """Route every logger (uvicorn's too) through one stderr handler in the chosen format."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
