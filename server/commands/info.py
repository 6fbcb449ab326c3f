"""AI.INFO: per-key run statistics of models and scripts (REDISAI-REFERENCE.md §2.14).

    AI.INFO <key> [RESETSTAT]

The counters live in the store, in a hash beside the object (``__redisai_stats__:<key>``, server/store/atomic.py):
zeroed when a model or script is stored, incremented after every run in the run's own write round trip,
deleted by AI.MODELDEL / AI.SCRIPTDEL. So every server and every process sharing the store answers the same.
A key removed behind our back (DEL, UNLINK, expiry, overwrite, FLUSHALL, RENAME) is caught here: the record
answers only while the key still holds a model/script in the caller's database and its counters exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.errors import AIError, wrong_arity
from backends.objects import GRAPH_MARKER, MARKER_FIELD, MODEL_MARKER, SCRIPT_MARKER
from server.ai.state import RunStats
from server.protocol.reply import OK
from server.store.atomic import RESET_STATS, RUN_INFO_FIELD, STAT_FIELDS, ScriptCall
from server.store.keyspace import Keyspace

if TYPE_CHECKING:
    from server.commands.context import Client

_KINDS: Mapping[bytes, str] = MappingProxyType({MODEL_MARKER: "MODEL", SCRIPT_MARKER: "SCRIPT", GRAPH_MARKER: "GRAPH"})


async def cmd_aiinfo(client: Client, argv: list[bytes]) -> Any:
    """AI.INFO key [RESETSTAT]: the 18-element stats reply, or +OK after zeroing them. Any third argument other
    than RESETSTAT is ignored (quirk 20)."""
    if not 2 <= len(argv) <= 3:
        raise wrong_arity(argv[0].decode(errors="replace"))
    keyspace = client.keyspace()
    if len(argv) == 3 and argv[2].upper() == b"RESETSTAT":
        await keyspace.run_script(*reset_call(keyspace, argv[1]))  # checked and zeroed at once
        return OK
    return info_answer(argv[1], await keyspace.pipeline(stats_reads(keyspace, argv[1])))


def reset_call(keyspace: Keyspace, key: bytes) -> ScriptCall:
    """RESETSTAT: zero the counters of the object at ``key``, or ``cannot find run info`` (server/store/atomic.py)."""
    return RESET_STATS, [key, keyspace.stats_key(key)], []


def stats_reads(keyspace: Keyspace, key: bytes) -> list[tuple[bytes, ...]]:
    """The object's metadata and its counters (kept beside it, server/store/atomic.py): one round trip."""
    return [(b"HMGET", key, MARKER_FIELD, b"backend", b"device", b"tag", RUN_INFO_FIELD),
            (b"HMGET", keyspace.stats_key(key), *STAT_FIELDS, RUN_INFO_FIELD)]


def info_answer(key: bytes, replies: list[Any]) -> Any:
    """AI.INFO's reply from the ``stats_reads`` replies."""
    stats = stats_of(key, replies)
    if stats is None:
        raise AIError(msgs.INFO_NO_RUN_INFO_MSG)
    return info_reply(stats)


def stats_of(key: bytes, replies: list[Any]) -> RunStats | None:
    """The record from the ``stats_reads`` replies; None unless the object and its counters are both there, and
    the counters are this object's (the same run-info id: server/store/atomic.py)."""
    meta, counters = replies
    if (not isinstance(meta, list) or meta[0] not in _KINDS or not isinstance(counters, list)
            or None in counters[:-1] or meta[-1] != counters[-1]):
        return None
    kind = _KINDS[meta[0]]
    calls, duration, samples, errors = (int(value) for value in counters[:-1])
    backend = b"" if kind == "GRAPH" else meta[1] or b"TORCH"  # a graph runs several objects: no one backend
    return RunStats(key, kind, backend.decode(), (meta[2] or b"").decode(), meta[3] or b"",
                    duration, samples, calls, errors)


def info_reply(stats: RunStats) -> list[Any]:
    """``key type backend device tag duration samples calls errors`` as a flat labelled array; scripts and graphs
    report samples as -1 (a graph: one call per AI.GRAPHEXECUTE, duration of its successful runs)."""
    samples = stats.samples if stats.kind == "MODEL" else -1
    return ["key", stats.key, "type", stats.kind, "backend", stats.backend, "device", stats.device,
            "tag", stats.tag, "duration", stats.duration_us, "samples", samples, "calls", stats.calls,
            "errors", stats.errors]
