"""The models, scripts and graphs a database holds, found through their AI.INFO counters in the store.

Every stored object has a counters hash beside it (``__redisai_stats__:<key>``, server/store/atomic.py), so a
SCAN MATCH over the counters' prefix lists the objects without reading every key's type; each is then checked to
still hold such an object (a DEL, RENAME, expiry or flush by anyone is followed). Used by the scans, INFO ai's
counts and readiness (which backends the stored models need).
"""

from __future__ import annotations

from backends.objects import MARKER_FIELD, MODEL_MARKER, SCRIPT_MARKER
from server.store.atomic import STATS_PREFIX
from server.store.keyspace import Keyspace

SCRIPT_BACKEND = "TORCH"  # scripts are TorchScript: they need torch


async def stored_object_keys(keyspace: Keyspace) -> list[bytes]:
    """The object keys that have counters in this database (SCAN MATCH over the counters' prefix)."""
    return [keyspace.object_of_stats(name) for name in await keyspace.scan(STATS_PREFIX + b"*")]


async def backends_needed(keyspace: Keyspace) -> dict[str, bytes]:
    """Backend name → one key of a stored model or script that needs it, in this database."""
    names = await stored_object_keys(keyspace)
    found = await keyspace.pipeline([(b"HMGET", name, MARKER_FIELD, b"backend") for name in names]) if names else []
    needed: dict[str, bytes] = {}
    for name, values in zip(names, found, strict=True):
        if not isinstance(values, list):
            continue
        if values[0] == MODEL_MARKER:
            needed.setdefault((values[1] or b"TORCH").decode(errors="replace").upper(), name)
        elif values[0] == SCRIPT_MARKER:
            needed.setdefault(SCRIPT_BACKEND, name)
    return needed
