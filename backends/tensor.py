"""Tensors: the dtype table, the ``Tensor`` type every layer shares, numpy/torch conversion and the storage codec.

Why one module: commands, DAG ops, model and script backends and batching all hand tensors around; they agree
on one type (a frozen ``Tensor`` over a C-contiguous little-endian numpy array) and one way to store it.

Storage (docs/tensor-format.md): a tensor is one Redis string, readable by any client with a plain GET::

    offset 0    4 bytes   magic  b"\\x89RAI"
    offset 4    1 byte    format version (2; version 1, without the stamp, is still read)
    offset 5    1 byte    dtype code (``DType.code``)
    offset 6    2 bytes   ndim, uint16 little-endian (0 … 64)
    offset 8    8 bytes   stamp: names this write (all zero: none)
    offset 16   8*ndim    dims, int64 little-endian
    then                  data: raw little-endian elements in C order; STRING: each element followed by one NUL

Copies of a large (≥ 100 MB) numeric tensor — these are the only ones:

* In (``AI.TENSORSET … BLOB``): ``build_tensor`` wraps the argument with ``numpy.frombuffer`` (no copy);
  ``encode_tensor_value`` keeps header and data apart (``TensorValue``, no copy) from 64 KiB, and the store
  writer sends them as one bulk (server/store/upstream.py ``pack_parted``). ``encode_tensor`` joins them
  (1 copy), for what must be one ``bytes``.
* Out (``AI.TENSORGET``): ``decode_tensor`` is ``numpy.frombuffer`` on a memoryview of the stored value
  (no copy) and ``Tensor.data`` is a memoryview of the array (no copy), written as its own buffer from 64 KiB
  (server/protocol/reply.py ``vectored``; a smaller one is joined into its reply).
* torch: ``Tensor.to_torch``/``Tensor.from_torch`` share memory (DLPack or ``from_numpy``/``.numpy()``)
  unless the device or the layout forces a copy (GPU tensors, non-contiguous views, big-endian arrays,
  read-only arrays on numpy < 2).

STRING tensors hold a numpy object array of ``bytes`` elements (never containing NUL); building it copies the
elements once, which is unavoidable for variable-length elements.

``import backends.tensor`` imports numpy only; torch is imported inside the two torch functions.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from backends import errors as msgs
from backends.errors import AIError

if TYPE_CHECKING:
    import torch

MAGIC: Final = b"\x89RAI"
FORMAT_VERSION: Final = 2  # what is written: version 1 (no stamp) is still read
UNSTAMPED_VERSION: Final = 1
_VERSIONS: Final = (UNSTAMPED_VERSION, FORMAT_VERSION)
HEADER_SIZE: Final = 8  # the part every version shares: magic, version, dtype code, ndim
STAMP_SIZE: Final = 8
STAMPED_PREFIX: Final = HEADER_SIZE + STAMP_SIZE  # version 2: the stamp follows, then the dims
NO_STAMP: Final = bytes(STAMP_SIZE)
MAX_DIMS: Final = 64
MAX_HEADER_SIZE: Final = STAMPED_PREFIX + 8 * MAX_DIMS
_FIXED: Final = struct.Struct("<4sBBH")
# the dims of an ndim-dimensional header
_DIMS: Final = tuple(struct.Struct(f"<{ndim}q") for ndim in range(MAX_DIMS + 1))


@dataclass(frozen=True, slots=True)
class DType:
    """One dtype: its name, storage code and numpy type, how VALUES input is parsed and VALUES output shown.

    ``canonical`` dtypes are RedisAI's ten: AI.TENSORSET accepts them and META names them. The others exist
    because backends produce them (torch float16, …): they are stored and answered as BLOB, and META answers
    ``ERR unsupported dtype`` as RedisAI does. ``max_value`` is the largest integer VALUES accepts (RedisAI
    rejects every negative VALUES integer, signed types included). ``values_view`` is the numpy type VALUES
    replies read the elements as (None: no VALUES reply for this dtype).
    """

    name: str
    code: int
    numpy: np.dtype[Any]
    kind: str  # "float" | "int" | "bool" | "string"
    canonical: bool = True
    max_value: int = 0
    values_view: np.dtype[Any] | None = None


def _row(name: str, code: int, np_type: str, kind: str, max_value: int = 0, canonical: bool = True,
         values_view: str | None = "same") -> DType:
    view = None if values_view is None else np.dtype(np_type if values_view == "same" else values_view)
    return DType(name, code, np.dtype(np_type), kind, canonical, max_value, view)


DTYPES: Final[Mapping[str, DType]] = MappingProxyType({row.name: row for row in (
    _row("FLOAT", 1, "<f4", "float"),
    _row("DOUBLE", 2, "<f8", "float"),
    _row("INT8", 3, "<i1", "int", 2**7 - 1),
    _row("INT16", 4, "<i2", "int", 2**15 - 1),
    _row("INT32", 5, "<i4", "int", 2**31 - 1),
    _row("INT64", 6, "<i8", "int", 2**63 - 1),
    _row("UINT8", 7, "<u1", "int", 2**8 - 1),
    _row("UINT16", 8, "<u2", "int", 2**16 - 1),
    _row("BOOL", 9, "?", "bool", 1, values_view="<u1"),
    _row("STRING", 10, "O", "string"),
    _row("FLOAT16", 11, "<f2", "float", canonical=False, values_view=None),
    _row("UINT32", 12, "<u4", "int", canonical=False),
    _row("UINT64", 13, "<u8", "int", canonical=False, values_view="<i8"),  # RedisAI reads it as a long long
)})
DTYPES_BY_CODE: Final[Mapping[int, DType]] = MappingProxyType({row.code: row for row in DTYPES.values()})
_NUMERIC_BY_KIND_SIZE: Final[Mapping[tuple[str, int], DType]] = MappingProxyType(
    {(row.numpy.kind, row.numpy.itemsize): row for row in DTYPES.values() if row.kind != "string"})
# numpy's dtype objects of our numeric types, for identity checks (``Tensor.from_result``): the little-endian
# types as numpy makes them itself; on a big-endian machine none match and ``from_numpy`` converts
_NUMERIC_BY_TYPE: Final[tuple[tuple[np.dtype[Any], DType], ...]] = tuple(
    (np.dtype(row.numpy.type), row) for row in DTYPES.values()
    if row.kind != "string" and np.dtype(row.numpy.type) == row.numpy)


class Tensor:
    """A tensor: dtype name (``DTYPES`` key), shape, and its elements as a C-contiguous numpy array.

    Numeric arrays have the dtype's little-endian numpy type and may be read-only views of a stored value;
    STRING arrays are object arrays of ``bytes``. Nothing here copies the array. Immutable (``Final``); a plain
    class rather than a frozen dataclass because mypyc compiles its ``__init__`` (several a request).
    """

    __slots__ = ("array", "dtype", "shape")

    def __init__(self, dtype: str, shape: tuple[int, ...], array: npt.NDArray[Any], trusted: bool = False) -> None:
        """``trusted``: the caller made ``array`` with this dtype's numpy type, C order and this very shape
        (``np.frombuffer(...).reshape(shape)``, ``np.asarray(..., order="C")``), so the checks are skipped."""
        if not trusted:
            info = DTYPES.get(dtype)
            if info is None:
                raise ValueError(f"unknown tensor dtype {dtype!r}")
            if array.shape != shape or array.dtype != info.numpy or not array.flags.c_contiguous:
                raise ValueError(f"array {array.dtype}{array.shape} does not fit {dtype}{shape}")
        self.dtype: Final = dtype
        self.shape: Final = shape
        self.array: Final = array

    def __repr__(self) -> str:
        return f"Tensor({self.dtype}, {self.shape})"

    @property
    def info(self) -> DType:
        return DTYPES[self.dtype]

    @property
    def count(self) -> int:
        """Number of elements (1 for a 0-d tensor)."""
        return math.prod(self.shape)

    def data(self) -> bytes | memoryview:
        """The raw data section (what BLOB replies carry): a view of the array, or the NUL-terminated strings."""
        if self.dtype == "STRING":
            elements = self.array.reshape(-1).tolist()
            return b"\0".join(elements) + b"\0" if elements else b""
        array = self.array
        # a flat byte view of the C-contiguous array: one call where reshape().view().data made three (a view of
        # an empty array cannot be cast)
        return memoryview(array).cast("B") if array.size else b""  # type: ignore[arg-type]  # ndarray is a buffer

    def to_numpy(self) -> npt.NDArray[Any]:
        """The array itself (no copy; read-only when decoded from the store)."""
        return self.array

    @classmethod
    def from_numpy(cls, array: npt.ArrayLike, dtype: str | None = None) -> Tensor:
        """A tensor over ``array``: no copy when it is already C-contiguous, little-endian and of the dtype's type.

        ``dtype`` (a ``DTYPES`` name) converts; without it the dtype follows the array's (str/bytes/object arrays
        become STRING). Unsupported numpy types answer ``ERR unsupported dtype``.
        """
        source = np.asarray(array)
        if dtype == "STRING" or (dtype is None and source.dtype.kind in "SUO"):
            return string_tensor([_element_bytes(item) for item in source.reshape(-1).tolist()], source.shape)
        info = DTYPES.get(dtype) if dtype is not None else _NUMERIC_BY_KIND_SIZE.get(
            (source.dtype.kind, source.dtype.itemsize))
        if info is None:
            raise AIError(msgs.TENSOR_UNSUPPORTED_DTYPE_MSG)
        converted = np.asarray(source, dtype=info.numpy, order="C")
        return cls(info.name, converted.shape, converted, trusted=True)

    @classmethod
    def from_result(cls, array: Any) -> Tensor:
        """A backend's output array (``ModelWork``): ``from_numpy``, with the usual case — a C-contiguous array of
        one of our numeric types in little-endian order — taken by identity checks alone (``from_numpy``'s
        conversions cost more than a small model's whole run)."""
        kind = array.dtype
        for numpy_type, info in _NUMERIC_BY_TYPE:
            if kind is numpy_type:
                if array.flags.c_contiguous:
                    return cls(info.name, array.shape, array, trusted=True)
                break
        return cls.from_numpy(array)

    @classmethod
    def from_torch(cls, value: torch.Tensor) -> Tensor:
        """A tensor over a torch tensor's memory (copied only off the CPU or out of a non-contiguous view)."""
        cpu = value.detach().resolve_conj().resolve_neg().cpu().contiguous()
        try:
            array = cpu.numpy()
        except (TypeError, RuntimeError) as exc:  # bfloat16, complex, quantized …
            raise AIError(msgs.TENSOR_UNSUPPORTED_DTYPE_MSG) from exc
        return cls.from_numpy(array)

    def to_torch(self, copy: bool = False) -> torch.Tensor:
        """A CPU torch tensor sharing this tensor's memory (``copy=True`` for one the caller may write into).

        A tensor decoded from the store is a read-only view of the stored value: the shared torch tensor must not
        be written to. numpy ≥ 2 exports read-only arrays through DLPack; older numpy makes us copy them.
        """
        import torch

        if self.dtype == "STRING":
            raise AIError(msgs.TENSOR_UNSUPPORTED_DTYPE_MSG)
        array = self.array
        if copy:
            return torch.from_numpy(array.copy())
        if array.flags.writeable:
            return torch.from_numpy(array)
        try:
            return torch.utils.dlpack.from_dlpack(array)
        except (BufferError, RuntimeError, TypeError):
            return torch.from_numpy(array.copy())


class TensorHeader:
    """The decoded header of a stored tensor; ``data_offset`` is where its data section starts (one a read)."""

    __slots__ = ("data_offset", "dtype", "shape")

    def __init__(self, dtype: str, shape: tuple[int, ...], data_offset: int) -> None:
        self.dtype: Final = dtype
        self.shape: Final = shape
        self.data_offset: Final = data_offset


# --- building tensors ----------------------------------------------------------------------------------------


MAX_STRING_ELEMENTS: Final = 4 * 1024 * 1024  # each element is a Python object: bound what one command can allocate


def check_string_count(count: int) -> None:
    if count > MAX_STRING_ELEMENTS:
        raise AIError(msgs.TENSOR_STRING_TOO_LARGE_MSG.format(limit=MAX_STRING_ELEMENTS))


def zeros(dtype: str, shape: Sequence[int]) -> Tensor:
    """A zero-filled tensor (STRING: empty elements), as AI.TENSORSET makes one when no data is given."""
    dims = tuple(shape)
    if dtype == "STRING":
        check_string_count(math.prod(dims))
        return string_tensor([b""] * math.prod(dims), dims)
    return Tensor(dtype, dims, np.zeros(dims, dtype=DTYPES[dtype].numpy))


def string_tensor(elements: Sequence[bytes], shape: Sequence[int]) -> Tensor:
    """A STRING tensor of ``elements`` (NUL-free ``bytes``) in C order."""
    flat = np.empty(len(elements), dtype=object)
    flat[:] = list(elements)
    dims = tuple(shape)
    return Tensor("STRING", dims, flat.reshape(dims))


def split_strings(data: bytes | memoryview, count: int) -> list[bytes] | None:
    """The ``count`` elements of a NUL-terminated string blob, or None when it does not hold exactly that many.

    RedisAI's rule: the last byte is NUL and the number of NULs equals the element count (empty elements allowed).
    """
    if count == 0:
        return [] if len(data) == 0 else None
    if len(data) == 0 or data[-1] != 0:
        return None
    raw = bytes(data)
    if raw.count(b"\0") != count:
        return None
    return raw[:-1].split(b"\0")


def _element_bytes(item: Any) -> bytes:
    data = item.encode() if isinstance(item, str) else item
    if not isinstance(data, bytes):
        raise AIError(msgs.TENSOR_UNSUPPORTED_DTYPE_MSG)
    if b"\0" in data:
        raise AIError(msgs.TENSOR_CSTRING_NULL_MSG)
    return data


# --- the storage codec ---------------------------------------------------------------------------------------


def encode_header(dtype: str, shape: Sequence[int], stamp: bytes | None = None) -> bytes:
    """The header of a stored tensor (magic, version 2, dtype code, ndim, stamp, dims). ``stamp``: 8 bytes that
    name this write (a fresh random one by default): a copy of the value held elsewhere is current while the
    stored value starts with the same ``STAMPED_PREFIX`` bytes (docs/tensor-format.md)."""
    if len(shape) > MAX_DIMS:
        raise AIError(msgs.TENSOR_TOO_MANY_DIMS_MSG)
    return (_FIXED.pack(MAGIC, FORMAT_VERSION, DTYPES[dtype].code, len(shape)) + (stamp or new_stamp())
            + _DIMS[len(shape)].pack(*shape))


def new_stamp() -> bytes:
    """A write's stamp: 8 random bytes, never all zero (which means 'unstamped'). From ``random``'s generator, no
    syscall a write: seeded from the OS and seeded again in a forked child, so processes never share a stream."""
    return (random.getrandbits(64) or 1).to_bytes(STAMP_SIZE, "little")


def stamped_prefix(raw: bytes | bytearray | memoryview | TensorValue) -> bytes | None:
    """The first ``STAMPED_PREFIX`` bytes of a version-2 tensor value with a stamp: what names this value in
    the store (compared there instead of the whole value); None for anything else (version 1, unstamped)."""
    head = raw.head if isinstance(raw, TensorValue) else raw
    if len(raw) <= STAMPED_PREFIX or len(head) < STAMPED_PREFIX or head[4] != FORMAT_VERSION or head[:4] != MAGIC:
        return None
    prefix = bytes(head[:STAMPED_PREFIX])
    return None if prefix[HEADER_SIZE:] == NO_STAMP else prefix


def encode_tensor_parts(tensor: Tensor) -> tuple[bytes, bytes | memoryview]:
    """Header and data section, unjoined (the data is a view of the array for numeric tensors)."""
    return encode_header(tensor.dtype, tensor.shape), tensor.data()


def encode_tensor(tensor: Tensor) -> bytes:
    """The stored value of ``tensor``: header + data in one ``bytes`` (the one copy of the write path)."""
    return b"".join(encode_tensor_parts(tensor))


class TensorValue:
    """A stored tensor's value as its header and its data, not joined: what a big AI.TENSORSET sends to the
    store (one after the other in one write) and keeps as its copy, so the data is never copied in this
    process. Stands wherever a GET reply of the tensor (``bytes``) would: ``decode_tensor``,
    ``stamped_prefix`` and ``len`` take either. ``data`` is never written to (a client's BLOB argument, or a
    view of an array no one else holds)."""

    __slots__ = ("data", "head")

    def __init__(self, head: bytes, data: bytes | memoryview) -> None:
        self.head = head
        self.data = data if isinstance(data, bytes) else data.cast("B")  # (so that len() counts bytes)

    def __len__(self) -> int:
        return len(self.head) + len(self.data)

    def joined(self) -> bytes:
        """The value as one ``bytes`` (a copy: only where one buffer is needed)."""
        return b"".join((self.head, self.data))


UNJOINED_FROM: Final = 64 * 1024
"""Data at least this big is kept apart from its header (``TensorValue``); a smaller join costs less than the
objects that avoid it."""


def encode_tensor_value(tensor: Tensor) -> bytes | TensorValue:
    """The stored value of ``tensor``: a ``TensorValue`` when its data is at least ``UNJOINED_FROM`` bytes,
    where a join would copy it; else ``encode_tensor``'s one ``bytes``."""
    head, data = encode_tensor_parts(tensor)
    return TensorValue(head, data) if len(data) >= UNJOINED_FROM else b"".join((head, data))


def looks_like_tensor(prefix: bytes) -> bool:
    """Whether the first ``HEADER_SIZE`` bytes of a string value start a tensor (AI.TENSORSET's key check)."""
    if len(prefix) < HEADER_SIZE:
        return False
    magic, version, code, ndim = _FIXED.unpack_from(prefix)
    return magic == MAGIC and version in _VERSIONS and code in DTYPES_BY_CODE and ndim <= MAX_DIMS


def read_header(raw: bytes | bytearray | memoryview) -> TensorHeader:
    """Decode a stored tensor's header; anything else answers WRONGTYPE (the key holds something else)."""
    if len(raw) < HEADER_SIZE:
        raise AIError(msgs.WRONGTYPE_MSG)
    magic, version, code, ndim = _FIXED.unpack_from(raw)
    if magic != MAGIC or version not in _VERSIONS or code not in DTYPES_BY_CODE or ndim > MAX_DIMS:
        raise AIError(msgs.WRONGTYPE_MSG)
    dims_at = STAMPED_PREFIX if version == FORMAT_VERSION else HEADER_SIZE
    end = dims_at + 8 * ndim
    if len(raw) < end:
        raise AIError(msgs.WRONGTYPE_MSG)
    shape: tuple[int, ...] = _DIMS[ndim].unpack_from(raw, dims_at)
    if any(dim < 0 for dim in shape):
        raise AIError(msgs.WRONGTYPE_MSG)
    return TensorHeader(DTYPES_BY_CODE[code].name, shape, end)


def check_length(header: TensorHeader, total_length: int) -> None:
    """WRONGTYPE unless a value of ``total_length`` bytes can hold the header's data (STRING: ≥ 1 byte/element)."""
    data_length = total_length - header.data_offset
    count = math.prod(header.shape)
    info = DTYPES[header.dtype]
    expected_ok = data_length >= count if info.kind == "string" else data_length == count * info.numpy.itemsize
    if not expected_ok:
        raise AIError(msgs.WRONGTYPE_MSG)


def decode_tensor(raw: bytes | bytearray | memoryview | TensorValue) -> Tensor:
    """The tensor stored in ``raw``, as a read-only view of it (no copy; STRING elements are copied out).

    Wrong magic or version, unknown dtype, truncated header or data, or a data size that does not match the
    shape answer WRONGTYPE: the key holds something that is not a tensor.
    """
    header, data = header_and_data(raw)
    if header.dtype == "STRING":
        check_string_count(math.prod(header.shape))
        elements = split_strings(data, math.prod(header.shape))
        if elements is None:
            raise AIError(msgs.WRONGTYPE_MSG)
        return string_tensor(elements, header.shape)
    try:
        array = np.frombuffer(data, dtype=DTYPES[header.dtype].numpy).reshape(header.shape)
    except ValueError as exc:  # e.g. dims whose product overflows: not a tensor we can hold
        raise AIError(msgs.WRONGTYPE_MSG) from exc
    return Tensor(header.dtype, header.shape, array, trusted=True)


def header_and_data(raw: bytes | bytearray | memoryview | TensorValue) -> tuple[TensorHeader, memoryview]:
    """A stored tensor's checked header and a flat view of its data section (WRONGTYPE as ``read_header``)."""
    if isinstance(raw, TensorValue):
        header = read_header(raw.head)
        if header.data_offset != len(raw.head):
            raise AIError(msgs.WRONGTYPE_MSG)
        check_length(header, len(raw))
        return header, memoryview(raw.data).cast("B").toreadonly()
    whole = raw if isinstance(raw, bytes) else memoryview(raw).cast("B")
    header = read_header(whole)
    check_length(header, len(whole))
    return header, memoryview(whole)[header.data_offset:]
