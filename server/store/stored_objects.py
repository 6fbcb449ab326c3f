"""The models, scripts and graphs a database holds, found through their AI.INFO counters in the store.

Every stored object has a counters hash beside it (``__redisai_stats__:<key>``, server/store/atomic.py), so a
SCAN MATCH over the counters' prefix lists the objects without reading every key's type; each is then checked to
still hold such an object (a DEL, RENAME, expiry or flush by anyone is followed). Used by the scans, INFO ai's
counts and readiness (which backends the stored models need).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.objects import MARKER_FIELD, MODEL_MARKER, SCRIPT_MARKER
from server.store.atomic import RUN_INFO_FIELD, STATS_PREFIX
from server.store.keyspace import Keyspace

SCRIPT_BACKEND = "TORCH"  # scripts are TorchScript: they need torch


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One model or script as its hash says: its key, kind (MODEL_MARKER / SCRIPT_MARKER), tag and backend."""

    key: bytes
    marker: bytes
    tag: bytes
    backend: bytes


async def stored_objects(keyspace: Keyspace) -> list[StoredObject]:
    """Every object with its own counters in this database: the counters' keys (SCAN MATCH over their prefix),
    each kept only while its object's key holds an object with the same run-info id (server/store/atomic.py) —
    so not after a DEL, expiry or flush of the object, nor once another object was renamed onto its key. One
    round trip reads every object's marker, tag, id and backend, and each counters' id."""
    counters = await keyspace.scan(STATS_PREFIX + b"*")
    names = [keyspace.object_of_stats(name) for name in counters]
    reads: list[tuple[bytes, ...]] = []
    for name, stats in zip(names, counters, strict=True):
        reads += [(b"HMGET", name, MARKER_FIELD, b"tag", RUN_INFO_FIELD, b"backend"), (b"HGET", stats, RUN_INFO_FIELD)]
    replies = await keyspace.pipeline(reads) if reads else []
    found = []
    for name, fields, run_info in zip(names, replies[::2], replies[1::2], strict=True):
        if isinstance(fields, list) and fields[0] is not None and fields[2] == run_info:
            found.append(StoredObject(name, fields[0], fields[1] or b"", fields[3] or b""))
    return found


async def backends_needed(keyspace: Keyspace) -> dict[str, bytes]:
    """Backend name → one key of a stored model or script that needs it, in this database."""
    needed: dict[str, bytes] = {}
    for found in await stored_objects(keyspace):
        if found.marker == MODEL_MARKER:
            needed.setdefault((found.backend or b"TORCH").decode(errors="replace").upper(), found.key)
        elif found.marker == SCRIPT_MARKER:
            needed.setdefault(SCRIPT_BACKEND, found.key)
    return needed
