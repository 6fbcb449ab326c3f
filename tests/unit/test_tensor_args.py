"""backends/tensor_args.py: AI.TENSORSET / AI.TENSORGET parsing, payload checks and reply values (no sockets)."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

from backends import errors as msgs
from backends.errors import AIError, parse_strict_int
from backends.tensor import Tensor
from backends.tensor_args import (
    META_BLOB,
    TensorGetFormat,
    build_tensor,
    parse_dtype,
    parse_strict_double,
    parse_tensorset,
    tensor_values,
    tensorget_format,
    tensorget_reply,
)
from server.protocol.reply import encode


def _argv(*args: object) -> list[bytes]:
    return [a if isinstance(a, bytes) else str(a).encode() for a in args]


def _set(*args: object) -> Tensor:
    return build_tensor(parse_tensorset(_argv("AI.TENSORSET", "k", *args)))


def _set_error(*args: object) -> str:
    with pytest.raises(AIError) as info:
        _set(*args)
    return info.value.message


@pytest.mark.parametrize(
    ("spelling", "name"),
    [("FLOAT", "FLOAT"), ("float", "FLOAT"), ("Double", "DOUBLE"), ("int8", "INT8"), ("iNt16", "INT16"),
     ("INT32", "INT32"), ("int64", "INT64"), ("uint8", "UINT8"), ("UINT16", "UINT16"), ("bool", "BOOL"),
     ("String", "STRING"), (b"FLOAT\0junk", "FLOAT")],
)
def test_dtype_spellings(spelling: str | bytes, name: str) -> None:
    assert parse_dtype(spelling if isinstance(spelling, bytes) else spelling.encode()) == name


@pytest.mark.parametrize("spelling", ["INT128", "UINT32", "UINT64", "FLOAT16", "HALF", "FLOAT32", "INT08", "INT",
                                      "", "I NT8", "FLOAT ", "uint"])
def test_invalid_dtypes(spelling: str) -> None:
    assert parse_dtype(spelling.encode()) is None
    assert _set_error(spelling, 2) == msgs.INVALID_DTYPE_MSG


def test_strict_int() -> None:
    assert [parse_strict_int(s) for s in (b"0", b"-1", b"9223372036854775807", b"-9223372036854775808")] == [
        0, -1, 2**63 - 1, -(2**63)]
    for bad in (b"", b"-", b"-0", b"01", b"+1", b" 1", b"1 ", b"1.0", b"0x10", b"9223372036854775808", b"1e3",
                b"-01", b"00", b"-9223372036854775809", b"1" * 25, b"-" + b"9" * 19):
        assert parse_strict_int(bad) is None, bad


def test_strict_int_is_string2ll_on_any_text() -> None:
    """Random texts of signs, digits and other bytes, as bytes and as bytearray (the RESP parser's buffer)."""
    canonical = re.compile(rb"(0|-?[1-9][0-9]*)")
    rng = random.Random(7)
    for _ in range(20_000):
        text = bytes(rng.choice(b"-0123456789+ x") for _ in range(rng.randint(0, 21)))
        value = int(text) if canonical.fullmatch(text) else None
        expected = value if value is not None and -(2**63) <= value < 2**63 else None
        assert parse_strict_int(text) == expected, text
        assert parse_strict_int(bytearray(text)) == expected, text


def test_strict_double() -> None:
    good = {b"1": 1.0, b"-2.5": -2.5, b"+.5": 0.5, b"5.": 5.0, b"1e3": 1000.0, b"1E-2": 0.01, b"0x1p3": 8.0,
            b"-0X1.8P1": -3.0, b"inf": math.inf, b"-Infinity": -math.inf, b"4.9e-324": 5e-324, b"0e9999": 0.0,
            b"-0": -0.0, b"0x0p-9999": 0.0}
    for text, value in good.items():
        assert parse_strict_double(text) == value, text
    for bad in (b"", b" 1", b"1 ", b"nan", b"NaN", b"1e400", b"-1e400", b"1e-400", b"2e-324", b"0x1p-2000",
                b"0x1p99999", b"1_000", b"A", b"1e", b"0x", b".", b"infinit", b"1\x000"):
        assert parse_strict_double(bad) is None, bad


def test_tensorset_grammar() -> None:
    req = parse_tensorset(_argv("AI.TENSORSET", "k", "float", 2, 3))
    assert (req.key, req.dtype, req.shape, req.blob, req.values) == (b"k", "FLOAT", (2, 3), None, None)
    assert parse_tensorset(_argv("x", "k", "INT8", "blob", "ab")).blob == b"ab"
    assert parse_tensorset(_argv("x", "k", "INT8", 1, b"BLOB\0x", "a")).blob == b"a"
    assert parse_tensorset(_argv("x", "k", "INT8", 2, "Values", 1, 2)).values == (b"1", b"2")
    assert parse_tensorset(_argv("x", "k", "FLOAT", "VALUES", "3.5")).shape == ()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("FLOAT",), msgs.TENSORSET_PARSER_ARITY_MSG),
        (("INT128", 2, "VALUES", 2, 3), msgs.INVALID_DTYPE_MSG),
        (("INT32", -1, "VALUES", 2, 3), msgs.TENSOR_SHAPE_MSG),
        (("INT32", 0), msgs.TENSOR_SHAPE_MSG),
        (("INT32", "2.0"), msgs.TENSOR_SHAPE_MSG),
        (("INT32", "02"), msgs.TENSOR_SHAPE_MSG),
        (("INT32", 2, "not_a_number", "VALUES", 2, 3), msgs.TENSOR_SHAPE_MSG),
        (("FLOAT", 2, "VALUES", 1), msgs.TENSOR_VALUES_COUNT_MSG),
        (("FLOAT", 2, "VALUES", 1, 2, 3), msgs.TENSOR_VALUES_COUNT_MSG),
        (("FLOAT", "VALUES"), msgs.TENSOR_VALUES_COUNT_MSG),
        (("FLOAT", 2, "BLOB", b"\x00", "extra-argument"), msgs.TENSOR_BLOB_ARITY_MSG),
        (("FLOAT", 2, "BLOB"), msgs.TENSOR_BLOB_ARITY_MSG),
        (("FLOAT", *([1] * 65)), msgs.TENSOR_TOO_MANY_DIMS_MSG),
        (("FLOAT", 1, 1, 28, 280, "BLOB", bytes(28 * 28 * 4)), msgs.TENSOR_DATA_LENGTH_MSG),
        (("FLOAT", 2, "BLOB", bytes(7)), msgs.TENSOR_DATA_LENGTH_MSG),
        (("FLOAT", 2, "VALUES", 2, "A"), msgs.TENSOR_INVALID_VALUE_MSG),
        (("DOUBLE", 1, "VALUES", "nan"), msgs.TENSOR_INVALID_VALUE_MSG),
        (("INT32", 2, "VALUES", 2, "1.87"), msgs.TENSOR_INVALID_VALUE_MSG),
        (("BOOL", 2, "VALUES", 1, 2), msgs.TENSOR_INVALID_VALUE_MSG),
        (("INT8", 2, "VALUES", -1, -128), msgs.TENSOR_INVALID_VALUE_MSG),  # quirk: no negative VALUES
        (("INT8", 1, "VALUES", 128), msgs.TENSOR_INVALID_VALUE_MSG),
        (("INT64", 1, "VALUES", -1), msgs.TENSOR_INVALID_VALUE_MSG),
        (("UINT8", 1, "VALUES", 256), msgs.TENSOR_INVALID_VALUE_MSG),
        (("UINT16", 1, "VALUES", 65536), msgs.TENSOR_INVALID_VALUE_MSG),
        (("BOOL", 2, "BLOB", b"\x02\x01"), msgs.TENSOR_BOOL_BLOB_MSG),
        (("STRING", 2, "VALUES", "valid C-string", b"invalid\0C-string"), msgs.TENSOR_CSTRING_NULL_MSG),
        (("STRING", 2, "BLOB", b"single c-string\0"), msgs.TENSOR_STRING_BLOB_MSG),
        (("STRING", 2, "BLOB", b"one\0two\0three\0"), msgs.TENSOR_STRING_BLOB_MSG),
        (("STRING", 2, "BLOB", b"C-string\0followed by a non C-string"), msgs.TENSOR_STRING_BLOB_MSG),
        (("STRING", 2, "BLOB", b""), msgs.TENSOR_STRING_BLOB_MSG),
        (("INT64", 2**20, 2**20, 2**20), msgs.TENSOR_COULD_NOT_SAVE_MSG),
    ],
)
def test_tensorset_errors(args: tuple[object, ...], message: str) -> None:
    assert _set_error(*args) == message


