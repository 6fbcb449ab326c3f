"""Health and readiness: is the process alive (``/healthz``), can it serve (``/readyz``), and the store watch.

Usage: ``curl http://127.0.0.1:<metrics-port>/readyz`` → ``200 ready`` or ``503 not ready: <reason>``.

PING keeps its Redis meaning (this process answers) and says nothing about the store; readiness does:

* the store answers a PING within ``STORE_CHECK_TIMEOUT_S`` (a stopped, unreachable or refusing store is a
  reason), and a SCAN (a store still LOADING its data after a restart is a reason too);
* every backend the stored models and scripts need can load: a backend not loaded yet is loaded now, off the
  event loop (the first probe after a start warms torch, say), and one that cannot load is a reason;
* the server is not shutting down;
* ``--preload``'s models and scripts are loaded (``not ready: preloading: 2 of 5 loaded, waiting for …``).

The store watch PINGs the store every ``WATCH_INTERVAL_S`` and logs the moment it is lost and regained (at
warning and notice), whoever else notices: a store nobody sends commands to is watched too. A store regained
is asked its version again (INFO server, HELLO and the banner's figures follow an upgraded store).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from backends.errors import AIError
from server.ops.banner import parse_store_version
from server.ops.preload import Preload
from server.store.stored_objects import backends_needed

if TYPE_CHECKING:
    from server.ops.metrics import ObservedServer

log = logging.getLogger("redisai.health")

STORE_CHECK_TIMEOUT_S = 2.0  # under the 3 s of the Docker healthcheck's timeout
BACKEND_WAIT_S = 0.5  # a backend loading takes longer: "loading" now, ready at a later probe
WATCH_INTERVAL_S = 1.0

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Verdict:
    """A readiness answer: ready, or the reason it is not."""

    ready: bool
    reason: str = ""


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # a check given up on by its timeout still ends; nobody logs "never retrieved"


async def bounded(step: Awaitable[T], timeout: float) -> T:
    """``step`` within ``timeout`` seconds, else TimeoutError; the step itself is left to finish in the background,
    so a connection being made to the store is never cut half-way. (``asyncio.wait``, not ``wait_for``: on
    Python 3.11 ``wait_for`` can swallow the cancellation of its caller when the step ends at that moment.)"""
    task = asyncio.ensure_future(step)
    task.add_done_callback(_retrieve)
    done, _ = await asyncio.wait([task], timeout=timeout)
    if not done:
        raise TimeoutError
    return task.result()


class Health:
    """Readiness checks and the store watch of one server (``Server.health``)."""

    def __init__(self, ctx: ObservedServer) -> None:
        self.ctx = ctx
        self._loading: dict[str, asyncio.Task[object]] = {}
        self._watch: asyncio.Task[None] | None = None
        self.store_up = True
        self._lost_at = 0.0
        self.preload: Preload | None = None  # --preload's progress: not ready until it is done

    async def readiness(self) -> Verdict:
        """Ready, or the first reason not to be (shutting down, the store, a backend)."""
        if self.ctx.shutting_down:
            return Verdict(False, "shutting down")
        problem = await self.store_problem()
        if not problem and self.preload is not None:
            problem = self.preload.reason()
        if not problem:
            problem = await self._backends_problem()
        return Verdict(not problem, problem)

    async def store_problem(self) -> str:
        """'' when the store answers PING; else why not."""
        store = self.ctx.store
        try:
            (reply,) = await bounded(store.link(store.default_db).pipeline([[b"PING"]]), STORE_CHECK_TIMEOUT_S)
        except TimeoutError:
            return f"the store ({store.describe()}) did not answer within {STORE_CHECK_TIMEOUT_S:g}s"
        except (AIError, OSError) as exc:
            return f"the store is unavailable: {exc}"
        if isinstance(reply, AIError):  # NOAUTH, a store that refuses us
            return f"the store refused PING: {reply}"
        return ""

    async def _backends_problem(self) -> str:
        try:
            needed = await bounded(self._needed(), STORE_CHECK_TIMEOUT_S)
        except TimeoutError:
            return f"the store did not list the stored models within {STORE_CHECK_TIMEOUT_S:g}s"
        except (AIError, OSError) as exc:  # LOADING, BUSY, a connection lost
            return f"the store cannot list the stored models: {exc}"
        for backend, key in sorted(needed.items()):
            problem = await self._backend_problem(backend)
            if problem:
                return f"backend {backend} (needed by '{key.decode(errors='backslashreplace')}') {problem}"
        return ""

    async def _needed(self) -> dict[str, bytes]:
        """Backends the stored objects need, over the default database and every other database with keys."""
        store = self.ctx.store
        databases = {store.default_db, *databases_listed(await store.info(["keyspace"]))}
        needed: dict[str, bytes] = {}
        for db in sorted(databases):
            for backend, key in (await backends_needed(self.ctx.keyspace(db))).items():
                needed.setdefault(backend, key)
        return needed

    async def _backend_problem(self, name: str) -> str:
        """'' when backend ``name`` is loaded (loading it in a thread first, if need be); else why not."""
        registry = self.ctx.ai.backends
        if name in registry.loaded():
            return ""
        task = self._loading.get(name)
        if task is None:
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(registry.get, name))
            task.add_done_callback(_retrieve)
            self._loading[name] = task
        await asyncio.wait([task], timeout=BACKEND_WAIT_S)
        if not task.done():
            return "is loading"
        del self._loading[name]  # loaded (the registry keeps it), or failed (tried again at the next probe)
        error = task.exception()
        return "" if error is None else f"cannot be loaded: {error}"

    # --- the store watch ----------------------------------------------------------------------------------------

    def start_watch(self) -> None:
        self._watch = asyncio.get_running_loop().create_task(self._watch_store())

    async def stop_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    async def _watch_store(self) -> None:
        while self._watch is not None:
            was_up = self.store_up
            self.note_store(await self.store_problem())
            if self.store_up and not was_up:
                await self._reread_version()
            await asyncio.sleep(WATCH_INTERVAL_S)

    async def _reread_version(self) -> None:
        """A store that came back may be another version (restarted after an upgrade): INFO and HELLO follow it."""
        try:
            self.ctx.store_version = parse_store_version(
                await bounded(self.ctx.store.info(["server"]), STORE_CHECK_TIMEOUT_S))
        except (TimeoutError, AIError, OSError) as exc:
            log.warning("the store did not say its version: %s", exc)

    def note_store(self, problem: str) -> None:
        """Log a change of the store's state: lost (warning, with the reason) or regained (notice)."""
        if problem and self.store_up:
            self.store_up, self._lost_at = False, time.monotonic()
            log.warning("store lost", extra={"fields": {"store": self.ctx.store.describe(), "reason": problem}})
        elif not problem and not self.store_up:
            self.store_up = True
            log.info("store regained", extra={"fields": {"store": self.ctx.store.describe(),
                                                         "down_s": round(time.monotonic() - self._lost_at, 1)}})


def databases_listed(info_keyspace: str) -> list[int]:
    """The databases ``INFO keyspace`` lists (``db3:keys=…``)."""
    return [int(line[2:].split(":", 1)[0]) for line in info_keyspace.splitlines()
            if line.startswith("db") and line[2:].split(":", 1)[0].isdigit()]
