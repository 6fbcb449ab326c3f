"""AI.INFO: per-key run statistics of models and scripts (REDISAI-REFERENCE.md §2.14).

    AI.INFO <key> [RESETSTAT]

The counters live in the store, as fields of the object's own hash (server/store/atomic.py, ``STAT_FIELDS``):
zeroed when a model, script or graph is stored, incremented after every run in the run's own write round trip,
gone with the key (AI.MODELDEL, DEL, expiry, FLUSHALL …). So every server and every process sharing the store
answers the same. The record answers only while the key holds such an object stored under that very name
(``RUN_INFO_FIELD``): RedisAI keeps run info by the name at store time, so after a RENAME the new name has none.
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
    return RESET_STATS, [keyspace.stats_key(key)], []


def stats_reads(keyspace: Keyspace, key: bytes) -> list[tuple[bytes, ...]]:
    """The object's metadata and its counters (fields of its hash, server/store/atomic.py): one read."""
    return [(b"HMGET", keyspace.stats_key(key), MARKER_FIELD, b"backend", b"device", b"tag", RUN_INFO_FIELD,
             *STAT_FIELDS)]


def info_answer(key: bytes, replies: list[Any]) -> Any:
    """AI.INFO's reply from the ``stats_reads`` replies."""
    stats = stats_of(key, replies)
    if stats is None:
        raise AIError(msgs.INFO_NO_RUN_INFO_MSG)
    return info_reply(stats)


def stats_of(key: bytes, replies: list[Any]) -> RunStats | None:
    """The record from the ``stats_reads`` replies; None unless the key holds a model, script or graph stored
    under that name, with its counters (server/store/atomic.py, ``RUN_INFO_FIELD``)."""
    (meta,) = replies
    if not isinstance(meta, list) or meta[0] not in _KINDS or meta[4] != key or None in meta[5:]:
        return None
    kind = _KINDS[meta[0]]
    calls, duration, samples, errors = (int(value) for value in meta[5:])
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
