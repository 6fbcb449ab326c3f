"""Reading the stored parts of AI objects that model, script and DAG runs share."""

from __future__ import annotations

from backends import errors as msgs
from backends.errors import AIError
from server.store.keyspace import Keyspace


async def fetch_blob(keyspace: Keyspace, key: bytes) -> bytes:
    """A model's blob, read only when its loaded handle is not cached (models are loaded once per digest)."""
    return await _fetch_field(keyspace, key, b"blob", msgs.MODEL_KEY_EMPTY_MSG)


async def fetch_source(keyspace: Keyspace, key: bytes) -> bytes:
    """A script's source, read only when its compiled form is not cached (compiled once per digest)."""
    return await _fetch_field(keyspace, key, b"source", msgs.SCRIPT_KEY_EMPTY_MSG)


async def _fetch_field(keyspace: Keyspace, key: bytes, name: bytes, missing: str) -> bytes:
    """One field of the object's hash; ``missing`` when the object went away since its metadata was read."""
    value = await keyspace.call(b"HGET", key, name)
    if not isinstance(value, bytes):
        raise AIError(missing)
    return value
