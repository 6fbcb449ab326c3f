"""backends/tensor.py: the dtype table, the Tensor type, numpy/torch conversion and the storage codec (no sockets)."""

from __future__ import annotations

import struct
import subprocess
import sys
import tracemalloc
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch

from backends import errors as msgs
from backends.errors import AIError
from backends.tensor import (
    DTYPES,
    MAGIC,
    UNJOINED_FROM,
    Tensor,
    TensorValue,
    check_length,
    decode_tensor,
    encode_header,
    encode_tensor,
    encode_tensor_parts,
    encode_tensor_value,
    looks_like_tensor,
    read_header,
    stamped_prefix,
    string_tensor,
    zeros,
)
from backends.tensor_args import build_tensor, parse_tensorset

NUMERIC: dict[str, npt.NDArray[Any]] = {
    "FLOAT": np.array([[1.5, -2.25], [np.inf, 1e-3]], dtype=np.float32),
    "DOUBLE": np.array([0.1, -1e300, 5e-324], dtype=np.float64),
    "INT8": np.array([-128, 127, 0], dtype=np.int8),
    "INT16": np.array([-32768, 32767], dtype=np.int16),
    "INT32": np.array([[-(2**31)], [2**31 - 1]], dtype=np.int32),
    "INT64": np.array([-(2**63), 2**63 - 1], dtype=np.int64),
    "UINT8": np.array([0, 255], dtype=np.uint8),
    "UINT16": np.array([0, 65535], dtype=np.uint16),
    "BOOL": np.array([True, False, True]),
    "FLOAT16": np.array([1.0, -0.5], dtype=np.float16),
    "UINT32": np.array([0, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 2**64 - 1], dtype=np.uint64),
}


def _wrongtype(raw: bytes) -> None:
    with pytest.raises(AIError) as info:
        decode_tensor(raw)
    assert info.value.message == msgs.WRONGTYPE_MSG


def test_dtype_table_is_what_the_format_documents() -> None:
    codes = {name: row.code for name, row in DTYPES.items()}
    assert codes == {"FLOAT": 1, "DOUBLE": 2, "INT8": 3, "INT16": 4, "INT32": 5, "INT64": 6, "UINT8": 7,
                     "UINT16": 8, "BOOL": 9, "STRING": 10, "FLOAT16": 11, "UINT32": 12, "UINT64": 13}
    assert [n for n, row in DTYPES.items() if row.canonical] == [
        "FLOAT", "DOUBLE", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "BOOL", "STRING"]
    assert all(row.numpy.byteorder in "<|=" for row in DTYPES.values())


def test_header_bytes_exactly() -> None:
    tensor = Tensor.from_numpy(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int16))
    raw = encode_tensor(tensor)
    assert raw[:8] == b"\x89RAI\x02\x04\x02\x00"
    assert len(raw[8:16]) == 8 and raw[8:16] != bytes(8)  # the write's stamp
    assert raw[16:32] == struct.pack("<qq", 2, 3)
    assert raw[32:] == np.arange(1, 7, dtype="<i2").tobytes()
    assert encode_header("FLOAT", (), b"stamp_01") == MAGIC + b"\x02\x01\x00\x00stamp_01"
    header, data = encode_tensor_parts(tensor)
    assert header[8:16] != raw[8:16]  # every write is stamped anew
    assert header[:8] + header[16:] + bytes(data) == raw[:8] + raw[16:]


def test_version_1_values_are_still_read() -> None:
    """Tensors written before the stamp (format version 1: the dims right after the first 8 bytes)."""
    raw = b"\x89RAI\x01\x04\x02\x00" + struct.pack("<qq", 2, 3) + np.arange(1, 7, dtype="<i2").tobytes()
    assert looks_like_tensor(raw[:8])
    decoded = decode_tensor(raw)
    assert decoded.dtype == "INT16" and decoded.shape == (2, 3)
    assert np.array_equal(decoded.to_numpy(), np.arange(1, 7, dtype=np.int16).reshape(2, 3))
    assert stamped_prefix(raw) is None


def test_the_stamped_prefix_names_a_write() -> None:
    tensor = Tensor.from_numpy(np.zeros(4, dtype=np.float32))
    first, second = encode_tensor(tensor), encode_tensor(tensor)
    assert first[16:] == second[16:] and stamped_prefix(first) == first[:16] != stamped_prefix(second)
    unstamped = first[:8] + bytes(8) + first[16:]
    assert stamped_prefix(unstamped) is None and decode_tensor(unstamped).shape == (4,)