def test_values_parse_per_dtype() -> None:
    assert _set("FLOAT", 3, "VALUES", "0.1", "1e39", "-inf").array.tolist() == [
        float(np.float32(0.1)), math.inf, -math.inf]  # float32 overflow becomes inf, as the C cast does
    assert _set("DOUBLE", 2, "VALUES", "0.1", "0x1p-1").array.tolist() == [0.1, 0.5]
    assert _set("INT8", 2, "VALUES", 0, 127).array.tolist() == [0, 127]
    assert _set("INT64", 1, "VALUES", 2**63 - 1).array.tolist() == [2**63 - 1]
    assert _set("UINT16", 1, "VALUES", 65535).array.tolist() == [65535]
    assert _set("BOOL", 2, 1, "VALUES", 1, 0).array.tolist() == [[True], [False]]
    assert _set("STRING", 3, "VALUES", "str_val1", b"str_val2\0", b"\0").array.tolist() == [
        b"str_val1", b"str_val2", b""]
    assert _set("STRING", 1, "VALUES", "").array.tolist() == [b""]


def test_blob_and_zero_fill() -> None:
    blob = np.array([1, -2], dtype="<i4").tobytes()
    tensor = _set("INT32", 2, "BLOB", blob)
    assert tensor.array.tolist() == [1, -2]  # negatives enter through BLOB
    assert np.shares_memory(tensor.array, np.frombuffer(blob, dtype=np.uint8))
    assert _set("BOOL", 2, "BLOB", b"\x01\x02").array.view(np.uint8).tolist() == [1, 2]  # last byte unchecked
    assert _set("BOOL", 1, "BLOB", b"\x05").dtype == "BOOL"
    assert _set("STRING", 2, 2, "BLOB", b"str11\0str12\0str21\0str22\0").array.tolist() == [
        [b"str11", b"str12"], [b"str21", b"str22"]]
    assert _set("STRING", 2, "BLOB", b"\0\0").array.tolist() == [b"", b""]
    assert _set("FLOAT", 2, 2).array.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert _set("STRING", 2).array.tolist() == [b"", b""]
    assert _set("UINT8", "BLOB", b"\x07").shape == ()


