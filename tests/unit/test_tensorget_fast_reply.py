"""AI.TENSORGET META BLOB's direct encoding gives exactly the bytes of the general reply path."""

from __future__ import annotations

import numpy as np
import pytest

from backends.errors import AIError
from backends.tensor import DTYPES, Tensor, decode_tensor, encode_tensor, string_tensor
from backends.tensor_args import META_BLOB, tensorget_reply
from server.commands.tensor import meta_blob_reply
from server.protocol.reply import encode

NUMERIC = sorted(name for name, info in DTYPES.items() if info.canonical and name != "STRING")


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shape", [(1,), (2, 3), (0,), (1, 1, 4)])
def test_the_fast_reply_is_byte_for_byte_the_general_one(dtype: str, shape: tuple[int, ...]) -> None:
    array = (np.arange(int(np.prod(shape))) % 2).astype(DTYPES[dtype].numpy).reshape(shape)
    raw = encode_tensor(Tensor.from_numpy(array))
    fast = meta_blob_reply(raw)
    assert fast is not None
    for proto in (2, 3):
        assert encode(fast, proto) == encode(tensorget_reply(decode_tensor(raw), META_BLOB), proto)


def test_string_tensors_take_the_general_path() -> None:
    raw = encode_tensor(string_tensor([b"ab", b"c"], (2,)))
    assert meta_blob_reply(raw) is None


def test_a_value_that_is_not_a_tensor_is_wrongtype() -> None:
    with pytest.raises(AIError, match="WRONGTYPE"):
        meta_blob_reply(b"just a string, not a tensor at all")
