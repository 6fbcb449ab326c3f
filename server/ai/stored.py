"""Reading the stored parts of AI objects that model, script and DAG runs share."""

from __future__ import annotations

from backends import errors as msgs
from backends.errors import AIError
from server.store.keyspace import Keyspace


async def fetch_blob(keyspace: Keyspace, key: bytes) -> bytes:
    """A model's blob, read only when its loaded handle is not cached (models are loaded once per digest)."""
    blob = await keyspace.call(b"HGET", key, b"blob")
    if not isinstance(blob, bytes):
        raise AIError(msgs.MODEL_KEY_EMPTY_MSG)
    return blob
