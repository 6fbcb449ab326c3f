"""``python -m server`` / ``redisai-server``: parse the settings and run the server."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from collections.abc import Sequence

from backends.errors import AIError
from server.app import Server
from server.config import Config, ConfigError, load_config, requested_action
from server.ops.allocator import keep_big_buffers_in_heap
from server.ops.banner import version_text
from server.ops.logs import setup_logging
from server.ops.native_log import capture_native_stderr

GC_YOUNG_THRESHOLD = 20_000


def tune_garbage_collector() -> None:
    """Collect young objects every 20k net allocations instead of 700: a request allocates a few hundred
    short-lived containers, and at CPython's default the cyclic collector ran every few requests (~7% of
    the server's CPU under load, py-spy). What start-up left (modules, the command table) is frozen out of
    every later collection. Reference counting still frees almost everything at once; only cycles wait."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def main(argv: Sequence[str] | None = None) -> int:
    """``redisai-server [config file] [--option value ...]``; ``--version``; ``--healthcheck``."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        action = requested_action(args)
        if action == "version":
            print(version_text())
            return 0
        config = load_config(args)
        if action == "healthcheck":
            from server.ops.probe import healthcheck

            return healthcheck(config)
        setup_logging(config)
    except (ConfigError, OSError) as exc:  # a bad setting, a logfile that cannot be opened
        print(f"redisai-server: {exc}", file=sys.stderr)
        return 1
    if config.workers > 1:
        from server.supervisor import Supervisor

        return Supervisor(config, serve).run()
    return serve(config)


def serve(config: Config) -> int:
    """Run one server process until it is stopped; the exit status."""
    loop_factory = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        logging.getLogger("redisai.server").info("uvloop not installed; using the asyncio event loop")
    capture_native_stderr(config)  # (per process, after the supervisor's fork: it starts a thread)
    keep_big_buffers_in_heap()
    tune_garbage_collector()
    server: Server | None = None
    try:
        server = Server(config)
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(server.serve())
    except (OSError, AIError) as exc:  # a port in use, an unreachable or refusing backing Redis
        print(f"redisai-server: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    if server is not None:
        _leave_stuck_threads(server)
    return 0


def _leave_stuck_threads(server: Server) -> None:
    """A worker thread abandoned to a script that never returns (dag/watchdog.py) would still be running inside
    TorchScript when the interpreter tears down, and torch then aborts the process (SIGABRT). Everything is
    already shut down and flushed by now, so such a process leaves at once, with status 0."""
    stuck = server.ctx.ai.queues.watchdog.stuck
    if stuck:
        logging.getLogger("redisai.server").warning("exiting past %d worker thread(s) still running an abandoned op",
                                                    stuck)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
