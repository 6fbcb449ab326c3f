"""Sans-IO RESP request parsing: multibulk and inline commands, Redis's limits and Protocol error texts.

Replies: server/protocol/reply.py (values and the encoder); the store's replies: server/protocol/framer.py.

Nothing here knows about sockets or asyncio (CONTRIBUTING.md, *Sans-IO protocol*). The parser follows Redis's own
``processMultibulkBuffer``/``processInlineBuffer``: the same limits, the same ``Protocol error`` texts.

Fast path: complete multibulk frames in a buffer of at most ``HIREDIS_MAX_BUFFER`` bytes are parsed by
hiredis (C), several per call. hiredis is as strict as Redis about the numbers in a frame (no leading zeros,
signs or spaces), so a frame it accepts is exactly the canonical encoding of what it returned, and its length
follows from the arguments. Whatever it does not turn into a list of bulk strings — an inline command, a
malformed or over-limit frame, a frame still arriving, an unauthenticated client — is left, from the start
of that frame, to the Python parser below, which gives Redis's exact error or keeps the partial frame.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

import hiredis

from backends import errors as msgs
from backends.errors import ProtocolError
from backends.errors import parse_strict_int as parse_strict_int  # re-exported: the number rule of every layer
from server.protocol.big_bulk import BigBulk

INLINE_MAX_SIZE: Final = 64 * 1024  # PROTO_INLINE_MAX_SIZE
MAX_BULK_LEN: Final = 512 * 1024 * 1024  # proto-max-bulk-len default
MAX_MULTIBULK_LEN: Final = 2**31 - 1  # INT_MAX, as Redis checks it
QUERY_BUFFER_LIMIT: Final = 1024 * 1024 * 1024  # client-query-buffer-limit default
_COMPACT_AT: Final = 256 * 1024
UNAUTHENTICATED_MAX_MULTIBULK: Final = 10  # Redis 7: before AUTH, requests stay small
UNAUTHENTICATED_MAX_BULK: Final = 16384
BIG_BULK: Final = 64 * 1024  # a bulk at least this big that is still arriving is collected in chunks
HEAD_WINDOW: Final = 1024  # the bytes the Python parser copies at a time to read bulk headers from
# "$" + 9 digits + CR LF, the longest header read from the copy: a fresh copy is taken when the next header may
# not fit in the one held (speed only: a header the copy cuts off is read by ``_bulk_header``)
_LONGEST_HEADER: Final = 12
# larger buffers hold big values: the Python parser copies them once, hiredis twice
HIREDIS_MAX_BUFFER: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """Protocol limits of one connection; the defaults are Redis's."""

    max_bulk_len: int = MAX_BULK_LEN
    max_multibulk_len: int = MAX_MULTIBULK_LEN
    inline_max_size: int = INLINE_MAX_SIZE
    query_buffer_limit: int = QUERY_BUFFER_LIMIT


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
    _ready: deque[list[bytes]] = field(default_factory=deque)  # parsed by the fast path, not yet returned
    # A big bulk still arriving, received in place (server/protocol/big_bulk.py), and the CR LF after it still
    # to skip. Appending 1 MB in 64 KB reads to the buffer copied it again and again.
    _big: BigBulk | None = None
    _skip: int = 0
    # The fast path's reader, kept between calls while it holds nothing (a new one per request costs more than
    # the parse) — that is, while every byte it was fed became a frame taken.
    _reader: hiredis.Reader = field(default_factory=hiredis.Reader)

    def feed(self, data: bytes) -> None:
        if self._skip or self._big is not None:
            data = self._take_big(data)
        self._buf += data
        if self.buffered() > self.limits.query_buffer_limit:
            raise ProtocolError(msgs.PROTO_QUERYBUF_MSG)

    def buffered(self) -> int:
        return len(self._buf) - self._pos + (self._big.filled if self._big is not None else 0)

    def big_arriving(self) -> bool:
        """Whether a big bulk has started and still needs bytes (``big_free`` is where they go)."""
        big = self._big
        return big is not None and not big.complete()

    def big_free(self) -> memoryview | None:
        """Where the next bytes of a big bulk still arriving go, so a read can land there (``big_received``);
        None when no bulk is arriving (the next read is ``feed``'s)."""
        big = self._big
        return big.free() if big is not None and not big.complete() else None

    def big_received(self, count: int) -> None:
        """``count`` bytes were read into ``big_free()``'s view. A bulk completed so becomes an argument at the
        next ``feed`` (its CR LF): the event loop still holds the view while it reports the read, and the bytes
        object cannot be handed out uncopied while a view of it exists."""
        big = self._big
        if big is not None:
            big.received(count)
        if self.buffered() > self.limits.query_buffer_limit:
            self.drop_big()  # nothing after it is read: let go of it now
            raise ProtocolError(msgs.PROTO_QUERYBUF_MSG)

    def drop_big(self) -> None:
        """The client is gone: a big bulk still arriving never completes (``BigBulk.discard``)."""
        big, self._big = self._big, None
        if big is not None:
            big.discard()

    def _take_big(self, data: bytes) -> bytes:
        """Give the big bulk in progress what it needs of ``data``, and the CR LF after it; return the rest."""
        view = memoryview(data)
        big = self._big
        if big is not None:
            taken = big.take(view)  # (not inside the slice: compiled, mypyc evaluated it twice there)
            view = view[taken:]
            if not big.complete():
                return b""
            self._end_big(big)
        skipped = min(self._skip, len(view))
        self._skip -= skipped
        return bytes(view[skipped:])

    def _end_big(self, big: BigBulk) -> None:
        self._args.append(big.value())
        self._big = None
        self._pending -= 1
        self._skip = 2

    def next_command(self) -> list[bytes] | None:
        if self._ready:
            return self._ready.popleft()
        if self._pending < 0:
            if self._pos >= len(self._buf):  # all consumed (the usual end of a read): nothing to parse
                self._compact()
                return None
            if self.authenticated and self._fast_parse():
                return self._ready.popleft()
        return self._next_slow()

    def _next_slow(self) -> list[bytes] | None:
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

    def _fast_parse(self) -> bool:
        """Parse the complete multibulk frames at the head of the buffer with hiredis (see the module
        docstring); False when it took none, leaving the buffer to the Python parser."""
        buf, pos = self._buf, self._pos
        if pos >= len(buf) or buf[pos] != 0x2A or len(buf) - pos > HIREDIS_MAX_BUFFER:
            return False
        limits = self.limits
        # walked as a bytes copy (at most HIREDIS_MAX_BUFFER): mypyc reads a bytes object's bytes directly, a
        # bytearray's through a generic item lookup per byte
        end = pos + _plain_frames_end(bytes(buf) if pos == 0 else bytes(buf[pos:]), limits.max_multibulk_len,
                                      limits.max_bulk_len)
        if end == pos:
            return False
        reader, ready = self._reader, self._ready
        reader.feed(buf, pos, end - pos)  # type: ignore[arg-type]  # (buffer, offset, length): any buffer; the stubs say bytes
        taken = 0
        try:
            while isinstance(frame := reader.gets(), list):
                ready.append(frame)
                taken += 1
        except hiredis.ProtocolError:  # never for frames the walk accepted; if it were, the Python parser decides
            for _ in range(taken):
                ready.pop()
            self._reader = hiredis.Reader()
            return False
        self._pos = end
        if end >= len(buf) or end > _COMPACT_AT:
            self._compact()
        return taken > 0

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
        """The bulks of the command in progress (the ones hiredis left: a big one still arriving, a bad header
        …). Headers and small bulks are read from ``head``, a bytes copy of the next ``HEAD_WINDOW`` bytes of
        the buffer (compiled, a bytes object's bytes are read directly, a bytearray's through a generic item
        lookup each); a header that is not plain digits, or not all here, goes to ``_bulk_header``."""
        buf = self._buf
        head = b""
        head_at = 0  # where ``head`` starts in ``buf``
        while self._pending > 0:
            pos = self._pos
            if pos >= len(buf):
                return False
            if buf[pos] != 0x24:  # '$'
                raise ProtocolError(msgs.PROTO_EXPECTED_DOLLAR_FMT.format(got=_wire_char(buf[pos])))
            if pos + _LONGEST_HEADER > head_at + len(head) and head_at + len(head) < len(buf):
                head_at, head = pos, bytes(memoryview(buf)[pos : pos + HEAD_WINDOW])
            size, start = _header_number(head, pos - head_at + 1, len(head))
            if size >= 0:
                start += head_at
                self._check_bulk_size(size)
            else:
                size, start = self._bulk_header(pos)
                if size < 0:
                    return False
            if size >= BIG_BULK and len(buf) - start < size:
                self._start_big(start, size)
                return False
            if len(buf) < start + size + 2:
                return False
            end = start + size
            if end <= head_at + len(head):
                self._args.append(head[start - head_at : end - head_at])
            else:
                self._args.append(bytes(memoryview(buf)[start:end]))  # one copy, not two
            self._pos = end + 2
            self._pending -= 1
        return True

    def _bulk_header(self, pos: int) -> tuple[int, int]:
        """The size of the bulk whose header starts at ``pos`` and where its data starts, read as Redis reads
        it (its errors); (-1, -1) while the header's line is not all here."""
        end = self._line_end(msgs.PROTO_BIG_BULK_COUNT_MSG)
        if end < 0:
            return -1, -1
        size = parse_strict_int(self._buf[pos + 1 : end])
        if size is None or size < 0:
            raise ProtocolError(msgs.PROTO_INVALID_BULK_MSG)
        self._check_bulk_size(size)
        return size, end + 2

    def _check_bulk_size(self, size: int) -> None:
        if size > self.limits.max_bulk_len:
            raise ProtocolError(msgs.PROTO_INVALID_BULK_MSG)
        if not self.authenticated and size > UNAUTHENTICATED_MAX_BULK:
            raise ProtocolError(msgs.PROTO_UNAUTH_BULK_MSG)

    def _start_big(self, start: int, size: int) -> None:
        """Receive this bulk in place (``BigBulk``): its first part, here, is copied there; the buffer then starts
        empty, and the rest of the bulk goes straight to it (``big_free``, or ``feed`` via ``_take_big``)."""
        self._big = BigBulk(memoryview(self._buf)[start:], size)
        self._buf = bytearray()
        self._pos = 0

    def _parse_inline(self) -> list[bytes] | None:
        end = self._buf.find(b"\n", self._pos)
        if end < 0:
            if len(self._buf) - self._pos > self.limits.inline_max_size:
                raise ProtocolError(msgs.PROTO_BIG_INLINE_MSG)
            return None
        line = bytes(self._buf[self._pos : end]).rstrip(b"\r")
        self._pos = end + 1
        return split_inline_args(line)


