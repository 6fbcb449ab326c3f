"""``--workers N``: N server processes on one port and one store, watched by the process that started them.

Usage: ``redisai-server --workers 4 [--dir DIR | --redis-url URL] ...``

Why processes: one Python process serves from one event loop, and its hand-offs to device threads pay for
the GIL (docs/performance.md). N processes use N cores, as uvicorn's and gunicorn's workers do. The
supervisor owns the port: it refuses one that any process listens on (a single process's EADDRINUSE message
and exit status), then makes one SO_REUSEPORT listening socket per worker and hands it down, so the kernel
spreads connections over the workers and no second server can share the port (server/port_owner.py).

What they share, they share through the store: keys, models and scripts, AI.INFO counters and scans
(server/store/atomic.py); each process's cache is kept coherent by the store's invalidations. What stays per
process: its connections (CLIENT LIST, INFO clients), its device queues and loaded handles, AI.CONFIG changes
made at run time, and its Prometheus metrics (worker i serves them on ``--metrics-port`` + i).

This process (the supervisor) starts the embedded store when there is no ``--redis-url`` (one store for all
workers), forks the workers before it ever starts a thread or an event loop, and then only waits: a worker
that dies is started again, and so is the store. SIGTERM or SIGINT stops the workers gracefully, then the
store; a second one while they drain makes them stop at once. Each worker has its own process group, as the
store has its own session: a terminal's Ctrl-C (SIGINT to the foreground group) reaches the supervisor only,
which sends the workers one SIGTERM (had they got the SIGINT too, that SIGTERM would be their second, and
they would skip the drain). Workers and store get SIGTERM from the kernel if the supervisor itself dies
(``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

from server.config import Config
from server.ops.banner import redact_url
from server.port_owner import close_all, open_worker_sockets
from server.store.process import StoreProcess, StoreStartError, find_store_binary

log = logging.getLogger("redisai.supervisor")

RESTART_DELAY_S = 0.5  # before starting again a worker that died within STABLE_AFTER_S of its start
STABLE_AFTER_S = 2.0
QUICK_EXITS_TO_GIVE_UP = 5  # a worker that dies that many times in a row within STABLE_AFTER_S: stop, exit 1
STOP_GRACE_S = 5.0  # on top of --shutdown-timeout, before a worker that will not stop is killed


class _Stop(Exception):
    """Raised from the signal handler: leave the wait loop and shut everything down."""


class _GiveUp(Exception):
    """A worker cannot start (its port taken, a bad setting): stop everything and exit 1, as one process does."""


class Supervisor:
    """Starts the store and the workers, keeps them running, stops them."""

    def __init__(self, config: Config, serve: Callable[[Config], int]) -> None:
        self.config = config
        self._serve = serve
        self._store: StoreProcess | None = None
        self._workers: dict[int, tuple[int, float]] = {}  # pid -> (index, started at)
        self._quick_exits: dict[int, int] = {}  # worker index -> its exits in a row within STABLE_AFTER_S
        self._starts: dict[int, int] = {}  # worker index -> how many times it was started before the last one
        self._stopping = False  # a SIGTERM/SIGINT came
        self._waiting = False  # blocked in os.wait(): the one place the signal handler raises _Stop
        self._sockets: list[list[socket.socket]] = []  # worker index -> its listening sockets on --port
        self._tls_sockets: list[list[socket.socket]] = []  # worker index -> those on --tls-port (if any)

    @property
    def _stable_after(self) -> float:
        """How long a worker must have run for its exit not to count as failing to start: STABLE_AFTER_S past the
        store's time limit, since a worker whose store never answers waits that long before it exits 1."""
        return STABLE_AFTER_S + self.config.store_timeout_ms / 1000

    def run(self) -> int:
        try:
            worker_config = self._prepare()
        except (OSError, StoreStartError) as exc:
            print(f"redisai-server: {exc}", file=sys.stderr)
            self._stop_store()
            return 1
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_stop_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        code = 0
        try:
            for index in range(self.config.workers):
                self._spawn(index, worker_config)
                self._stop_if_asked()
            log.info("%d workers on port %d (store: %s)", self.config.workers, worker_config.port,
                     redact_url(worker_config.redis_url))
            self._watch(worker_config)
        except _Stop:
            pass
        except _GiveUp:
            code = 1
        finally:
            self._stopping = True  # a signal from here on is a second one, whatever ended the loop
            self._let_go_of_the_port()
            self._stop_workers()
            self._stop_store()
        return code

    def _prepare(self) -> Config:
        """The port every worker will use (refused at once when another process listens there), then the store."""
        hosts = self.config.bind_addresses
        port = self.config.port or _free_port(hosts[0] if hosts else "")
        self._sockets = open_worker_sockets(hosts, port, self.config.workers)
        if self.config.tls_enabled and self.config.tls_port:
            self._tls_sockets = open_worker_sockets(hosts, self.config.tls_port, self.config.workers)
        url = self.config.redis_url
        if not url:
            self._store = StoreProcess(find_store_binary(self.config.store_bin), self.config.dir)
            asyncio.run(self._store.start())  # a loop that is closed again: nothing runs before the forks
            url = f"unix://{self._store.socket_path}"
        return self.config.replace(redis_url=url, dir="", store_bin="", workers=1, port=port)

    def _on_stop_signal(self, _signum: int, _frame: object) -> None:
        """The first SIGTERM or SIGINT ends the watch loop (raised only while it blocks in os.wait, so never
        between a fork and the record of its pid, nor between a reap and its bookkeeping: elsewhere the loop
        sees the flag). A later one while the workers drain: a second SIGTERM to each, which makes it skip the
        rest of its drain, as a single process does on its second signal."""
        if self._stopping:
            for pid in list(self._workers):
                _signal(pid, signal.SIGTERM)
            return
        self._stopping = True
        if self._waiting:
            raise _Stop

    def _stop_if_asked(self) -> None:
        if self._stopping:
            raise _Stop

    def _spawn(self, index: int, config: Config) -> None:
        starts = self._starts[index] = self._starts.get(index, -1) + 1
        config = config.replace(worker_index=index, worker_count=self.config.workers, worker_starts=starts)
        if self.config.metrics_port:
            config = config.replace(metrics_port=self.config.metrics_port + index)
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                _die_with_parent()
                os.setpgid(0, 0)  # Ctrl-C's SIGINT goes to the supervisor only (module docstring)
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    signal.signal(signum, signal.SIG_DFL)
                code = self._serve(self._hand_sockets(index, config))
            finally:
                os._exit(code)
        self._workers[pid] = (index, time.monotonic())

    def _hand_sockets(self, index: int, config: Config) -> Config:
        """In worker ``index``: keep its own listening sockets (as file descriptors its server adopts), close the
        other workers'."""
        own: dict[str, tuple[int, ...]] = {}
        for name, groups in (("listen_fds", self._sockets), ("tls_listen_fds", self._tls_sockets)):
            close_all(group for i, group in enumerate(groups) if i != index)
            own[name] = tuple(sock.detach() for sock in groups[index]) if groups else ()
        return config.replace(**own)

    def _watch(self, config: Config) -> None:
        while True:
            self._waiting = True
            try:
                self._stop_if_asked()
                pid, status = os.wait()
            finally:
                self._waiting = False
            if self._store is not None and pid == self._store.pid:
                log.warning("the store stopped (%s); starting it again", describe_exit(status))
                self._restart_store()
                continue
            index, started = self._workers.pop(pid, (None, 0.0))
            if index is None:
                continue
            quick = time.monotonic() - started < self._stable_after
            self._quick_exits[index] = self._quick_exits.get(index, 0) + 1 if quick else 0
            if self._quick_exits[index] >= QUICK_EXITS_TO_GIVE_UP:
                log.error("worker %d (pid %d) stopped (%s), %d times in a row within %gs of its start; "
                          "giving up", index, pid, describe_exit(status), QUICK_EXITS_TO_GIVE_UP, self._stable_after)
                raise _GiveUp
            log.warning("worker %d (pid %d) stopped (%s); starting it again", index, pid, describe_exit(status))
            if quick:
                time.sleep(RESTART_DELAY_S)
            self._spawn(index, config)

    def _restart_store(self) -> None:
        assert self._store is not None
        while True:
            self._stop_if_asked()
            try:
                asyncio.run(self._store.start())
                return
            except (OSError, StoreStartError) as exc:
                log.error("the store did not start again: %s", exc)
                time.sleep(RESTART_DELAY_S)

    def _stop_workers(self) -> None:
        for pid in self._workers:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.config.shutdown_timeout + STOP_GRACE_S
        while self._workers and time.monotonic() < deadline:
            for pid in list(self._workers):
                if _reaped(pid, os.WNOHANG):
                    self._workers.pop(pid)
            time.sleep(0.02)
        for pid in self._workers:
            _signal(pid, signal.SIGKILL)
            _reaped(pid, 0)
        self._workers.clear()

    def _let_go_of_the_port(self) -> None:
        """Close the supervisor's copies of the listening sockets: once a draining worker closes its own, the
        port refuses new connections (held here, they would wait in the backlog of a socket nobody serves)."""
        close_all([*self._sockets, *self._tls_sockets])
        self._sockets, self._tls_sockets = [], []

    def _stop_store(self) -> None:
        self._let_go_of_the_port()
        if self._store is not None:
            self._store.stop()


def describe_exit(status: int) -> str:
    """A wait status in words: ``exit code 1``, ``killed by signal 9 (SIGKILL)`` (not the raw 256 or 9)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            return f"killed by signal {number}"
        return f"killed by signal {number} ({name})"
    if os.WIFEXITED(status):
        return f"exit code {os.WEXITSTATUS(status)}"
    return f"wait status {status}"


def _reaped(pid: int, options: int) -> bool:
    """``os.waitpid``: whether ``pid`` has exited; a child already reaped (by os.wait, when _Stop came just
    after it returned) counts as exited."""
    try:
        return os.waitpid(pid, options)[0] != 0
    except ChildProcessError:
        return True


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the supervisor dies, and give up if it already has."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except AttributeError:
        return
    if os.getppid() != parent:
        os._exit(0)


def _free_port(host: str) -> int:
    """One free port for every worker of ``--port 0``."""
    with socket.socket() as sock:
        sock.bind((host or "127.0.0.1", 0))
        return int(sock.getsockname()[1])
