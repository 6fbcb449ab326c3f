"""LoopScriptHost: how a script running on a worker thread reaches the store and the models.

``redis.execute(...)`` and ``redisAI.model_execute(...)`` run inside a script, on a device worker thread. The
event loop owns the store (the keyspace's pipelined link belongs to the loop and is not thread-safe), so
every request is handed to the loop with ``asyncio.run_coroutine_threadsafe`` and the worker waits for the
reply. That cannot deadlock: the loop never waits for a worker (``execute_run`` awaits a future). The wait is
still bounded, a closed loop is a clear error, and a call made on the loop thread itself is refused.

Both reach database 0 whatever database the client selected, as in RedisAI 1.2.7.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from backends import errors as msgs
from backends.base import LoadedModel
from backends.errors import AIError
from backends.objects import MODEL_META_FIELDS
from server.ai.state import ModelCache
from server.ai.stored import loaded_model, read_model_meta
from server.store.keyspace import Keyspace

CALL_TIMEOUT_S = 30.0
T = TypeVar("T")

# Commands that would change or block the keyspace's shared link (its database, a transaction, a
# subscription, a blocking wait) or the server's connections: refused, as Redis refuses them to Lua.
NOT_FROM_SCRIPTS = frozenset({
    b"MULTI", b"EXEC", b"DISCARD", b"WATCH", b"UNWATCH", b"SELECT", b"SUBSCRIBE", b"UNSUBSCRIBE", b"PSUBSCRIBE",
    b"PUNSUBSCRIBE", b"SSUBSCRIBE", b"SUNSUBSCRIBE", b"MONITOR", b"SYNC", b"PSYNC", b"REPLCONF", b"BLPOP",
    b"BRPOP", b"BRPOPLPUSH", b"BLMOVE", b"BLMPOP", b"BZPOPMIN", b"BZPOPMAX", b"BZMPOP", b"WAIT", b"WAITAOF",
    b"CLIENT", b"HELLO", b"AUTH", b"RESET", b"QUIT", b"SHUTDOWN",
})


def refused(argv: list[bytes]) -> bool:
    """True for a command a script may not send (``XREAD``/``XREADGROUP`` only when they would block)."""
    name = argv[0].upper() if argv else b""
    if name in (b"XREAD", b"XREADGROUP"):
        return any(arg.upper() == b"BLOCK" for arg in argv[1:])
    return name in NOT_FROM_SCRIPTS


class LoopScriptHost:
    """A ``ScriptHost`` (backends/script_backend.py) over one server's event loop, keyspace and models."""

    def __init__(self, loop: asyncio.AbstractEventLoop, keyspace: Keyspace, models: ModelCache,
                 timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._loop = loop
        self._keyspace = keyspace
        self._models = models
        self._timeout_s = timeout_s

    def call(self, argv: list[bytes]) -> Any:
        """One command's reply value (an ``AIError`` value for an error reply or a refused command)."""
        if refused(argv):
            return AIError(msgs.REDIS_CALL_NOT_ALLOWED_MSG)
        return self._wait(self._keyspace.command(argv))

    def model(self, key: bytes) -> LoadedModel:
        """The model under ``key``, loaded through the server's model cache."""
        return self._wait(self._load_model(key))

    async def _load_model(self, key: bytes) -> LoadedModel:
        keyspace = self._keyspace
        values = (await keyspace.pipeline([(b"HMGET", key, *MODEL_META_FIELDS)]))[0]
        meta = await read_model_meta(self._models, keyspace, key, values)
        return await loaded_model(self._models, meta, keyspace, key)

    def _wait(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the loop and wait for it on this (worker) thread. A call given up on (the wait timed
        out) before the loop started it never starts: the script was told it failed, so it must not happen."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            work.close()
            raise AIError(msgs.SCRIPT_CALL_ON_LOOP_MSG)
        given_up = threading.Event()
        guarded = _unless_given_up(work, given_up)
        try:
            future = asyncio.run_coroutine_threadsafe(guarded, self._loop)
        except RuntimeError as exc:  # the loop is closed
            guarded.close()
            work.close()
            raise AIError(msgs.SCRIPT_CALL_LOOP_GONE_MSG) from exc
        try:
            return future.result(self._timeout_s)
        except concurrent.futures.TimeoutError as exc:
            given_up.set()
            future.cancel()
            raise AIError(msgs.SCRIPT_CALL_TIMEOUT_MSG) from exc
        except concurrent.futures.CancelledError as exc:
            raise AIError(msgs.SCRIPT_CALL_LOOP_GONE_MSG) from exc


async def _unless_given_up(work: Coroutine[Any, Any, T], given_up: threading.Event) -> T:
    """``work``, unless its caller stopped waiting before the loop came to it (a cancelled wait does not stop
    the loop from starting the task it scheduled)."""
    if given_up.is_set():
        work.close()
        raise asyncio.CancelledError
    return await work
