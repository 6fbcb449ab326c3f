"""AI.TENSORSET and AI.TENSORGET: tensors stored as documented Redis strings (docs/tensor-format.md).

Both check the key before the arguments, as RedisAI does: a key holding anything but a tensor answers WRONGTYPE
even when the rest of the command is malformed. Parsing and replies are the pure helpers of
backends/tensor_args.py (the DAG engine uses the same ones); this module adds the store round trips:

* AI.TENSORSET: one round trip: a store-side script checks the key (missing or a tensor) and SETs the encoded
  tensor in one atomic step (the SET, like RedisAI's overwrite, drops any TTL). A malformed command only reads
  the key's first bytes, to answer WRONGTYPE before the argument error.
* AI.TENSORGET: one GET, decoded without copying. ``META`` alone reads only the header and the length
  (GETRANGE + STRLEN), so asking for the shape of a 100 MB tensor does not move 100 MB. A tensor this server
  wrote or read before is answered from its copy once a GETRANGE of the stored value's stamp agrees with it
  (docs/tensor-format.md): a few bytes cross the socket instead of the tensor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from backends import errors as msgs
from backends.errors import AIError, wrong_arity
from backends.tensor import (
    DTYPES,
    HEADER_SIZE,
    MAX_HEADER_SIZE,
    Tensor,
    TensorValue,
    check_length,
    decode_tensor,
    encode_tensor_value,
    header_and_data,
    looks_like_tensor,
    read_header,
)
from backends.tensor_args import (
    TensorGetFormat,
    build_tensor,
    meta_reply,
    parse_tensorset,
    tensorget_format,
    tensorget_reply,
)
from server.protocol.reply import BIG_REPLY_PART, OK, Raw, RawParts, array_header, bulk_header, integer_reply

if TYPE_CHECKING:
    from server.commands.context import Client

_PROBE_END: Final = str(HEADER_SIZE - 1).encode()
_META_PROBE_END: Final = str(MAX_HEADER_SIZE - 1).encode()


async def cmd_tensorset(client: Client, argv: list[bytes]) -> Any:
    """AI.TENSORSET key type [dim ...] [BLOB data | VALUES value [value ...]]

    Argument errors are held back until the key is known to be missing or a tensor (WRONGTYPE comes first).
    """
    if len(argv) < 4:
        raise wrong_arity(argv[0].decode(errors="replace"))
    tensor = _tensor_or_error(argv)
    keyspace = client.keyspace()
    if isinstance(tensor, AIError):
        check_tensor_or_missing(await keyspace.pipeline(tensor_probe(argv[1])))
        raise tensor
    await keyspace.set_tensors([argv[1]], [encode_tensor_value(tensor)], empty_is_free=False)  # checked and written
    return OK


def _tensor_or_error(argv: list[bytes]) -> Tensor | AIError:
    try:
        return build_tensor(parse_tensorset(argv))
    except AIError as exc:
        return exc


def tensor_probe(key: bytes) -> list[tuple[bytes, ...]]:
    """The reads ``check_tensor_or_missing`` needs: whether ``key`` exists, and its first bytes."""
    return [(b"EXISTS", key), (b"GETRANGE", key, b"0", _PROBE_END)]


def check_tensor_or_missing(replies: list[Any]) -> None:
    """WRONGTYPE unless the key ``tensor_probe`` read is missing or holds a tensor (a tensor header)."""
    exists, head = replies
    for reply in (exists, head):
        if isinstance(reply, AIError):
            raise reply  # the store's WRONGTYPE (a hash, a list …) has RedisAI's exact text
    if exists and not looks_like_tensor(head):
        raise AIError(msgs.WRONGTYPE_MSG)


async def cmd_tensorget(client: Client, argv: list[bytes]) -> Any:
    """AI.TENSORGET key [META] [BLOB | VALUES]

    Key errors (missing: ``ERR tensor key is empty or in a different shard``; not a tensor: WRONGTYPE) come
    before format errors, as in RedisAI.
    """
    if not 2 <= len(argv) <= 4:
        raise wrong_arity(argv[0].decode(errors="replace"))
    fmt = format_or_error(argv)
    keyspace = client.keyspace()
    if isinstance(fmt, AIError) or meta_only(fmt):  # a format error is answered once the key is known
        return meta_answer(fmt, await keyspace.pipeline(meta_reads(argv[1])))
    key = argv[1]
    copy = keyspace.stamped_copy(key)
    if copy is not None and await keyspace.still_stored(key, copy):
        return tensor_answer(fmt, copy, client.ctx.config.tensorget_values_max)
    raw = await keyspace.call(b"GET", key)
    keyspace.remember_tensor(key, raw)
    return tensor_answer(fmt, raw, client.ctx.config.tensorget_values_max)


def meta_only(fmt: TensorGetFormat) -> bool:
    """``META`` alone: the header is read, not the data."""
    return fmt.meta and not fmt.blob and not fmt.values


def meta_answer(fmt: TensorGetFormat | AIError, replies: list[Any]) -> Any:
    """AI.TENSORGET's reply from the ``meta_reads`` replies: the key's error, else the format's, else META."""
    dtype, shape = meta_of(replies)
    if isinstance(fmt, AIError):
        raise fmt
    return meta_reply(dtype, shape)


