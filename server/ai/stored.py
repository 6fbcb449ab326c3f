"""Reading the stored parts of AI objects that model, script and DAG runs share (compiled: every run passes here)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from backends import errors as msgs
from backends.base import LoadedModel
from backends.errors import AIError
from backends.objects import ModelMeta, ScriptMeta
from server.ai.handle_cache import HandleCache
from server.ai.script_cache import ScriptCache
from server.ai.state import ModelCache
from server.store.keyspace import Keyspace

if TYPE_CHECKING:
    from backends.script_backend import CompiledScript

MetaT = TypeVar("MetaT")
HandleT = TypeVar("HandleT")


LOAD_TRIES: Final = 3
"""How many times in all a command reads an object's metadata and payload when each time the object was stored
again between the two reads (``ChangedWhileLoading``): a model re-stored every few milliseconds by a training
job makes a second miss rare and a third much rarer; past that the client gets the error, never a stale run."""


class ChangedWhileLoading(AIError):
    """The object was stored again between the read of its metadata and of its payload (blob, source): the
    payload belongs to another version, and a handle built from it must not be filed under the metadata's
    digest. The command reads both again, ``LOAD_TRIES`` times in all (server/ai/attempts.py, the loop every
    run command goes through); a change in that window every time reaches the client as this error."""


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


async def built(cache: HandleCache[MetaT, HandleT], meta: MetaT, fetch: Callable[[], Awaitable[bytes]],
                key: bytes) -> HandleT:
    """``cache.get``, its hit taken without awaiting the (interpreted) cache's coroutine, which a run of a small
    model or script would pay every time; on a miss the handle is built, its payload fetched."""
    handle = cache.lookup(meta)
    if handle is not None:
        return handle
    return await cache.get(meta, fetch, key)


def loaded_model(models: ModelCache, meta: ModelMeta, keyspace: Keyspace, key: bytes) -> Awaitable[LoadedModel]:
    """The loaded model for ``meta`` (stored at ``key``)."""
    return built(models, meta, lambda: fetch_blob(keyspace, key, meta.digest), key)


def compiled_script(scripts: ScriptCache, meta: ScriptMeta, keyspace: Keyspace,
                    key: bytes) -> Awaitable[CompiledScript]:
    """The compiled script for ``meta`` (stored at ``key``)."""
    return built(scripts, meta, lambda: fetch_source(keyspace, key, meta.digest), key)


async def fetch_blob(keyspace: Keyspace, key: bytes, digest: str) -> bytes:
    """A model's blob, read only when its loaded handle is not cached (models are loaded once per digest)."""
    return await _fetch_field(keyspace, key, b"blob", digest, msgs.MODEL_KEY_EMPTY_MSG, msgs.MODEL_CHANGED_MSG)


async def fetch_source(keyspace: Keyspace, key: bytes, digest: str) -> bytes:
    """A script's source, read only when its compiled form is not cached (compiled once per digest)."""
    return await _fetch_field(keyspace, key, b"source", digest, msgs.SCRIPT_KEY_EMPTY_MSG, msgs.SCRIPT_CHANGED_MSG)


async def _fetch_field(keyspace: Keyspace, key: bytes, name: bytes, digest: str, missing: str,
                       changed: str) -> bytes:
    """One field of the object's hash, read with its digest in one command: ``missing`` when the object went
    away since its metadata was read, ``ChangedWhileLoading`` when it holds another version now."""
    value, stored = await keyspace.call(b"HMGET", key, name, b"digest")
    if not isinstance(value, bytes):
        raise AIError(missing)
    if stored != digest.encode():
        raise ChangedWhileLoading(changed)
    return value
