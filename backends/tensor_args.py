"""Pure parsing and replies of AI.TENSORSET / AI.TENSORGET, shared by the commands and the DAG engine.

Nothing here touches the store: ``parse_tensorset`` reads the grammar (RedisAI's ``ParseTensorSetArgs`` order of
checks), ``build_tensor`` checks and wraps the payload, ``tensorget_format`` reads TENSORGET's flags and
``tensorget_reply`` builds the reply value (encoded by server/protocol/reply.py: RESP2 bulk strings or RESP3 doubles for
floats). Every error is an ``AIError`` with RedisAI's exact text; the standalone commands check the key *before*
raising them (WRONGTYPE wins over argument errors), DAG ops raise them at parse time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from backends import errors as msgs
from backends.errors import AIError, parse_strict_int
from backends.tensor import (
    DTYPES,
    MAX_DIMS,
    DType,
    Tensor,
    check_string_count,
    split_strings,
    string_tensor,
    zeros,
)

# Largest zero-filled tensor AI.TENSORSET makes (Redis's own limit on a string value: proto-max-bulk-len).
MAX_ZERO_FILL_BYTES: Final = 512 * 1024 * 1024

_DECIMAL: Final = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX: Final = re.compile(rb"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?")
_INFINITY: Final = re.compile(rb"[+-]?(?:inf|infinity)", re.IGNORECASE)
_FORMAT_WORDS: Final = (b"META", b"BLOB", b"VALUES")


class TensorSetRequest:
    """A parsed ``AI.TENSORSET key type [dim ...] [BLOB data | VALUES v ...]``: at most one of blob/values.
    Immutable; a plain class so that mypyc compiles its ``__init__`` (a dataclass's runs interpreted)."""

    __slots__ = ("blob", "dtype", "key", "shape", "values")

    def __init__(self, key: bytes, dtype: str, shape: tuple[int, ...], blob: bytes | None = None,
                 values: tuple[bytes, ...] | None = None) -> None:
        self.key: Final = key
        self.dtype: Final = dtype
        self.shape: Final = shape
        self.blob: Final = blob
        self.values: Final = values


@dataclass(frozen=True, slots=True)
class TensorGetFormat:
    """The reply parts ``AI.TENSORGET key [META] [BLOB | VALUES]`` asked for."""

    meta: bool
    blob: bool
    values: bool


META_BLOB: Final = TensorGetFormat(meta=True, blob=True, values=False)
# every combination, built once: TENSORGET picks one instead of building a dataclass per request
_FORMATS: Final[Mapping[tuple[bool, bool, bool], TensorGetFormat]] = MappingProxyType(
    {(meta, blob, values): TensorGetFormat(meta, blob, values)
     for meta in (False, True) for blob in (False, True) for values in (False, True)})


# --- numbers, as Redis parses them -----------------------------------------------------------------------------


def parse_strict_double(raw: bytes) -> float | None:
    """Redis ``getDoubleFromObject`` (strtod over the whole string): no spaces, no NaN, no overflow/underflow.

    Accepts decimal and hex floats and ``inf``/``infinity``; rejects results strtod flags with ERANGE that are
    infinite or zero (a non-zero mantissa that underflows).
    """
    if _INFINITY.fullmatch(raw):
        return -math.inf if raw[:1] == b"-" else math.inf
    if _DECIMAL.fullmatch(raw):
        value = float(raw)
    elif _HEX.fullmatch(raw):
        try:
            value = float.fromhex(raw.decode())
        except OverflowError:
            return None
    else:
        return None
    if math.isinf(value) or (value == 0.0 and _nonzero_mantissa(raw.lower())):
        return None  # strtod's ERANGE: overflow, or a non-zero number that underflows to 0
    return value


def _nonzero_mantissa(lowered: bytes) -> bool:
    hexa = b"x" in lowered[:3]
    mantissa = lowered.split(b"p" if hexa else b"e", 1)[0]
    if hexa:
        mantissa = mantissa[mantissa.index(b"x") + 1:]
    return bool(mantissa.strip(b"+-.0"))


def _keyword(raw: bytes) -> bytes:
    """A token as RedisAI's ``strcasecmp`` sees it: up to the first NUL, upper-cased."""
    return raw.split(b"\0", 1)[0].upper()


def parse_dtype(raw: bytes) -> str | None:
    """A canonical dtype name for RedisAI's spellings (``float``, ``Int8``, ``UINT16`` …), else None."""
    info = DTYPES.get(_keyword(raw).decode("latin-1"))
    return info.name if info is not None and info.canonical else None


# --- AI.TENSORSET ----------------------------------------------------------------------------------------------


def parse_tensorset(argv: Sequence[bytes]) -> TensorSetRequest:
    """``AI.TENSORSET key type [dim ...] [BLOB data | VALUES v ...]`` (argv[0] is the command name).

    Checks in RedisAI's order: arity (parser text, no ERR), dtype, then each token after it: BLOB must be
    followed by exactly one argument, VALUES by exactly as many as the dims so far multiply to, anything else
    must be a strict integer > 0.
    """
    if len(argv) < 4:
        raise AIError(msgs.TENSORSET_PARSER_ARITY_MSG)
    dtype = parse_dtype(argv[2])
    if dtype is None:
        raise AIError(msgs.INVALID_DTYPE_MSG)
    dims: list[int] = []
    for pos in range(3, len(argv)):
        token = argv[pos]
        # a digit first: a dim, never BLOB or VALUES, whose keyword's objects cost more than the number (compiled,
        # ``token[0]`` is a byte read)
        if not (token and 0x30 <= token[0] <= 0x39):
            word = _keyword(token[:7])  # BLOB/VALUES, as strcasecmp sees them; dims are short anyway
            left = len(argv) - 1 - pos
            if word == b"BLOB":
                if left != 1:
                    raise AIError(msgs.TENSOR_BLOB_ARITY_MSG)
                return TensorSetRequest(argv[1], dtype, _shape(dims), blob=argv[pos + 1])
            if word == b"VALUES":
                if left != math.prod(dims):
                    raise AIError(msgs.TENSOR_VALUES_COUNT_MSG)
                return TensorSetRequest(argv[1], dtype, _shape(dims), values=tuple(argv[pos + 1:]))
        dim = parse_strict_int(token)
        if dim is None or dim <= 0:
            raise AIError(msgs.TENSOR_SHAPE_MSG)
        dims.append(dim)
    return TensorSetRequest(argv[1], dtype, _shape(dims))


def _shape(dims: list[int]) -> tuple[int, ...]:
    if len(dims) > MAX_DIMS:
        raise AIError(msgs.TENSOR_TOO_MANY_DIMS_MSG)
    return tuple(dims)


def build_tensor(request: TensorSetRequest) -> Tensor:
    """The tensor a parsed AI.TENSORSET describes, payload checked as RedisAI checks it.

    BLOB data is wrapped, not copied. Zero-filled when neither BLOB nor VALUES was given.
    """
    info = DTYPES[request.dtype]
    if request.blob is not None:
        return _from_blob(info, request.shape, request.blob)
    if request.values is not None:
        return _from_values(info, request.shape, request.values)
    element_size = 1 if info.kind == "string" else info.numpy.itemsize  # STRING: one NUL per element
    if math.prod(request.shape) * element_size > MAX_ZERO_FILL_BYTES:
        raise AIError(msgs.TENSOR_COULD_NOT_SAVE_MSG)
    return zeros(info.name, request.shape)


def _from_blob(info: DType, shape: tuple[int, ...], blob: bytes) -> Tensor:
    count = math.prod(shape)
    if info.kind == "string":
        check_string_count(count)
        elements = split_strings(blob, count)
        if elements is None:
            raise AIError(msgs.TENSOR_STRING_BLOB_MSG)
        return string_tensor(elements, shape)
    if len(blob) != count * info.numpy.itemsize:
        raise AIError(msgs.TENSOR_DATA_LENGTH_MSG)
    if info.kind == "bool" and len(blob) > 1:
        # As in RedisAI 1.2.7, the last byte is not validated.
        if np.frombuffer(blob, dtype=np.uint8, count=len(blob) - 1).max() > 1:
            raise AIError(msgs.TENSOR_BOOL_BLOB_MSG)
    return Tensor(info.name, shape, np.frombuffer(blob, dtype=info.numpy).reshape(shape), trusted=True)


def _from_values(info: DType, shape: tuple[int, ...], values: tuple[bytes, ...]) -> Tensor:
    if info.kind == "string":
        return string_tensor([_string_value(value) for value in values], shape)
    if info.kind == "float":
        floats = [parse_strict_double(value) for value in values]
        if None in floats:
            raise AIError(msgs.TENSOR_INVALID_VALUE_MSG)
        with np.errstate(over="ignore"):  # float32 overflow becomes ±inf, as the C cast does
            array = np.array(floats, dtype=np.float64).astype(info.numpy)
        return Tensor(info.name, shape, array.reshape(shape))
    ints = [parse_strict_int(value) for value in values]
    if any(number is None or not 0 <= number <= info.max_value for number in ints):
        raise AIError(msgs.TENSOR_INVALID_VALUE_MSG)
    return Tensor(info.name, shape, np.array(ints, dtype=info.numpy).reshape(shape))


def _string_value(value: bytes) -> bytes:
    """One VALUES element of a STRING tensor: one trailing NUL is allowed (and dropped), any other is not."""
    if b"\0" in value[:-1]:
        raise AIError(msgs.TENSOR_CSTRING_NULL_MSG)
    return value[:-1] if value.endswith(b"\0") else value


# --- AI.TENSORGET ----------------------------------------------------------------------------------------------


def tensorget_format(argv: Sequence[bytes]) -> TensorGetFormat:
    """``AI.TENSORGET key [META] [BLOB | VALUES]`` (argv[0] is the command name); no flag means META BLOB.

    At most two flags (arity), repeats allowed, any order; BLOB with VALUES is refused.
    """
    if not 2 <= len(argv) <= 4:
        raise AIError(msgs.TENSORGET_PARSER_ARITY_MSG)
    if len(argv) == 2:
        return META_BLOB
    words = [_keyword(arg) for arg in argv[2:]]
    if any(word not in _FORMAT_WORDS for word in words):
        raise AIError(msgs.TENSOR_FORMAT_MSG)
    fmt = _FORMATS[(b"META" in words, b"BLOB" in words, b"VALUES" in words)]
    if fmt.blob and fmt.values:
        raise AIError(msgs.TENSOR_BLOB_AND_VALUES_MSG)
    return fmt


def tensor_values(tensor: Tensor) -> list[Any]:
    """One reply element per tensor element, flat: floats (→ %.17g / RESP3 double), ints, or bytes (STRING)."""
    info = tensor.info
    flat = tensor.array.reshape(-1)
    if info.kind == "string":
        return list(flat.tolist())
    if info.values_view is None:
        raise AIError(msgs.TENSOR_CANNOT_GET_VALUES_MSG)
    return list(flat.view(info.values_view).tolist())


def meta_reply(dtype: str, shape: Sequence[int]) -> list[Any]:
    """``dtype <DTYPE> shape [dims]``; a dtype without a RedisAI name answers ``ERR unsupported dtype``."""
    if not DTYPES[dtype].canonical:
        raise AIError(msgs.TENSOR_UNSUPPORTED_DTYPE_MSG)
    return [b"dtype", dtype.encode(), b"shape", list(shape)]


def tensorget_reply(tensor: Tensor, fmt: TensorGetFormat, values_max: int = 0) -> Any:
    """The AI.TENSORGET reply value: a bare blob, a bare values array, or the labelled META array. VALUES of more
    than ``values_max`` elements (0: no limit) is refused (``TENSORGET_VALUES_OVER_MSG``)."""
    if fmt.values and values_max:
        count = math.prod(tensor.shape)
        if count > values_max:
            raise AIError(msgs.TENSORGET_VALUES_OVER_MSG.format(count=count, limit=values_max))
    if not fmt.meta:
        return tensor.data() if fmt.blob else tensor_values(tensor)
    reply = meta_reply(tensor.dtype, tensor.shape)
    if fmt.blob:
        reply += [b"blob", tensor.data()]
    elif fmt.values:
        reply += [b"values", tensor_values(tensor)]
    return reply
