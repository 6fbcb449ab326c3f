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


DECODED_KEPT: Final = 64  # decoded inputs remembered (DecodedInputs), each pinning a value of at most 64 KiB
# A value read from the store is a new object every time: it is looked up by its bytes up to this size, where
# hashing it costs less than decoding it again.
DECODED_BY_CONTENT_LIMIT: Final = 2048
# A bigger value (a stamped copy the cache keeps, a new object at every write) is decoded as a view each time:
# hashing its bytes costs far more than that, and it would pin a copy the cache's budget does not count.
DECODED_KEPT_LIMIT: Final = 64 * 1024


class DecodedInputs:
    """Input tensors decoded once for many runs (a decode is a noticeable share of a small model's run). Kept by
    the value's bytes: a value the coherent cache serves is the same ``bytes`` object for every run of it
    (Python keeps its hash), and a small one read from the store (a batching model's inputs, a DAG's LOAD,
    inputs on another shard than the outputs) hashes for less than it decodes. Numeric tensors only: a
    read-only view of those bytes, which nothing can change (a STRING tensor's array of objects could be). At
    most DECODED_KEPT, then it starts over. One per server (``AIState.decoded``), loop thread only."""

    __slots__ = ("_by_value",)

    def __init__(self) -> None:
        self._by_value: dict[bytes, Tensor] = {}

    def decode(self, value: Any, cached: bool = True) -> Tensor:
        """``decode_input(value)``, remembered for a numeric tensor. ``cached``: the value came from the coherent
        cache (up to DECODED_KEPT_LIMIT bytes); else only one of at most DECODED_BY_CONTENT_LIMIT bytes is looked
        up."""
        if not isinstance(value, bytes) or len(value) > (DECODED_KEPT_LIMIT if cached else DECODED_BY_CONTENT_LIMIT):
            return decode_input(value)
        found = self._by_value.get(value)
        if found is not None:
            return found
        tensor = decode_input(value)
        if tensor.dtype != "STRING":
            if len(self._by_value) >= DECODED_KEPT:
                self._by_value.clear()
            self._by_value[value] = tensor
        return tensor


def decode_inputs(values: Sequence[Any], from_cache: Sequence[bool], decoded: DecodedInputs) -> list[Tensor] | None:
    """GET replies as input tensors; None when one that came from the coherent cache does not decode (the
    key's value then may have changed since: the caller reads them from the store, whose errors are true).
    An index loop: mypyc does not specialise the ``zip(..., strict=True)`` it replaced."""
    if len(values) != len(from_cache):
        raise ValueError("one flag a value")
    tensors: list[Tensor] = []
    try:
        for index in range(len(values)):
            tensors.append(decoded.decode(values[index], from_cache[index]))
    except AIError:
        if any(from_cache):
            return None
        raise
    return tensors


def output_type_checks(keys: list[bytes]) -> list[tuple[bytes, ...]]:
    """The first header bytes of every output key (GETRANGE: "" when missing, WRONGTYPE when not a string)."""
    return [(b"GETRANGE", key, b"0", str(HEADER_SIZE - 1).encode()) for key in keys]


def check_output_types(replies: list[Any]) -> None:
    """An output key holding anything but a tensor is WRONGTYPE, and nothing runs or is written (RedisAI
    replies +OK and then a second -WRONGTYPE here; we send the error only). An empty prefix is a
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
    written if the store holds another model there now; ``inputs`` (key, ``input_check_value``) taken from the
    coherent cache: STALEINPUT and nothing written if one holds another value now. (Not itself a coroutine: the
    one it returns is awaited instead, one level fewer a request.)"""
    return keyspace.set_tensors(keys, [encode_tensor(t) for t in tensors], also=counters, model=model, inputs=inputs)
