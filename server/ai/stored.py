"""Reading the stored parts of AI objects that model, script and DAG runs share (compiled: every run passes here)."""

from __future__ import annotations

from typing import Any

from backends import errors as msgs
from backends.base import LoadedModel
from backends.errors import AIError
from backends.objects import ModelMeta
from server.ai.state import ModelCache
from server.store.keyspace import Keyspace


def require_model(meta: ModelMeta | None) -> ModelMeta:
    """The decoded metadata, or RedisAI's error for a key that holds nothing."""
    if meta is None:
        raise AIError(msgs.MODEL_KEY_EMPTY_MSG)
    return meta


async def read_model_meta(models: ModelCache, keyspace: Keyspace, key: bytes, values: Any) -> ModelMeta:
    """The model's metadata from its HMGET values; only when every field is missing does a second look tell a
    missing key (``model key is empty``) from a hash that is not a model (WRONGTYPE)."""
    missing = isinstance(values, list) and all(value is None for value in values)
    exists = await keyspace.call(b"EXISTS", key) if missing else 1
    return require_model(models.decode_meta(values, exists))


async def loaded_model(models: ModelCache, meta: ModelMeta, keyspace: Keyspace, key: bytes) -> LoadedModel:
    """The loaded model for ``meta`` (stored at ``key``): a cache hit without awaiting the (interpreted) cache's
    coroutine, which a run of a small model would pay every time; built, its blob fetched, on a miss."""
    model = models.lookup(meta)
    if model is not None:
        return model
    return await models.get(meta, lambda: fetch_blob(keyspace, key), key)


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
