"""Warm start: load the stored models and scripts whose keys match a pattern onto their devices before clients
need them, so that the first requests of a new process do not pay the load (0.9 to 1.0 s for a torch model here).

Usage: ``redisai-server --preload 'resnet*'`` (each process loads at start: every ``--workers`` worker, every
replica behind a load balancer), or ``AI.CONFIG PRELOAD 'resnet*'`` (this process, now: the reply comes once
they are loaded, with how many).

The pattern is Redis's glob (``*``, ``?``, ``[abc]``), matched against every key of the server's database that
holds a model or a script (the same walk as AI._MODELSCAN). Each is loaded as its first run would load it (its
blob read, the backend's handle built off the event loop, kept in this process's cache by digest), one after the
other; a key that fails (a backend not installed, a key removed meanwhile) is logged at warning and skipped.
While a start-up preload runs, ``/readyz`` answers ``503 not ready: preloading: 2 of 5 loaded, waiting for m3,
m4, m5`` (server/ops/health.py), and readiness turns true once every key has been tried: a load balancer that
routes by readiness sends this process no request before its models are loaded. Graphs are not preloaded;
their models and scripts are when the pattern matches them.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time
from dataclasses import dataclass, field

from backends import errors as msgs
from backends.errors import AIError
from backends.objects import (
    MODEL_MARKER,
    MODEL_META_FIELDS,
    SCRIPT_MARKER,
    SCRIPT_META_FIELDS,
    decode_script_meta,
)
from server.ai.state import AIState
from server.ai.stored import compiled_script, loaded_model, require_model
from server.store.keyspace import Keyspace
from server.store.stored_objects import StoredObject, stored_objects

log = logging.getLogger("redisai.preload")

WAITING_SHOWN = 5  # keys named in /readyz's reason; the rest are counted


@dataclass
class Preload:
    """One preload's progress (a start-up's is kept on ``Health``, for /readyz)."""

    pattern: str
    total: int = 0
    loaded: int = 0
    failed: dict[bytes, str] = field(default_factory=dict)
    waiting: list[bytes] = field(default_factory=list)
    done: bool = False

    def reason(self) -> str:
        """Why a server still preloading is not ready ('' once done)."""
        if self.done:
            return ""
        if not self.total:
            return f"preloading: listing the stored models and scripts matching {self.pattern!r}"
        names = ", ".join(key.decode(errors="replace") for key in self.waiting[:WAITING_SHOWN])
        more = f" and {len(self.waiting) - WAITING_SHOWN} more" if len(self.waiting) > WAITING_SHOWN else ""
        return f"preloading: {self.loaded} of {self.total} loaded, waiting for {names}{more}"


def matches(pattern: str, key: bytes) -> bool:
    """Redis's glob against a key (bytes kept byte for byte: surrogateescape on both sides)."""
    return fnmatch.fnmatchcase(key.decode("utf-8", errors="surrogateescape"), pattern)


async def run_preload(ai: AIState, keyspace: Keyspace, progress: Preload) -> Preload:
    """Load every stored model and script matching ``progress.pattern``, one after the other (module
    docstring); ``progress`` is updated as it goes and returned, ``done`` in every case."""
    started = time.perf_counter()
    try:
        found = [item for item in await stored_objects(keyspace)
                 if item.marker in (MODEL_MARKER, SCRIPT_MARKER) and matches(progress.pattern, item.key)]
        progress.total, progress.waiting = len(found), [item.key for item in found]
        for item in found:
            await _load_one(ai, keyspace, item, progress)
    finally:
        progress.done = True
    log.info("preloaded", extra={"fields": {"pattern": progress.pattern, "loaded": progress.loaded,
                                            "failed": len(progress.failed),
                                            "ms": round((time.perf_counter() - started) * 1000, 1)}})
    return progress


async def _load_one(ai: AIState, keyspace: Keyspace, item: StoredObject, progress: Preload) -> None:
    try:
        if item.marker == MODEL_MARKER:
            await _load_model(ai, keyspace, item.key)
        else:
            await _load_script(ai, keyspace, item.key)
        progress.loaded += 1
    except AIError as exc:
        progress.failed[item.key] = exc.message
        log.warning("preload failed", extra={"fields": {"key": item.key, "error": exc.message}})
    finally:
        progress.waiting.remove(item.key)


async def _load_model(ai: AIState, keyspace: Keyspace, key: bytes) -> None:
    values, exists = await keyspace.pipeline([(b"HMGET", key, *MODEL_META_FIELDS), (b"EXISTS", key)])
    meta = require_model(ai.models.decode_meta(values, exists))
    await loaded_model(ai.models, meta, keyspace, key)


async def _load_script(ai: AIState, keyspace: Keyspace, key: bytes) -> None:
    values, exists = await keyspace.pipeline([(b"HMGET", key, *SCRIPT_META_FIELDS), (b"EXISTS", key)])
    meta = decode_script_meta(values, exists)
    if meta is None:
        raise AIError(msgs.SCRIPT_KEY_EMPTY_MSG)
    await compiled_script(ai.scripts, meta, keyspace, key)


def start_preload(ai: AIState, keyspace: Keyspace, pattern: str) -> tuple[Preload, asyncio.Task[Preload]]:
    """The start-up preload, in a task of its own (its progress for /readyz, and the task to cancel at shutdown)."""
    progress = Preload(pattern)
    task = asyncio.get_running_loop().create_task(_quietly(ai, keyspace, progress))
    return progress, task


async def _quietly(ai: AIState, keyspace: Keyspace, progress: Preload) -> Preload:
    """A start-up preload never ends the server: a store that fails the listing is logged, and readiness
    follows the store's own check from then on."""
    try:
        return await run_preload(ai, keyspace, progress)
    except (AIError, OSError) as exc:
        log.warning("preload stopped", extra={"fields": {"pattern": progress.pattern, "error": str(exc)}})
        return progress
