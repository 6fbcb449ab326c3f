"""ReplyQueue: one client's replies, written in command order whatever finishes first.

Every command gets a ``ReplySlot`` (server/protocol/slot.py) at the tail. A local command fills it at once,
a relayed one when the store's frames arrive, an AI command when its run ends; ``ready`` takes the filled
slots from the head only, so pipelined replies always leave in order.

``failure_reply`` is the one place an exception becomes an error reply: an ``AIError`` is its own text, a
cancellation from elsewhere and any other exception (a bug) are answered as an internal error, so a failure
costs one error reply and never the connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Final

from backends import errors as msgs
from backends.errors import AIError
from server.commands.client_state import ClientState
from server.protocol.reply import encode
from server.protocol.slot import ReplySlot

log: Final = logging.getLogger("redisai.connection")


class ReplyQueue:
    """The reply slots of one connection, oldest first."""

    __slots__ = ("_slots",)

    def __init__(self) -> None:
        self._slots: deque[ReplySlot] = deque()

    def open(self, state: ClientState) -> ReplySlot:
        """A slot for the next command; CLIENT REPLY OFF/SKIP: the command runs, its reply is dropped."""
        slot = ReplySlot()
        mode = state.reply_mode
        if mode != "on":
            slot.suppressed = True
            if mode == "skip":
                state.reply_mode = "on"
        self._slots.append(slot)
        return slot

    def show_last(self, visible: bool) -> None:
        """CLIENT REPLY OFF/SKIP send no reply themselves; CLIENT REPLY ON does, even when replies were off."""
        if self._slots:
            self._slots[-1].suppressed = not visible

    def oldest(self) -> ReplySlot | None:
        """The slot at the head (answered and not yet written, or unanswered), if any."""
        return self._slots[0] if self._slots else None

    def outstanding(self) -> bool:
        """Some slot is still unanswered (a relayed reply, or a run, still on its way)."""
        return bool(self._slots) and any(not slot.done for slot in self._slots)

    def ready(self) -> bytes | list[bytes | memoryview]:
        """The bytes of every answered slot at the head, removed from the queue (b"" when none): one ``bytes``,
        or the buffers to write one after another when a slot holds a big part (``ReplySlot.fill_parts``)."""
        slots = self._slots
        if not slots or not slots[0].done:
            return b""
        out: list[bytes | memoryview] = []
        vectored = False
        while slots and slots[0].done:
            slot = slots.popleft()
            parts = slot.vectored_parts() if slot.parts is not None else None
            if parts is None:
                data = slot.output()
                if data:  # (no empty buffer in a list: asyncio's writelines may never finish one)
                    out.append(data)
            else:
                out.extend(parts)
                vectored = True
        return out if vectored else b"".join(out)

    def __len__(self) -> int:
        return len(self._slots)


def failure_reply(exc: BaseException, argv: list[bytes], proto: int, doing: str = "failed") -> bytes:
    """The error reply for ``exc`` raised while handling ``argv`` (logged when it is a bug)."""
    if isinstance(exc, AIError):
        return encode(exc, proto)
    if isinstance(exc, asyncio.CancelledError):  # e.g. awaiting a build another caller's cancellation ended
        return encode(AIError(msgs.INTERNAL_MSG.format(detail="cancelled")), proto)
    log.error("command %r %s", argv[:1], doing, exc_info=exc)
    return encode(AIError(msgs.INTERNAL_MSG.format(detail=type(exc).__name__)), proto)
