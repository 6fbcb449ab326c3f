"""server/ai/tensor_io.py DecodedInputs: an input decoded once serves every run of the same bytes, and nothing
that could change or cost more to look up than to decode is kept."""

from __future__ import annotations

import re

import numpy as np
import pytest

from backends import errors as msgs
from backends.errors import AIError
from backends.tensor import Tensor, encode_tensor, string_tensor
from server.ai.tensor_io import DECODED_BY_CONTENT_LIMIT, DECODED_KEPT, DecodedInputs, decode_inputs


def _value(count: int, fill: float = 1.0) -> bytes:
    return encode_tensor(Tensor.from_numpy(np.full((1, count), fill, dtype=np.float32)))


def test_the_same_bytes_decode_once_whether_cached_or_read_again() -> None:
    decoded = DecodedInputs()
    value = _value(64)
    first = decoded.decode(value)
    assert decoded.decode(value) is first  # the cache's very object
    assert decoded.decode(bytes(bytearray(value)), cached=False) is first  # equal bytes read from the store
    other = decoded.decode(_value(64, 2.0), cached=False)
    assert other is not first and other.array.tolist() == [[2.0] * 64]
    assert first.array.tolist() == [[1.0] * 64] and not first.array.flags.writeable


def test_large_values_read_from_the_store_and_string_tensors_are_not_kept() -> None:
    decoded = DecodedInputs()
    large = _value(DECODED_BY_CONTENT_LIMIT // 4 + 1)
    assert decoded.decode(large, cached=False) is not decoded.decode(bytes(bytearray(large)), cached=False)
    assert decoded.decode(large) is decoded.decode(large)  # from the cache: its hash is kept with the object
    strings = encode_tensor(string_tensor([b"a", b"b"], [2]))
    assert decoded.decode(strings) is not decoded.decode(strings)


def test_at_most_so_many_are_kept() -> None:
    decoded = DecodedInputs()
    values = [_value(4, float(i)) for i in range(DECODED_KEPT + 1)]
    tensors = [decoded.decode(value) for value in values]
    assert decoded.decode(values[-1]) is tensors[-1]
    assert decoded.decode(values[0]) is not tensors[0]  # the table started over when it was full


def test_errors_are_redisais_and_a_cached_value_that_does_not_decode_asks_for_a_read() -> None:
    decoded = DecodedInputs()
    with pytest.raises(AIError, match=re.escape(msgs.TENSOR_KEY_EMPTY_MSG)):
        decoded.decode(None, cached=False)
    with pytest.raises(AIError, match=r"^WRONGTYPE"):
        decode_inputs([AIError("WRONGTYPE Operation against a key holding the wrong kind of value")], [False],
                      decoded)
    assert decode_inputs([b"not a tensor", _value(2)], [True, False], decoded) is None
    value = _value(2)  # (one write: each encoding carries a stamp of its own)
    good = decode_inputs([value, bytes(value)], [True, False], decoded)
    assert good is not None and good[0] is good[1]
