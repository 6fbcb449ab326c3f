"""Reply slots: how replies stay in command order while some are answered later.

Every command a client sends gets one ``ReplySlot`` in its connection's reply queue
(server/frontend/replies.py). Local commands fill it at once; commands relayed to the backing store are
filled when the store's reply frames arrive (server/store/node_connections.py); AI commands are filled when their run
finishes. Replies are written from the head of the queue only, so pipelined replies go out in order
whatever finishes first. Sans-IO: a slot only holds encoded bytes.
"""

from __future__ import annotations

from collections.abc import Callable

from backends import errors as msgs


class ReplySlot:
    """The reply of one command: ``frames_left`` more frames are awaited; ``chunks`` holds the encoded bytes.

    One per command, so a plain class: mypyc compiles its ``__init__``, where a dataclass's generated one
    would run interpreted."""

    __slots__ = ("chunks", "frames_left", "parts", "suppressed", "transform")

    def __init__(self, frames_left: int = 1) -> None:
        self.frames_left = frames_left
        self.chunks: list[bytes] = []
        self.parts: list[bytes | memoryview] | None = None  # ``fill_parts``'s buffers, written as they are
        self.transform: Callable[[bytes], bytes] | None = None
        self.suppressed = False  # CLIENT REPLY OFF/SKIP: completed like any slot, but nothing is written

    def output(self) -> bytes:
        """The bytes to write, after the optional rewrite of a relayed reply (COMMAND merges ours in)."""
        if self.parts is not None and self.transform is None and self.suppressed:
            return b""  # (a big reply no one reads is not copied)
        data = b"".join(self.chunks if self.parts is None else self.parts)
        if self.transform is not None:
            try:
                data = self.transform(data)  # runs even when suppressed: it may also record what happened
            except Exception as exc:  # a reply we could not merge must not take the connection down
                data = b"-%s\r\n" % msgs.REPLY_MERGE_FAILED_FMT.format(kind=type(exc).__name__).encode()
        return b"" if self.suppressed else data

    def answers_for(self, slot: ReplySlot) -> bool:
        """Whether this slot's reply is ``slot``'s: itself here; a cluster node's slot that forwards to it too."""
        return self is slot

    def show(self) -> None:
        """Write this reply even under CLIENT REPLY OFF/SKIP (a pub/sub confirmation: Redis pushes those)."""
        self.suppressed = False

    @property
    def done(self) -> bool:
        return self.frames_left <= 0

    def add_frame(self, data: bytes) -> None:
        self.chunks.append(data)
        self.frames_left -= 1

    def fill(self, data: bytes) -> None:
        """Complete the slot with its whole reply at once."""
        self.chunks.append(data)
        self.frames_left = 0

    def fill_parts(self, parts: list[bytes | memoryview]) -> None:
        """Complete the slot with its whole reply as buffers to write one after another, never joined (a
        tensor's data: server/protocol/reply.py ``vectored``)."""
        self.parts = parts
        self.frames_left = 0

    def vectored_parts(self) -> list[bytes | memoryview] | None:
        """``fill_parts``'s buffers, when they are to be written as they are (not suppressed, no rewrite)."""
        return self.parts if self.transform is None and not self.suppressed else None

    def finish(self) -> None:
        """Complete the slot with whatever arrived (a command that sends fewer replies than expected)."""
        self.frames_left = 0
