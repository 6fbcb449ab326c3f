"""Tensors in and out of a run, shared by the model, script and DAG commands.

Inputs arrive as GET replies read in the command's own round trip; output keys are type-checked up front
(GETRANGE of the header) and written in one atomic step after the run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Final

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


DECODED_KEPT: Final = 64  # decoded cached inputs remembered (DecodedInputs), each pinning a value of at most 64 KiB


class DecodedInputs:
    """Input tensors decoded from the very values the coherent cache served (``decode``): while an input is
    cached, every run of it gets the same ``bytes`` object, and decoding it again cost ~15,000 instructions of
    a MODELEXECUTE's ~318,000 (callgrind, one client). Kept by the value's identity, with the value itself
    (so that the id cannot be reused while kept); numeric tensors only (a read-only view of those bytes:
    nothing can change it; a STRING tensor's array of objects could be). At most DECODED_KEPT, then it starts
    over. One per server (``AIState.decoded``), loop thread only."""

    __slots__ = ("_by_id",)

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[bytes, Tensor]] = {}

    def decode(self, value: Any) -> Tensor:
        """``decode_input(value)``, remembered for a cached numeric tensor."""
        found = self._by_id.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        tensor = decode_input(value)
        if tensor.dtype != "STRING" and isinstance(value, bytes):
            if len(self._by_id) >= DECODED_KEPT:
                self._by_id.clear()
            self._by_id[id(value)] = (value, tensor)
        return tensor


def decode_inputs(values: Sequence[Any], from_cache: Sequence[bool],
                  decoded: DecodedInputs | None = None) -> list[Tensor] | None:
    """GET replies as input tensors; None when one that came from the coherent cache does not decode (the
    key's value then may have changed since: the caller reads them from the store, whose errors are true).
    ``decoded``: where those from the cache are decoded (once per cached value)."""
    try:
        if decoded is None:
            return [decode_input(value) for value in values]
        return [decoded.decode(value) if hit else decode_input(value)
                for value, hit in zip(values, from_cache, strict=True)]
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


def write_outputs(keyspace: Keyspace, keys: Sequence[bytes], tensors: list[Any],
                  counters: Sequence[ScriptCall] = (), model: tuple[bytes, str] | None = None,
                  inputs: Sequence[tuple[bytes, bytes]] = ()) -> Awaitable[None]:
    """Write every output tensor in one atomic step that checks each key again (an overwrite also drops any
    TTL, as RedisAI's does); WRONGTYPE and nothing written if a key was turned into something else meanwhile.
    The run's AI.INFO ``counters`` go in the same round trip; ``model`` (key, digest): STALEMODEL and nothing
    written if the store holds another model there now; ``inputs`` (key, value) taken from the coherent cache:
    STALEINPUT and nothing written if one holds another value now. (Not itself a coroutine: the one it returns
    is awaited instead, one level fewer a request.)"""
    return keyspace.set_tensors(keys, [encode_tensor(t) for t in tensors], also=counters, model=model, inputs=inputs)
