"""Framing the backing store's replies without decoding them, to relay them byte for byte (sans-IO)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

_COMPACT_AT: Final = 256 * 1024

# --- framing replies read from the backing store ----------------------------------------------------------------

_LINE_TYPES: Final = frozenset(b"+-:_,#(")
_BULK_TYPES: Final = frozenset(b"$=!")
_AGGREGATE_TYPES: Final = frozenset(b"*>~%|")


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