def tensor_answer(fmt: TensorGetFormat, raw: Any, values_max: int = 0) -> Any:
    """AI.TENSORGET's reply from the GET of the key (an error value is raised as it is); VALUES of more than
    ``values_max`` elements is refused (0: no limit)."""
    if isinstance(raw, AIError):
        raise raw
    if raw is None:
        raise AIError(msgs.TENSOR_KEY_EMPTY_MSG)
    if fmt.meta and fmt.blob:
        fast = meta_blob_reply(raw)
        if fast is not None:
            return fast
    return tensorget_reply(decode_tensor(raw), fmt, values_max)


def meta_blob_reply(raw: bytes | TensorValue) -> Raw | RawParts | None:
    """``META BLOB`` of a numeric tensor, encoded straight from the stored header: the same bytes as
    ``tensorget_reply`` (a plain array, in RESP2 and RESP3 alike), without building a numpy array and a reply
    tree to encode. It is the most common TENSORGET. None (the general path) for STRING tensors and dtypes
    without a RedisAI name; a value that is not a tensor answers WRONGTYPE here as there."""
    if isinstance(raw, TensorValue):
        header, data = header_and_data(raw)
    else:  # (the common case, a small tensor read from the store: no tuple made)
        header = read_header(raw)
        check_length(header, len(raw))
        data = memoryview(raw)[header.data_offset :]
    if header.dtype == "STRING" or not DTYPES[header.dtype].canonical:
        return None
    dtype = header.dtype.encode()
    parts: list[bytes | memoryview] = [b"*6\r\n$5\r\ndtype\r\n", bulk_header(len(dtype)), dtype,
                                       b"\r\n$5\r\nshape\r\n", array_header(len(header.shape))]
    for dim in header.shape:  # one join of prebuilt parts (a generator in a join is an object resumed per dim)
        parts.append(integer_reply(dim))
    parts.append(b"$4\r\nblob\r\n")
    parts.append(bulk_header(len(data)))
    if len(data) >= BIG_REPLY_PART:  # the data its own buffer: not copied into the reply
        return RawParts([b"".join(parts), data, b"\r\n"])
    parts.append(data)
    parts.append(b"\r\n")
    return Raw(b"".join(parts))


def format_or_error(argv: list[bytes]) -> TensorGetFormat | AIError:
    try:
        return tensorget_format(argv)
    except AIError as exc:
        return exc


def meta_reads(key: bytes) -> list[tuple[bytes, ...]]:
    """What ``meta_of`` needs: whether ``key`` exists, its header's bytes and its length — never its data."""
    return [(b"EXISTS", key), (b"GETRANGE", key, b"0", _META_PROBE_END), (b"STRLEN", key)]


def meta_of(replies: list[Any]) -> tuple[str, tuple[int, ...]]:
    """dtype and shape of the tensor ``meta_reads`` read, from its header and length."""
    exists, head, length = replies
    for reply in (exists, head, length):
        if isinstance(reply, AIError):
            raise reply
    if not exists:
        raise AIError(msgs.TENSOR_KEY_EMPTY_MSG)
    header = read_header(head)
    check_length(header, length)
    return header.dtype, header.shape
