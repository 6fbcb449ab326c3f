"""Tensors in and out of a run, shared by the model, script and DAG commands.

Inputs arrive as GET replies read in the command's own round trip; output keys are type-checked up front
(GETRANGE of the header) and written in one atomic step after the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends import errors as msgs
from backends.errors import AIError
from backends.tensor import HEADER_SIZE, Tensor, decode_tensor, encode_tensor, looks_like_tensor
from server.store.atomic import ScriptCall
from server.store.keyspace import Keyspace


def decode_input(value: Any) -> Tensor:
    """A GET reply as an input tensor: RedisAI's errors for a missing key and for any other type."""
    if value is None:
        raise AIError(msgs.TENSOR_KEY_EMPTY_MSG)
    if isinstance(value, AIError):
        raise AIError(msgs.WRONGTYPE_MSG)
    return decode_tensor(value)


def decode_inputs(values: Sequence[Any], from_cache: Sequence[bool]) -> list[Tensor] | None:
    """GET replies as input tensors; None when one that came from the coherent cache does not decode (the
    key's value then may have changed since: the caller reads them from the store, whose errors are true)."""
    try:
        return [decode_input(value) for value in values]
    except AIError:
        if any(from_cache):
            return None
        raise


def output_type_checks(keys: list[bytes]) -> list[tuple[bytes, ...]]:
    """The first header bytes of every output key (GETRANGE: "" when missing, WRONGTYPE when not a string)."""
    return [(b"GETRANGE", key, b"0", str(HEADER_SIZE - 1).encode()) for key in keys]


def check_output_types(replies: list[Any]) -> None:
    """An output key holding anything but a tensor is WRONGTYPE, and nothing runs or is written (RedisAI
    replies +OK and then a second -WRONGTYPE here, quirk 9; we send the error only). An empty prefix is a
    missing key (or an empty string, which is then replaced)."""
    for prefix in replies:
        if isinstance(prefix, AIError) or (prefix and not looks_like_tensor(prefix)):
            raise AIError(msgs.WRONGTYPE_MSG)


async def write_outputs(keyspace: Keyspace, keys: Sequence[bytes], tensors: list[Any],
                        counters: Sequence[ScriptCall] = (), model: tuple[bytes, str] | None = None,
                        inputs: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """Write every output tensor in one atomic step that checks each key again (an overwrite also drops any
    TTL, as RedisAI's does); WRONGTYPE and nothing written if a key was turned into something else meanwhile.
    The run's AI.INFO ``counters`` go in the same round trip; ``model`` (key, digest): STALEMODEL and nothing
    written if the store holds another model there now; ``inputs`` (key, value) taken from the coherent cache:
    STALEINPUT and nothing written if one holds another value now."""
    await keyspace.set_tensors(keys, [encode_tensor(t) for t in tensors], also=counters, model=model, inputs=inputs)