def test_a_big_value_is_kept_as_its_header_and_data_and_read_as_the_joined_one() -> None:
    """``TensorValue``: what a big TENSORSET sends and keeps. It decodes, names its write and measures as the
    joined value would, its data a view of the tensor's own (no copy); a small value is joined."""
    array = np.arange(UNJOINED_FROM // 4, dtype=np.float32).reshape(2, -1)
    value = encode_tensor_value(Tensor.from_numpy(array))
    assert isinstance(value, TensorValue) and np.shares_memory(np.frombuffer(value.data, np.uint8), array)
    joined = value.joined()
    assert len(value) == len(joined) and joined[: len(value.head)] == value.head
    assert stamped_prefix(value) == stamped_prefix(joined) == joined[:16]
    decoded = decode_tensor(value)
    assert decoded.shape == (2, UNJOINED_FROM // 8) and np.array_equal(decoded.to_numpy(), array)
    assert np.shares_memory(decoded.array, array) and not decoded.array.flags.writeable
    assert decode_tensor(joined).shape == decoded.shape
    small = encode_tensor_value(Tensor.from_numpy(np.ones(3, np.float32)))
    assert isinstance(small, bytes) and decode_tensor(small).shape == (3,)
    for head, data in ((value.head + b"x", bytes(value.data)), (value.head, bytes(value.data)[:-4])):
        with pytest.raises(AIError) as info:  # a header with bytes after its dims, or data a shape too short
            decode_tensor(TensorValue(head, data))
        assert info.value.message == msgs.WRONGTYPE_MSG


@pytest.mark.parametrize("name", list(NUMERIC))
def test_numeric_round_trip_without_copies(name: str) -> None:
    array = NUMERIC[name]
    tensor = Tensor.from_numpy(array)
    assert tensor.dtype == name and tensor.shape == array.shape
    assert np.shares_memory(tensor.array, array)  # already contiguous little-endian: wrapped, not copied
    raw = encode_tensor(tensor)
    decoded = decode_tensor(raw)
    assert decoded.dtype == name and decoded.shape == array.shape
    assert np.array_equal(decoded.to_numpy(), array)
    assert not decoded.array.flags.writeable
    view = np.frombuffer(raw, dtype=np.uint8)
    assert np.shares_memory(decoded.array, view)  # numpy.frombuffer on a memoryview of the stored value
    assert bytes(decoded.data()) == array.tobytes()


def test_zero_d_and_zero_sized_tensors() -> None:
    scalar = decode_tensor(encode_tensor(Tensor.from_numpy(np.float32(3.5))))
    assert scalar.shape == () and scalar.count == 1 and float(scalar.array) == 3.5
    empty = decode_tensor(encode_tensor(Tensor.from_numpy(np.zeros((0, 4), dtype=np.int64))))
    assert empty.shape == (0, 4) and empty.count == 0 and bytes(empty.data()) == b""
    assert decode_tensor(encode_tensor(zeros("STRING", (0,)))).shape == (0,)


def test_string_tensors() -> None:
    tensor = Tensor.from_numpy(np.array([["a", ""], ["wörld", "x"]]))
    assert tensor.dtype == "STRING" and tensor.shape == (2, 2)
    assert bytes(tensor.data()) == "a\0\0wörld\0x\0".encode()
    decoded = decode_tensor(encode_tensor(tensor))
    assert decoded.array.tolist() == [[b"a", b""], ["wörld".encode(), b"x"]]
    assert Tensor.from_numpy(np.array([b"x", b"yy"], dtype="S2")).array.tolist() == [b"x", b"yy"]
    assert Tensor.from_numpy(np.array([b"p", "q"], dtype=object)).array.tolist() == [b"p", b"q"]
    assert bytes(zeros("STRING", (3,)).data()) == b"\0\0\0"
    with pytest.raises(AIError, match="null character"):
        Tensor.from_numpy(np.array([b"a\0b"], dtype=object))
    with pytest.raises(AIError, match="unsupported dtype"):
        Tensor.from_numpy(np.array([1, 2], dtype=object))
    with pytest.raises(AIError, match="unsupported dtype"):
        string_tensor([b"a"], (1,)).to_torch()


def test_from_numpy_copies_only_when_it_must() -> None:
    big_endian = np.array([1.0, 2.0], dtype=">f4")
    tensor = Tensor.from_numpy(big_endian)
    assert tensor.dtype == "FLOAT" and not np.shares_memory(tensor.array, big_endian)
    assert bytes(tensor.data()) == np.array([1.0, 2.0], dtype="<f4").tobytes()
    strided = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    assert np.array_equal(Tensor.from_numpy(strided).array, strided)
    converted = Tensor.from_numpy(np.array([1.9, 2.1]), dtype="INT32")
    assert converted.dtype == "INT32" and converted.array.tolist() == [1, 2]
    with pytest.raises(AIError) as info:
        Tensor.from_numpy(np.array([1j]))
    assert info.value.message == msgs.TENSOR_UNSUPPORTED_DTYPE_MSG


def test_tensor_invariants_are_checked() -> None:
    with pytest.raises(ValueError):
        Tensor("FLOAT", (2,), np.zeros(2, dtype=np.float64))
    with pytest.raises(ValueError):
        Tensor("FLOAT", (3,), np.zeros(2, dtype=np.float32))
    with pytest.raises(ValueError):
        Tensor("HALF", (2,), np.zeros(2, dtype=np.float16))
    with pytest.raises(ValueError):
        Tensor("INT32", (2,), np.zeros((2, 2), dtype=np.int32)[:, 0])


@pytest.mark.parametrize("name", list(NUMERIC))
def test_torch_round_trip_shares_memory(name: str) -> None:
    decoded = decode_tensor(encode_tensor(Tensor.from_numpy(NUMERIC[name])))
    shared = decoded.to_torch()
    assert shared.data_ptr() == decoded.array.ctypes.data
    back = Tensor.from_torch(shared)
    assert back.dtype == name and np.array_equal(back.array, NUMERIC[name])
    copied = decoded.to_torch(copy=True)
    assert copied.data_ptr() != decoded.array.ctypes.data
    copied.zero_()
    assert np.array_equal(decoded.array, NUMERIC[name])


def test_from_torch_views_and_unsupported() -> None:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert Tensor.from_torch(base).array.ctypes.data == base.data_ptr()
    transposed = Tensor.from_torch(base.t())
    assert transposed.shape == (4, 3) and np.array_equal(transposed.array, base.t().numpy())
    assert Tensor.from_torch(torch.tensor(7)).shape == ()
    with pytest.raises(AIError, match="unsupported dtype"):
        Tensor.from_torch(torch.zeros(2, dtype=torch.bfloat16))


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x89RA",
        b"plain string value",
        b"\x89RAI\x02\x01\x00\x00" + b"\0" * 4,  # unknown format version
        b"\x89RAI\x01\x63\x00\x00" + b"\0" * 4,  # unknown dtype code
        b"\x89RAI\x01\x01\x41\x00" + b"\0" * 600,  # 65 dims
        b"\x89RAI\x01\x01\x02\x00" + struct.pack("<q", 2),  # dims truncated
        b"\x89RAI\x01\x01\x01\x00" + struct.pack("<q", -1),  # negative dim
        b"\x89RAI\x01\x01\x01\x00" + struct.pack("<q", 2) + b"\0" * 7,  # data truncated
        b"\x89RAI\x01\x01\x01\x00" + struct.pack("<q", 2) + b"\0" * 9,  # data too long
        b"\x89RAI\x01\x0a\x01\x00" + struct.pack("<q", 2) + b"a\0b",  # STRING: last byte not NUL
        b"\x89RAI\x01\x0a\x01\x00" + struct.pack("<q", 2) + b"a\0b\0c\0",  # STRING: three elements for two
        b"\x89RAI\x01\x0a\x01\x00" + struct.pack("<q", 2),  # STRING: no data
    ],
)
def test_anything_else_decodes_as_wrongtype(raw: bytes) -> None:
    _wrongtype(raw)


