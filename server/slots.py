"""Reply slots: how a connection keeps replies in command order while some are answered later.

Every command a client sends gets one ``ReplySlot`` in the connection's queue. Local commands fill it at
once; commands relayed to the backing store are filled when the store's reply frames arrive; AI commands
are filled when their run finishes. The connection writes filled slots from the head only, so pipelined
replies go out in order whatever finishes first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


@dataclass(slots=True, eq=False)
class ReplySlot:
    """The reply of one command: ``frames_left`` more frames are awaited; ``chunks`` holds the encoded bytes."""

    frames_left: int = 1
    chunks: list[bytes] = field(default_factory=list)
    transform: Callable[[bytes], bytes] | None = None
    suppressed: bool = False  # CLIENT REPLY OFF/SKIP: completed like any slot, but nothing is written

    def output(self) -> bytes:
        """The bytes to write, after the optional rewrite of a relayed reply (COMMAND merges ours in)."""
        data = b"".join(self.chunks)
        if self.transform is not None:
            try:
                data = self.transform(data)  # runs even when suppressed: it may also record what happened
            except Exception as exc:  # a reply we could not merge must not take the connection down
                data = b"-ERR internal error: cannot merge the store's reply (" + type(exc).__name__.encode() + b")\r\n"
        return b"" if self.suppressed else data

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

    def finish(self) -> None:
        """Complete the slot with whatever arrived (a command that sends fewer replies than expected)."""
        self.frames_left = 0


class SessionSink(Protocol):
    """What a store session reports to its client connection (implemented by the connection)."""

    def push(self, data: bytes) -> None:
        """An out-of-band frame (pub/sub message, RESP3 push, MONITOR line): write it now."""

    def flush(self) -> None:
        """Some slots were filled: write what is ready."""

    def store_lost(self) -> None:
        """The session's own store connection dropped: its state (db, MULTI, subscriptions, protocol) is gone,
        so the client connection is closed after its pending replies, as a Redis failover would."""


SUBSCRIBE_COMMANDS = frozenset({b"subscribe", b"psubscribe", b"ssubscribe"})
UNSUBSCRIBE_COMMANDS = frozenset({b"unsubscribe", b"punsubscribe", b"sunsubscribe"})
PUBSUB_COMMANDS = SUBSCRIBE_COMMANDS | UNSUBSCRIBE_COMMANDS
BLOCKING_COMMANDS = frozenset(
    {b"blpop", b"brpop", b"brpoplpush", b"blmove", b"blmpop", b"bzpopmin", b"bzpopmax", b"bzmpop", b"wait",
     b"waitaof"}
)


class _Closable(Protocol):
    def close(self) -> None: ...


LinkT = TypeVar("LinkT", bound=_Closable)


class LinksByDatabase(Generic[LinkT]):
    """A store's keyspace links, one per database, made on first use and closed together."""

    def __init__(self, make: Callable[[int], LinkT]) -> None:
        self._make = make
        self._links: dict[int, LinkT] = {}

    def get(self, db: int) -> LinkT:
        if db not in self._links:
            self._links[db] = self._make(db)
        return self._links[db]

    def close_all(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