def test_tensorget_format() -> None:
    assert tensorget_format(_argv("AI.TENSORGET", "k")) == META_BLOB
    assert tensorget_format(_argv("x", "k", "meta")) == TensorGetFormat(True, False, False)
    assert tensorget_format(_argv("x", "k", "VALUES", "META")) == TensorGetFormat(True, False, True)
    assert tensorget_format(_argv("x", "k", "blob", "BLOB")) == TensorGetFormat(False, True, False)
    for argv, message in [
        (_argv("x"), msgs.TENSORGET_PARSER_ARITY_MSG),
        (_argv("x", "k", "META", "VALUES", "extra-arg"), msgs.TENSORGET_PARSER_ARITY_MSG),
        (_argv("x", "k", "unsupported_format"), msgs.TENSOR_FORMAT_MSG),
        (_argv("x", "k", "BLOB", "junk"), msgs.TENSOR_FORMAT_MSG),
        (_argv("x", "k", "BLOB", "VALUES"), msgs.TENSOR_BLOB_AND_VALUES_MSG),
        (_argv("x", "k", "VALUES", "blob"), msgs.TENSOR_BLOB_AND_VALUES_MSG),
    ]:
        with pytest.raises(AIError) as info:
            tensorget_format(argv)
        assert info.value.message == message


def test_reply_values_and_resp_bytes() -> None:
    floats = _set("FLOAT", 2, 2, "VALUES", 1, 2, 3, 4)
    meta_values = tensorget_reply(floats, TensorGetFormat(True, False, True))
    assert encode(meta_values) == (b"*6\r\n$5\r\ndtype\r\n$5\r\nFLOAT\r\n$5\r\nshape\r\n*2\r\n:2\r\n:2\r\n"
                                   b"$6\r\nvalues\r\n*4\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n4\r\n")
    assert encode(meta_values, 3).endswith(b"*4\r\n,1\r\n,2\r\n,3\r\n,4\r\n")
    assert encode(tensorget_reply(floats, TensorGetFormat(False, True, False))) == (
        b"$16\r\n\x00\x00\x80?\x00\x00\x00@\x00\x00@@\x00\x00\x80@\r\n")
    tenth = _set("FLOAT", 3, "VALUES", "0.1", "1e20", "2.5")
    assert encode(tensor_values(tenth)) == (b"*3\r\n$19\r\n0.10000000149011612\r\n$22\r\n1.0000000200408773e+20\r\n"
                                            b"$3\r\n2.5\r\n")
    assert encode(tensor_values(_set("DOUBLE", 1, "VALUES", "0.1"))) == b"*1\r\n$19\r\n0.10000000000000001\r\n"
    assert encode(tensor_values(_set("BOOL", 2, "BLOB", b"\x01\x02")), 3) == b"*2\r\n:1\r\n:2\r\n"  # ints, not #t
    assert encode(tensorget_reply(_set("INT64", "VALUES", 1), TensorGetFormat(True, False, True))) == (
        b"*6\r\n$5\r\ndtype\r\n$5\r\nINT64\r\n$5\r\nshape\r\n*0\r\n$6\r\nvalues\r\n*1\r\n:1\r\n")
    strings = _set("STRING", 2, "VALUES", "str_val1", b"str_val2\0")
    assert tensorget_reply(strings, TensorGetFormat(False, False, True)) == [b"str_val1", b"str_val2"]
    assert bytes(tensorget_reply(strings, TensorGetFormat(False, True, False))) == b"str_val1\0str_val2\0"


def test_reply_of_dtypes_without_a_redisai_name() -> None:
    half = Tensor.from_numpy(np.array([1.0, 2.0], dtype=np.float16))
    assert bytes(tensorget_reply(half, TensorGetFormat(False, True, False))) == half.array.tobytes()
    for fmt, message in [(META_BLOB, msgs.TENSOR_UNSUPPORTED_DTYPE_MSG),
                         (TensorGetFormat(True, False, False), msgs.TENSOR_UNSUPPORTED_DTYPE_MSG),
                         (TensorGetFormat(False, False, True), msgs.TENSOR_CANNOT_GET_VALUES_MSG)]:
        with pytest.raises(AIError) as info:
            tensorget_reply(half, fmt)
        assert info.value.message == message
    wide = Tensor.from_numpy(np.array([1, 2**64 - 1], dtype=np.uint64))
    assert tensor_values(wide) == [1, -1]  # RedisAI reads uint64 elements as long long
