"""The models, scripts and graphs a database holds, found by walking its hashes; and the move of an older
release's AI.INFO counters into their objects.

Every stored object is a hash with a marker field (backends/objects.py), its AI.INFO counters among its fields
(server/store/atomic.py, ``STAT_FIELDS``): nothing else in the keyspace points at it. So a scan walks the hashes
of the database (SCAN … TYPE hash, every shard) and reads each one's marker, tag, stored name and backend in
one round trip; a DEL, RENAME, expiry or flush by anyone is followed. It costs a walk of the whole keyspace, as
an experimental admin command (AI._MODELSCAN), INFO ai's counts, readiness and --preload may. Used by those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backends.objects import MARKER_FIELD, MODEL_MARKER, SCRIPT_MARKER
from server.store.atomic import LEGACY_STATS_PREFIX, MIGRATE_STATS, RUN_INFO_FIELD, ScriptCall
from server.store.keyspace import Keyspace

SCRIPT_BACKEND = "TORCH"  # scripts are TorchScript: they need torch
_MIGRATE_BATCH = 500  # legacy counters moved a round trip


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One model, script or graph as its hash says: its key, kind (MODEL_MARKER …), tag and backend; ``named``
    when it was stored under this key (it has AI.INFO counters here: not after a RENAME, as in RedisAI)."""

    key: bytes
    marker: bytes
    tag: bytes
    backend: bytes
    named: bool


async def stored_objects(keyspace: Keyspace, renamed: bool = False) -> list[StoredObject]:
    """Every object in this database stored under its key (its run info is here); with ``renamed``, also those
    renamed onto their key, or written there by other means with our marker (readiness: they still run)."""
    hashes = await keyspace.scan(b"*", b"hash")
    reads = [(b"HMGET", name, MARKER_FIELD, b"tag", RUN_INFO_FIELD, b"backend") for name in hashes]
    replies = await keyspace.pipeline(reads) if reads else []
    found = [_object(name, reply) for name, reply in zip(hashes, replies, strict=True)]
    return [item for item in found if item is not None and (renamed or item.named)]


def _object(name: bytes, reply: Any) -> StoredObject | None:
    """The object the HMGET ``reply`` describes at ``name``; None when the hash is not ours (no marker)."""
    if not isinstance(reply, list) or reply[0] is None:
        return None
    return StoredObject(name, reply[0], reply[1] or b"", reply[3] or b"", reply[2] == name)


async def backends_needed(keyspace: Keyspace) -> dict[str, bytes]:
    """Backend name → one key of a stored model or script that needs it, in this database."""
    needed: dict[str, bytes] = {}
    for found in await stored_objects(keyspace, renamed=True):
        if found.marker == MODEL_MARKER:
            needed.setdefault((found.backend or b"TORCH").decode(errors="replace").upper(), found.key)
        elif found.marker == SCRIPT_MARKER:
            needed.setdefault(SCRIPT_BACKEND, found.key)
    return needed


async def migrate_legacy_counters(keyspace: Keyspace) -> int:
    """Move the AI.INFO counters an older release kept in hashes of their own (``LEGACY_STATS_PREFIX``) into
    their objects' hashes, deleting those hashes (MIGRATE_STATS): afterwards the keyspace holds only the user's
    keys, and objects stored before the upgrade keep their counters. How many objects got theirs back."""
    legacy = await keyspace.scan(LEGACY_STATS_PREFIX + b"*")
    moved = 0
    for start in range(0, len(legacy), _MIGRATE_BATCH):
        replies = await keyspace.run_scripts(_migrations(keyspace, legacy[start : start + _MIGRATE_BATCH]))
        moved += sum(1 for reply in replies if reply == 1)
    return moved


def _migrations(keyspace: Keyspace, names: Sequence[bytes]) -> list[ScriptCall]:
    """MIGRATE_STATS calls for the legacy counters hashes ``names``."""
    return [(MIGRATE_STATS, [keyspace.object_of_legacy_stats(name), name], []) for name in names]