def _plain_frames_end(buf: bytes, max_count: int, max_bulk: int) -> int:
    """Where the complete frames at the start of ``buf`` that are plain arrays of bulk strings (``*n``, then ``$len``
    and the bytes per element; canonical numbers, no leading zeros) end: what hiredis is then fed, and all it
    is fed. hiredis makes a list of an array's announced size as it reads the header, before any element
    arrives: ``*2147483647`` (15 bytes), or an array nested in a request, cost seconds of the loop thread (and
    ``*4000000000`` a MemoryError) where Redis answers a Protocol error or waits. A frame walked here is
    complete within the buffer, so its arrays are as small as its bytes."""
    n, end, at = len(buf), 0, 0
    while at < n and buf[at] == 0x2A:  # '*'
        count, at = _header_number(buf, at + 1, n)
        if count <= 0 or count > max_count:
            break
        for _ in range(count):
            if at >= n or buf[at] != 0x24:  # '$'
                return end
            size, at = _header_number(buf, at + 1, n)
            if size < 0 or size > max_bulk:
                return end
            at += size + 2
        if at > n:
            break
        end = at
    return end


def _header_number(buf: bytes, at: int, n: int) -> tuple[int, int]:
    """The canonical non-negative decimal at ``buf[at:]`` ended by CR LF, and where the bytes after it start;
    (-1, at) for anything else (a sign, a leading zero, another byte, more than 9 digits, not all here)."""
    value, i = 0, at
    while i < n and i - at < 10:
        byte = buf[i]
        if byte == 0x0D:  # '\r'
            if i == at or i + 1 >= n or buf[i + 1] != 0x0A or (buf[at] == 0x30 and i - at > 1):
                return -1, at
            return value, i + 2
        if byte < 0x30 or byte > 0x39:
            return -1, at
        value = value * 10 + byte - 0x30
        i += 1
    return -1, at


def _wire_char(byte: int) -> str:
    """The byte as a character of an error's text that goes out as that very byte, as Redis echoes it: ASCII as
    itself, any other as its surrogate escape (server/protocol/reply.py encodes errors with surrogateescape)."""
    return chr(byte) if byte < 0x80 else chr(0xDC00 + byte)


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


_ESCAPES: Final = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"a": b"\a"}
_HEX: Final = b"0123456789abcdefABCDEF"


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
