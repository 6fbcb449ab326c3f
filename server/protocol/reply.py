"""RESP reply values and their encoder, for RESP2 and RESP3 clients (sans-IO).

Handlers return plain Python values (bytes, int, float, list, dict, None, AIError) or these markers; the
connection encodes them for the client's protocol with ``encode``. Floats use RedisAI's ``%.17g``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from backends.errors import AIError

# --- reply values ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Status:
    """A simple string (``+OK``)."""

    text: str


@dataclass(frozen=True, slots=True)
class Push:
    """An out-of-band message: RESP3 push (``>``), a plain array in RESP2."""

    items: list[Any]


@dataclass(frozen=True, slots=True)
class SetOf:
    """A RESP3 set (``~``) whose elements keep their order (COMMAND's flag lists); a plain array in RESP2."""

    items: list[Any]


@dataclass(frozen=True, slots=True)
class Verbatim:
    """A RESP3 verbatim string (``=len\\r\\ntxt:...``), a bulk string in RESP2."""

    text: bytes
    fmt: bytes = b"txt"


class Raw:
    """Bytes that are already RESP, written as they are (replies relayed from the backing store, TENSORGET's).
    Immutable; a plain class because mypyc compiles its ``__init__`` (a frozen dataclass's runs interpreted)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data: Final = data


class RawParts:
    """RESP already encoded, as buffers to write one after another: a reply that carries a tensor's data,
    which is not copied into one ``bytes`` with the rest (``vectored``). Immutable."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[bytes | memoryview]) -> None:
        self.parts: Final = parts


MEMORYVIEW: Final = memoryview
"""The ``memoryview`` type as a module constant: compiled, a use of the builtin's name looks it up in the
builtins module every time (~270 instructions), a constant is read from a static."""

BIG_REPLY_PART: Final = 64 * 1024
"""A bulk at least this big (a tensor's data) is written as its own buffer, not joined into its reply."""


def vectored(value: Any) -> list[bytes | memoryview] | None:
    """``value``'s RESP as buffers to write one after another, when it is ``RawParts`` or a bulk of at least
    ``BIG_REPLY_PART`` bytes (AI.TENSORGET … BLOB's data); None otherwise: ``encode`` joins it."""
    kind = type(value)
    if kind is RawParts:
        return list(value.parts)
    if kind is MEMORYVIEW and value.nbytes >= BIG_REPLY_PART:
        view = value if value.format == "B" else value.cast("B")  # (a writer counts a buffer by its len())
        return [bulk_header(view.nbytes), view, b"\r\n"]
    if kind is bytes and len(value) >= BIG_REPLY_PART:
        return [bulk_header(len(value)), value, b"\r\n"]
    return None


class _NullArray:
    """``*-1`` in RESP2, ``_`` in RESP3."""


NULL_ARRAY: Final = _NullArray()
OK: Final = Status("OK")
PONG: Final = Status("PONG")
_OK_WIRE: Final = b"+OK\r\n"
_PONG_WIRE: Final = b"+PONG\r\n"

# The RESP headers of small arrays, bulk strings and integers, made once: %-formatting one costs ~70 ns, and a
# reply or a command to the store (server/store/upstream.py pack_command) has a dozen of them
_ARRAYS: Final = tuple(b"*%d\r\n" % count for count in range(64))
_BULKS: Final = tuple(b"$%d\r\n" % size for size in range(1024))
_INTEGERS: Final = tuple(b":%d\r\n" % number for number in range(1024))


def array_header(count: int) -> bytes:
    """``*count\r\n``."""
    return _ARRAYS[count] if 0 <= count < 64 else b"*%d\r\n" % count


def bulk_header(size: int) -> bytes:
    """``$size\r\n``."""
    return _BULKS[size] if 0 <= size < 1024 else b"$%d\r\n" % size


def integer_reply(number: int) -> bytes:
    """``:number\r\n``."""
    return _INTEGERS[number] if 0 <= number < 1024 else b":%d\r\n" % number


def format_double(value: float) -> bytes:
    """RedisAI's ``%.17g``; infinities and NaN spelled as glibc prints them."""
    if math.isnan(value):
        return b"-nan" if math.copysign(1.0, value) < 0 else b"nan"
    if math.isinf(value):
        return b"inf" if value > 0 else b"-inf"
    return (b"%.17g" % value)


def encode(value: Any, proto: int = 2) -> bytes:
    """Encode one reply value for a client speaking RESP ``proto`` (2 or 3). The commonest replies, OK and PONG,
    are prebuilt, so they cost no encoding at all."""
    if value is OK:
        return _OK_WIRE
    if value is PONG:
        return _PONG_WIRE
    out: list[bytes] = []
    _encode_into(value, proto, out)
    return b"".join(out)


def _encode_into(value: Any, proto: int, out: list[bytes]) -> None:  # noqa: C901 - one branch per RESP type
    kind = type(value)
    if kind is bytes or kind is bytearray or kind is MEMORYVIEW:
        out.append(bulk_header(len(value)))
        out.append(value)
        out.append(b"\r\n")
    elif kind is Status:
        out.append(b"+" + value.text.encode() + b"\r\n")
    elif kind is bool:
        out.append((b"#t\r\n" if value else b"#f\r\n") if proto == 3 else (b":1\r\n" if value else b":0\r\n"))
    elif kind is int:
        out.append(integer_reply(value))
    elif kind is str:
        _encode_into(value.encode(), proto, out)
    elif value is None:
        out.append(b"_\r\n" if proto == 3 else b"$-1\r\n")
    elif kind is list or kind is tuple:
        out.append(array_header(len(value)))
        for item in value:
            _encode_into(item, proto, out)
    elif isinstance(value, AIError):
        out.append(b"-" + value.resp_text().encode(errors="surrogateescape") + b"\r\n")  # (raw bytes echoed)
    elif kind is float:
        text = format_double(value)
        out.append(b"," + text + b"\r\n" if proto == 3 else b"$%d\r\n%s\r\n" % (len(text), text))
    elif kind is dict:
        out.append((b"%%%d\r\n" if proto == 3 else b"*%d\r\n") % (len(value) if proto == 3 else 2 * len(value)))
        for key, item in value.items():
            _encode_into(key, proto, out)
            _encode_into(item, proto, out)
    elif kind is Raw:
        out.append(value.data)
    elif kind is RawParts:
        out.extend(value.parts)
    else:
        _encode_rare(value, proto, out)


def _encode_rare(value: Any, proto: int, out: list[bytes]) -> None:
    if isinstance(value, (set, frozenset)):
        out.append((b"~%d\r\n" if proto == 3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode_into(item, proto, out)
    elif isinstance(value, (Push, SetOf)):
        marker = b">" if isinstance(value, Push) else b"~"
        out.append((marker + b"%d\r\n" if proto == 3 else b"*%d\r\n") % len(value.items))
        for item in value.items:
            _encode_into(item, proto, out)
    elif isinstance(value, Verbatim):
        if proto == 3:
            body = value.fmt + b":" + value.text
            out.append(b"=%d\r\n%s\r\n" % (len(body), body))
        else:
            _encode_into(value.text, proto, out)
    elif value is NULL_ARRAY:
        out.append(b"_\r\n" if proto == 3 else b"*-1\r\n")
    elif isinstance(value, int):  # IntEnum and friends
        out.append(b":%d\r\n" % int(value))
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as RESP")
