"""The server's log: redis-server's levels, one text or JSON line per event, on stderr or in a logfile.

Usage: ``redisai-server --log-level verbose --log-format json --logfile /var/log/redisai.log``

Levels, lowest first: ``debug`` (10), ``verbose`` (15: client connects and disconnects), ``notice`` (20, Python's
INFO: models and scripts stored or loaded, failed runs, the store lost and regained, workers stuck or replaced,
start and shutdown), ``warning`` (30). ``info`` is accepted as ``notice``.

An event is an ordinary ``logging`` call whose fields ride in ``extra={"fields": {...}}`` (any layer can log one
without importing this module). The text format writes them after the message as ``key=value``; the JSON format
writes one object per line: ``ts`` (ISO 8601, UTC), ``pid``, ``level``, ``logger``, ``msg`` and the fields as keys
of their own.
``extra={"json_fields": {...}}`` are for the JSON format only (the banner: its text lines already say them).
Per-request paths check ``isEnabledFor`` before building an event, so a level that is off costs one comparison.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from datetime import UTC, datetime
from typing import Any

from server.config import Config

VERBOSE = 15
NOTICE = logging.INFO
LEVELS = {"debug": logging.DEBUG, "verbose": VERBOSE, "info": NOTICE, "notice": NOTICE, "warning": logging.WARNING,
          "error": logging.ERROR}
LEVEL_NAMES = {logging.DEBUG: "debug", VERBOSE: "verbose", NOTICE: "notice", logging.WARNING: "warning",
               logging.ERROR: "error", logging.CRITICAL: "critical"}
TEXT_FORMAT = "%(asctime)s %(process)d %(levelname).1s %(name)s: %(message)s"


def event_fields(record: logging.LogRecord, name: str = "fields") -> dict[str, Any]:
    """The fields an event carries (``extra={"fields": ...}``); {} for a plain log call."""
    found = getattr(record, name, None)
    return found if isinstance(found, dict) else {}


def _plain(value: Any) -> Any:
    """bytes (keys) as text; numbers, strings, lists and dicts as JSON has them; anything else as its str."""
    if isinstance(value, bytes):
        return value.decode(errors="backslashreplace")
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return str(value)


def _text_value(value: Any) -> str:
    plain = _plain(value)
    text = plain if isinstance(plain, str) else json.dumps(plain, ensure_ascii=False)
    return json.dumps(text) if not text or any(c in text for c in " =\"\n") else text


class TextFormatter(logging.Formatter):
    """``2026-12-01 17:36:13,172 26824 I redisai.model: model stored key=m backend=TORCH ...``"""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = event_fields(record)
        if not extra:
            return line
        head, newline, tail = line.partition("\n")  # fields on the message's line, a traceback after it
        pairs = " ".join(f"{key}={_text_value(value)}" for key, value in extra.items())
        return f"{head} {pairs}{newline}{tail}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers: no parsing rules to write."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "pid": record.process,
            "level": LEVEL_NAMES.get(record.levelno, record.levelname.lower()),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in (event_fields(record) | event_fields(record, "json_fields")).items():
            entry.setdefault(key, _plain(value))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def make_handler(config: Config) -> logging.Handler:
    """stderr, or the logfile (a WatchedFileHandler: reopened when logrotate moves the file away). Raises
    OSError when the logfile cannot be opened."""
    handler: logging.Handler
    if config.logfile:
        handler = logging.handlers.WatchedFileHandler(config.logfile, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if config.log_format == "json" else TextFormatter())
    return handler


def setup_logging(config: Config) -> None:
    """Configure the process's root logger from the settings (called once, by the CLI, before any fork)."""
    logging.addLevelName(VERBOSE, "VERBOSE")
    logging.addLevelName(NOTICE, "NOTICE")
    logging.basicConfig(level=LEVELS[config.log_level], handlers=[make_handler(config)], force=True)
