"""Sans-IO RESP: the request parser, the reply encoder and a framer for replies read from the backing store.

Nothing here knows about sockets or asyncio (house rule 1). The parser follows Redis's own
``processMultibulkBuffer``/``processInlineBuffer``: the same limits, the same ``Protocol error`` texts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from backends import errors as msgs
from backends.errors import AIError, ProtocolError

INLINE_MAX_SIZE = 64 * 1024  # PROTO_INLINE_MAX_SIZE
MAX_BULK_LEN = 512 * 1024 * 1024  # proto-max-bulk-len default
MAX_MULTIBULK_LEN = 2**31 - 1  # INT_MAX, as Redis checks it
QUERY_BUFFER_LIMIT = 1024 * 1024 * 1024  # client-query-buffer-limit default
_COMPACT_AT = 256 * 1024
UNAUTHENTICATED_MAX_MULTIBULK = 10  # Redis 7: before AUTH, requests stay small
UNAUTHENTICATED_MAX_BULK = 16384


@dataclass(frozen=True, slots=True)
class Limits:
    """Protocol limits of one connection; the defaults are Redis's."""

    max_bulk_len: int = MAX_BULK_LEN
    max_multibulk_len: int = MAX_MULTIBULK_LEN
    inline_max_size: int = INLINE_MAX_SIZE
    query_buffer_limit: int = QUERY_BUFFER_LIMIT


def parse_strict_int(raw: bytes | bytearray) -> int | None:
    """Redis ``string2ll``: optional ``-``, digits, no leading zeros, no spaces, int64 range."""
    body = raw[1:] if raw[:1] == b"-" else raw
    if not body or not body.isdigit() or (len(body) > 1 and body[:1] == b"0"):
        return None
    if raw[:1] == b"-" and body == b"0":
        return None
    value = int(raw)
    if not -(2**63) <= value < 2**63:
        return None
    return value


@dataclass(slots=True)
class RequestParser:
    """Incremental parser of client requests (multibulk arrays and inline commands).

    ``feed`` appends bytes; ``next_command`` returns one argv or ``None`` when more bytes are needed, and raises
    ``ProtocolError`` for malformed or over-limit input (the caller answers it and closes the connection).
    A partially received multibulk keeps its parsed arguments, so a 100 MB value is scanned once.
    """

    limits: Limits = field(default_factory=Limits)
    authenticated: bool = True  # Redis 7 allows unauthenticated clients only small requests
    _buf: bytearray = field(default_factory=bytearray)
    _pos: int = 0
    _pending: int = -1  # arguments still expected by the multibulk being parsed; -1 = none in progress
    _args: list[bytes] = field(default_factory=list)

    def feed(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) - self._pos > self.limits.query_buffer_limit:
            raise ProtocolError(msgs.PROTO_QUERYBUF_MSG)

    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def next_command(self) -> list[bytes] | None:
        while True:
            if self._pending < 0:
                if self._pos >= len(self._buf):
                    self._compact()
                    return None
                if self._buf[self._pos] == 0x2A:  # '*'
                    if not self._start_multibulk():
                        return None
                    if self._pending == 0:
                        self._pending = -1
                        continue  # '*0' or '*-1': an empty command, skipped as Redis does
                else:
                    inline = self._parse_inline()
                    if inline is None:
                        return None
                    if inline:
                        return inline
                    continue
            if not self._collect_bulks():
                return None
            argv, self._args, self._pending = self._args, [], -1
            if len(self._buf) - self._pos == 0 or self._pos > _COMPACT_AT:
                self._compact()
            return argv

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    def _line_end(self, too_long_msg: str) -> int:
        end = self._buf.find(b"\r\n", self._pos)
        if end < 0 and len(self._buf) - self._pos > self.limits.inline_max_size:
            raise ProtocolError(too_long_msg)
        return end

    def _start_multibulk(self) -> bool:
        end = self._line_end(msgs.PROTO_BIG_MBULK_MSG)
        if end < 0:
            return False
        count = parse_strict_int(self._buf[self._pos + 1 : end])
        if count is None or count > self.limits.max_multibulk_len:
            raise ProtocolError(msgs.PROTO_INVALID_MULTIBULK_MSG)
        if not self.authenticated and count > UNAUTHENTICATED_MAX_MULTIBULK:
            raise ProtocolError(msgs.PROTO_UNAUTH_MULTIBULK_MSG)
        self._pos = end + 2
        self._pending = max(count, 0)
        return True

    def _collect_bulks(self) -> bool:
        buf = self._buf
        while self._pending > 0:
            pos = self._pos
            if pos >= len(buf):
                return False
            if buf[pos] != 0x24:  # '$'
                raise ProtocolError(msgs.PROTO_EXPECTED_DOLLAR_FMT.format(got=chr(buf[pos])))
            end = self._line_end(msgs.PROTO_BIG_BULK_COUNT_MSG)
            if end < 0:
                return False
            size = parse_strict_int(buf[pos + 1 : end])
            if size is None or size < 0 or size > self.limits.max_bulk_len:
                raise ProtocolError(msgs.PROTO_INVALID_BULK_MSG)
            if not self.authenticated and size > UNAUTHENTICATED_MAX_BULK:
                raise ProtocolError(msgs.PROTO_UNAUTH_BULK_MSG)
            start = end + 2
            if len(buf) < start + size + 2:
                return False
            self._args.append(bytes(memoryview(buf)[start : start + size]))  # one copy, not two
            self._pos = start + size + 2
            self._pending -= 1
        return True

    def _parse_inline(self) -> list[bytes] | None:
        end = self._buf.find(b"\n", self._pos)
        if end < 0:
            if len(self._buf) - self._pos > self.limits.inline_max_size:
                raise ProtocolError(msgs.PROTO_BIG_INLINE_MSG)
            return None
        line = bytes(self._buf[self._pos : end]).rstrip(b"\r")
        self._pos = end + 1
        return split_inline_args(line)


