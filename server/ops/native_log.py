"""What native libraries write to stderr (TensorFlow, LiteRT, absl, oneDNN) carried as log records, so that
``--log-format json`` stays one JSON object a line and ``--logfile`` holds everything.

Usage: ``capture_native_stderr(config)`` once per server process, after any fork (``server.__main__.serve``).

Why: TF's and LiteRT's C++ code prints straight to file descriptor 2 (``I0000 … oneDNN custom operations are
on …``, ``WARNING: All log messages before absl::InitializeLog() …``, ``INFO: Created TensorFlow Lite XNNPACK
delegate for CPU.``), past Python's logging: a JSON log then had plain lines in it, and a ``--logfile`` left
them on the terminal. With ``--log-format json`` or ``--logfile``, descriptor 2 becomes a pipe: a daemon thread
reads it line by line and logs each line on the ``redisai.native`` logger (at warning when it says it is a
warning or an error, else at notice), formatted like every other record. Python's own writes (``sys.stderr``,
which the log handler uses) go to the original stderr, and Python warnings become records too
(``logging.captureWarnings``). With the text format on stderr nothing is changed: native lines are readable
there as they are. What a native crash prints as it dies may be lost with the reading thread: run with the
text format to see it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from typing import IO

from server.config import Config

log = logging.getLogger("redisai.native")

LINE_LIMIT = 8192  # longer native lines are logged in pieces
_WARNING = re.compile(r"\s*(?:[WEF]\d{4} |WARNING\b|ERROR\b|FATAL\b|CRITICAL\b)")  # absl's W0000 …, LiteRT's


def wanted(config: Config) -> bool:
    """Whether stderr is captured: the JSON format, or a logfile (native lines would escape it)."""
    return config.log_format == "json" or bool(config.logfile)


def capture_native_stderr(config: Config) -> bool:
    """Point descriptor 2 at a pipe read into log records (module docstring); False when not wanted or not
    possible (no pipe: the process keeps its plain stderr)."""
    if not wanted(config):
        return False
    logging.captureWarnings(True)
    try:
        original = os.dup(2)
        read_end, write_end = os.pipe()
    except OSError:
        return False
    stream = os.fdopen(original, "w", buffering=1, encoding="utf-8", errors="backslashreplace")
    _repoint_handlers(sys.stderr, stream)
    sys.stderr = stream
    os.dup2(write_end, 2)
    os.close(write_end)
    threading.Thread(target=_forward, args=(os.fdopen(read_end, "rb", buffering=0),), name="native-stderr",
                     daemon=True).start()
    return True


def _repoint_handlers(old: object, new: IO[str]) -> None:
    """Every stream handler writing to the old ``sys.stderr`` writes to the original stderr instead."""
    for logger in (logging.getLogger(), *(item for item in logging.root.manager.loggerDict.values()
                                         if isinstance(item, logging.Logger))):
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is old:
                handler.setStream(new)


def _forward(pipe: IO[bytes]) -> None:
    """Read native lines until the pipe closes (the process exits), each one a record."""
    pending = b""
    while True:
        try:
            chunk = pipe.read(65536)
        except OSError:
            return
        if not chunk:
            if pending:
                log_native_line(pending)
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            log_native_line(line)
        while len(pending) > LINE_LIMIT:
            log_native_line(pending[:LINE_LIMIT])
            pending = pending[LINE_LIMIT:]


def log_native_line(raw: bytes) -> None:
    """One native line as a record: at warning when it says it is one (W/E/F of absl's prefix, WARNING:,
    ERROR:), else at notice; blank lines are dropped."""
    text = raw.decode("utf-8", errors="backslashreplace").rstrip("\r")
    if not text.strip():
        return
    log.log(logging.WARNING if _WARNING.match(text) else logging.INFO, text)
