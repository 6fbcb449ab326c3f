"""INFO: our own sections, merged with what the backing store reports (COMMAND: command_info.py)."""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from typing import TYPE_CHECKING, Any

from server.commands.context import REDIS_COMPAT_VERSION, VERSION
from server.commands.info_ai import ai_sections, commandstats_lines
from server.commands.info_text import (
    merged,
    module_lines,
    render,
    split_sections,
    store_key,
    title_of,
    wanted_sections,
)
from server.commands.stored import count_stored
from server.protocol.reply import Verbatim

if TYPE_CHECKING:
    from server.commands.context import Client

def _server_section(client: Client) -> list[tuple[str, object]]:
    """Ours in place of the store's: process, port, uptime. ``redis_version`` stays the store's own (what a client
    feature-checks is what the store behind us can do: every command we do not answer ourselves is its), with
    ``REDIS_COMPAT_VERSION`` only when the store did not say; ``redisai_server_version`` is ours and
    ``store_version`` names the store (``valkey 8.1.8 (redis_version 7.2.4)``)."""
    ctx = client.ctx
    uptime = int(time.time() - ctx.started_at)
    return [
        ("redis_version", ctx.store_version.redis_version or REDIS_COMPAT_VERSION),
        ("redisai_server_version", VERSION),
        ("store_version", ctx.store_version.describe()),
        ("redis_mode", "standalone"),
        ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("python_version", sys.version.split()[0]),
        ("process_id", ctx.pid),
        ("tcp_port", ctx.tcp_port),
        ("uptime_in_seconds", uptime),
        ("uptime_in_days", uptime // 86400),
        ("backing_store", ctx.store.describe()),
        *_embedded_store_fields(ctx.store),
        ("threads_per_queue", ctx.config.threads_per_queue),
    ]


def _embedded_store_fields(store: object) -> list[tuple[str, object]]:
    """The embedded store's process id and binary version (operators and benchmarks watch its CPU and memory)."""
    process = getattr(store, "process", None)
    if process is None:
        return []
    return [("embedded_store_pid", process.pid), ("embedded_store_version", process.version or "unknown")]


def _clients_section(client: Client) -> list[tuple[str, object]]:
    clients = list(client.ctx.clients.values())
    return [
        ("connected_clients", len(clients)),
        ("pubsub_clients", sum(1 for c in clients if c.subscribed())),
        ("clients_in_transaction", sum(1 for c in clients if c.state.in_multi)),
    ]


def _stats_section(client: Client) -> list[tuple[str, object]]:
    stats = client.ctx.stats
    return [
        ("total_connections_received", stats.connections_received),
        ("total_commands_processed", stats.commands_processed),
        ("rejected_connections", stats.rejected_connections),
        ("total_protocol_errors", stats.protocol_errors),
    ]


# The store process's own executable, config file and listeners (the embedded store's private socket) say
# nothing about this server: left out of its Server section.
_STORE_PROCESS_FIELDS = ("executable:", "config_file:", "listener")
_OUR_FIELDS = {"server": _server_section, "clients": _clients_section, "stats": _stats_section}


async def cmd_info(client: Client, argv: list[bytes]) -> Any:
    """INFO [section ...]: Redis 7's sections and groups (default, all, everything), each from the store with
    our own fields merged in (server/commands/info_text.py); our commands in commandstats; the ``ai`` module
    in the module list; the ``ai_*`` sections under ``ai``, ``modules`` and ``everything``."""
    wanted = wanted_sections([a.decode(errors="replace") for a in argv[1:]])
    asked = list(dict.fromkeys(store_key(s) for s in wanted if s != "ai" and not s.startswith("ai_")))
    store = split_sections(await client.ctx.store.info(asked)) if asked else {}
    stored = await count_stored(client.keyspace()) if {"ai", "ai_runs"} & set(wanted) else (0, 0)
    parts = [part for section in wanted for part in _section(client, section, store, stored)]
    body = "\r\n".join(parts).encode()
    return Verbatim(body) if client.state.proto == 3 else body


def _section(client: Client, section: str, store: dict[str, list[str]], stored: tuple[int, int]) -> list[str]:
    """The rendered text(s) of one wanted section (none when neither we nor the store have it)."""
    if section == "ai" or section.startswith("ai_"):  # all of the module's sections, or the one named
        return [text for text in ai_sections(client.ctx, stored)
                if section == "ai" or text.startswith(f"# {section}\r\n")]
    lines = store.get(store_key(section))
    if section == "module_list":
        return [render(title_of(section), module_lines(lines or []))]
    if section in _OUR_FIELDS:
        theirs = [line for line in lines or [] if not line.startswith(_STORE_PROCESS_FIELDS)]
        return [render(title_of(section), merged(theirs, _OUR_FIELDS[section](client)))]
    if section == "commandstats":  # the store's lines, ours in place of a command both count (PING, SELECT …)
        ours: list[tuple[str, object]] = [(key, value) for key, _, value in
                                          (line.partition(":") for line in commandstats_lines(client.ctx))]
        return [render(title_of(section), merged(lines or [], ours))]
    if section == "memory":  # ours first, under names of their own; the store's after, as the store says them
        return [render(title_of(section), [*process_memory_lines(), *(lines or [])])]
    if lines is None:
        return []
    return [render(title_of(section), lines)]


def process_memory_lines() -> list[str]:
    """This server process's own memory (``server_process_*``: resident now and at its peak, virtual), beside the
    store's Redis-named figures (``used_memory``, ``maxmemory`` …), which describe the store process: the keys
    live there, and clients and exporters read those names as on any Redis."""
    rss, vms = _current_memory()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return [*_bytes_fields("server_process_rss", rss), *_bytes_fields("server_process_peak_rss", max(peak, rss)),
            *_bytes_fields("server_process_virtual_memory", vms), f"server_process_id:{os.getpid()}"]


def _bytes_fields(name: str, value: int) -> list[str]:
    return [f"{name}:{value}", f"{name}_human:{value / 1048576:.2f}M"]


def _current_memory() -> tuple[int, int]:
    """(resident, virtual) bytes of this process, from /proc/self/statm."""
    try:
        with open("/proc/self/statm") as handle:
            size, resident = (int(field) for field in handle.read().split()[:2])
            page = os.sysconf("SC_PAGE_SIZE")
            return resident * page, size * page
    except (OSError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, 0