def split_inline_args(line: bytes) -> list[bytes]:
    """Redis ``sdssplitargs``: spaces separate arguments, with "double" (escapes) and 'single' quotes."""
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i : i + 1].isspace():
            i += 1
        if i >= n:
            return args
        current = bytearray()
        in_dq = in_sq = False
        while True:
            if in_dq:
                i = _inline_double_quoted(line, i, current)
                in_dq = False
                if i < n and not line[i : i + 1].isspace():
                    raise ProtocolError(msgs.PROTO_UNBALANCED_QUOTES_MSG)
                break
            if in_sq:
                i = _inline_single_quoted(line, i, current)
                in_sq = False
                if i < n and not line[i : i + 1].isspace():
                    raise ProtocolError(msgs.PROTO_UNBALANCED_QUOTES_MSG)
                break
            if i >= n or line[i : i + 1].isspace():
                break
            ch = line[i : i + 1]
            if ch == b'"':
                in_dq = True
            elif ch == b"'":
                in_sq = True
            else:
                current += ch
            i += 1
        args.append(bytes(current))


_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"a": b"\a"}
_HEX = b"0123456789abcdefABCDEF"


def _inline_double_quoted(line: bytes, i: int, out: bytearray) -> int:
    """Consume a double-quoted section starting after the opening quote; return the index after the closing one."""
    n = len(line)
    while i < n:
        ch = line[i : i + 1]
        if ch == b"\\" and i + 3 < n and line[i + 1 : i + 2] == b"x" and _is_hex_pair(line[i + 2 : i + 4]):
            out.append(int(line[i + 2 : i + 4], 16))
            i += 4
        elif ch == b"\\" and i + 1 < n:
            nxt = line[i + 1 : i + 2]
            out += _ESCAPES.get(nxt, nxt)
            i += 2
        elif ch == b'"':
            return i + 1
        else:
            out += ch
            i += 1
    raise ProtocolError(msgs.PROTO_UNBALANCED_QUOTES_MSG)


def _inline_single_quoted(line: bytes, i: int, out: bytearray) -> int:
    n = len(line)
    while i < n:
        ch = line[i : i + 1]
        if ch == b"\\" and line[i + 1 : i + 2] == b"'":
            out += b"'"
            i += 2
        elif ch == b"'":
            return i + 1
        else:
            out += ch
            i += 1
    raise ProtocolError(msgs.PROTO_UNBALANCED_QUOTES_MSG)


def _is_hex_pair(pair: bytes) -> bool:
    return len(pair) == 2 and all(c in _HEX for c in pair)


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
class Verbatim:
    """A RESP3 verbatim string (``=len\\r\\ntxt:...``), a bulk string in RESP2."""

    text: bytes
    fmt: bytes = b"txt"


@dataclass(frozen=True, slots=True)
class Raw:
    """Bytes that are already RESP, written as they are (replies relayed from the backing store)."""

    data: bytes


class _NullArray:
    """``*-1`` in RESP2, ``_`` in RESP3."""


NULL_ARRAY = _NullArray()
OK = Status("OK")


def format_double(value: float) -> bytes:
    """RedisAI's ``%.17g``; infinities and NaN spelled as glibc prints them."""
    if math.isnan(value):
        return b"-nan" if math.copysign(1.0, value) < 0 else b"nan"
    if math.isinf(value):
        return b"inf" if value > 0 else b"-inf"
    return (b"%.17g" % value)