def test_header_probes() -> None:
    raw = encode_tensor(Tensor.from_numpy(np.zeros((3, 5), dtype=np.uint8)))
    assert looks_like_tensor(raw[:8]) and not looks_like_tensor(raw[:7]) and not looks_like_tensor(b"abcdefgh")
    header = read_header(raw[:40])
    assert (header.dtype, header.shape, header.data_offset) == ("UINT8", (3, 5), 32)  # 16 + 2 dims
    check_length(header, len(raw))
    with pytest.raises(AIError):
        check_length(header, len(raw) - 1)
    decoded = decode_tensor(memoryview(bytearray(raw)))
    assert decoded.shape == (3, 5)


def test_large_tensor_costs_one_copy_in_and_none_out() -> None:
    """A 100 MB BLOB: wrapped on parse, joined once into the stored value, decoded and answered as views."""
    size = 100 * 1024 * 1024
    blob = bytes(size)
    argv = [b"AI.TENSORSET", b"k", b"FLOAT", str(size // 4).encode(), b"BLOB", blob]
    tracemalloc.start()
    try:
        tensor = build_tensor(parse_tensorset(argv))
        _, peak_parse = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        raw = encode_tensor(tensor)
        _, peak_encode = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        decoded = decode_tensor(raw)
        data = decoded.data()
        _, peak_decode = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_parse < 1024 * 1024
    assert size < peak_encode < size + 2 * 1024 * 1024  # exactly one copy of the data
    assert peak_decode < size + 2 * 1024 * 1024  # nothing new beyond the stored value
    assert len(data) == size


def test_importing_the_server_does_not_import_torch() -> None:
    code = ("import sys, server, server.commands.tensor, backends.tensor, backends.tensor_args; "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "False"


def _roundtrip_values(tensor: Tensor) -> Any:
    return decode_tensor(encode_tensor(tensor)).array.tolist()


def test_bool_quirk_bytes_survive_storage() -> None:
    tensor = build_tensor(parse_tensorset([b"AI.TENSORSET", b"k", b"BOOL", b"2", b"BLOB", b"\x01\x02"]))
    assert bytes(decode_tensor(encode_tensor(tensor)).data()) == b"\x01\x02"
    assert _roundtrip_values(zeros("BOOL", (2,))) == [False, False]