def encode(value: Any, proto: int = 2) -> bytes:
    """Encode one reply value for a client speaking RESP ``proto`` (2 or 3)."""
    out: list[bytes] = []
    _encode_into(value, proto, out)
    return b"".join(out)


def _encode_into(value: Any, proto: int, out: list[bytes]) -> None:  # noqa: C901 - one branch per RESP type
    kind = type(value)
    if kind is bytes or kind is bytearray or kind is memoryview:
        out.append(b"$%d\r\n" % len(value))
        out.append(value)
        out.append(b"\r\n")
    elif kind is Status:
        out.append(b"+" + value.text.encode() + b"\r\n")
    elif kind is bool:
        out.append((b"#t\r\n" if value else b"#f\r\n") if proto == 3 else (b":1\r\n" if value else b":0\r\n"))
    elif kind is int:
        out.append(b":%d\r\n" % value)
    elif kind is str:
        _encode_into(value.encode(), proto, out)
    elif value is None:
        out.append(b"_\r\n" if proto == 3 else b"$-1\r\n")
    elif kind is list or kind is tuple:
        out.append(b"*%d\r\n" % len(value))
        for item in value:
            _encode_into(item, proto, out)
    elif isinstance(value, AIError):
        out.append(b"-" + value.resp_text().encode() + b"\r\n")
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
    else:
        _encode_rare(value, proto, out)


def _encode_rare(value: Any, proto: int, out: list[bytes]) -> None:
    if isinstance(value, (set, frozenset)):
        out.append((b"~%d\r\n" if proto == 3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode_into(item, proto, out)
    elif isinstance(value, Push):
        out.append((b">%d\r\n" if proto == 3 else b"*%d\r\n") % len(value.items))
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


# --- framing replies read from the backing store ----------------------------------------------------------------

_LINE_TYPES = frozenset(b"+-:_,#(")
_BULK_TYPES = frozenset(b"$=!")
_AGGREGATE_TYPES = frozenset(b"*>~%|")


@dataclass(slots=True)
class ReplyFramer:
    """Splits a stream of RESP2/RESP3 replies into whole frames without decoding them.

    Used to relay the backing store's replies to a client byte for byte. The scan is resumable: a frame
    that arrives in many reads is walked once, and a large bulk string is skipped by its length.
    """

    _buf: bytearray = field(default_factory=bytearray)
    _start: int = 0
    _pos: int = 0
    _stack: list[int] = field(default_factory=list)

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_frame(self) -> bytes | None:
        buf = self._buf
        while self._pos < len(buf):
            kind = buf[self._pos]
            end = buf.find(b"\r\n", self._pos)
            if end < 0:
                return None
            if kind in _LINE_TYPES:
                self._pos = end + 2
            elif kind in _BULK_TYPES:
                size = int(buf[self._pos + 1 : end])
                stop = end + 2 + size + 2 if size >= 0 else end + 2
                if len(buf) < stop:
                    return None
                self._pos = stop
            elif kind in _AGGREGATE_TYPES:
                count = int(buf[self._pos + 1 : end])
                self._pos = end + 2
                if count > 0:
                    self._stack.append(count * 2 + 1 if kind == 0x7C else count * 2 if kind == 0x25 else count)
                    continue
            else:
                raise ValueError(f"unexpected RESP type byte {kind!r} from the backing store")
            if self._element_done():
                return self._take_frame()
        return None

    def _element_done(self) -> bool:
        stack = self._stack
        while stack:
            stack[-1] -= 1
            if stack[-1] > 0:
                return False
            stack.pop()
        return True

    def _take_frame(self) -> bytes:
        frame = bytes(self._buf[self._start : self._pos])
        self._start = self._pos
        if self._start == len(self._buf) or self._start > _COMPACT_AT:
            del self._buf[: self._start]
            self._pos -= self._start
            self._start = 0
        return frame


def split_aggregate(frame: bytes) -> tuple[bytes, list[bytes]]:
    """Split a raw array/map/set frame into its type byte and its raw element frames (map: keys and values)."""
    end = frame.index(b"\r\n")
    kind, count = frame[:1], int(frame[1:end])
    framer = ReplyFramer()
    framer.feed(frame[end + 2 :])
    elements: list[bytes] = []
    while (element := framer.next_frame()) is not None:
        elements.append(element)
    expected = max(count, 0) * (2 if kind == b"%" else 1)
    if len(elements) != expected:
        raise ValueError("truncated aggregate frame")
    return kind, elements


def join_aggregate(kind: bytes, elements: list[bytes]) -> bytes:
    count = len(elements) // 2 if kind == b"%" else len(elements)
    return kind + b"%d\r\n" % count + b"".join(elements)
