"""What a client's store session holds in pub/sub, and how many reply frames each pub/sub command gets (sans-IO).

A (P|S)(UN)SUBSCRIBE is answered by one confirmation per channel — RESP2 arrays, RESP3 pushes — and the
command waits for them, so a reply pipelined behind it never overtakes them (server/store/node_connections.py). How many
come is known when it is sent, except for a bare UNSUBSCRIBE (one per channel held then, one when none): that
is counted from the subscriptions the store has *confirmed* once it is the session's oldest command, when every
command before it has been answered. Counting it from what was sent went wrong whenever the two disagree: a
SUBSCRIBE refused with NOPERM, an UNSUBSCRIBE queued in MULTI, a shard channel the store left by itself when
its slot moved.

Two views are kept: ``sent`` (as the commands are sent: a command pipelined right behind a SUBSCRIBE is
judged as from a subscriber, CLIENT LIST's counts) and ``confirmed`` (as the store answered); ``sent`` is
made ``confirmed`` again whenever nothing is in flight.
"""

from __future__ import annotations

from typing import Final

import hiredis

from server.store.session import SUBSCRIBE_COMMANDS

UNSIZED: Final = 1 << 30  # a bare (P|S)UNSUBSCRIBE's frames, until it is the oldest command (``size_for``)


def _kinds() -> dict[bytes, set[bytes]]:
    """Channels, patterns and shard channels, by the prefix of their commands ("", "p", "s")."""
    return {b"": set(), b"p": set(), b"s": set()}


def kind_of(name: bytes) -> bytes:
    """The subscription kind a pub/sub command or confirmation is about: b"", b"p" or b"s"."""
    return name[: name.index(b"subscribe")].removesuffix(b"un")


class Pending:
    """One pub/sub command waiting for its confirmations: their name (the command's), the channels it added
    to ``sent`` (taken back if it is refused) and whether it is a bare unsubscribe, not yet counted."""

    __slots__ = ("added", "bare", "name")

    def __init__(self, name: bytes, added: set[bytes], bare: bool) -> None:
        self.name = name
        self.added = added
        self.bare = bare


class PubSubState:
    """A session's subscriptions, and its pub/sub commands in flight (keyed by their reply slot's id)."""

    def __init__(self) -> None:
        self.sent = _kinds()
        self.confirmed = _kinds()
        self.used = False  # any pub/sub command or confirmation seen: only then is there anything to follow
        self._pending: dict[int, Pending] = {}
        self._queued_in_multi = False  # the open transaction queued a pub/sub command
        self._exec_replies: set[int] = set()  # EXECs whose reply holds confirmations

    def subscribed(self) -> bool:
        return any(self.sent.values())

    def counts(self) -> tuple[int, int, int]:
        return len(self.sent[b""]), len(self.sent[b"p"]), len(self.sent[b"s"])

    def store_has_subscriptions(self) -> bool:
        """Whether the store counts the connection as a subscriber (RESP2: message arrays are then pushes)."""
        return any(self.confirmed.values())

    def sending(self, slot_id: int, argv: list[bytes], name: bytes) -> int:
        """A pub/sub command sent outside MULTI: noted, and the frames it expects (``UNSIZED``: a bare
        unsubscribe, counted by ``size_for``)."""
        self.used = True
        held = self.sent[kind_of(name)]
        channels = argv[1:]
        if name in SUBSCRIBE_COMMANDS:
            added = set(channels) - held
            held.update(added)
            self._pending[slot_id] = Pending(name, added, False)
            return len(channels) or 1  # none: an arity error
        if channels:
            held.difference_update(channels)
        else:
            held.clear()
        self._pending[slot_id] = Pending(name, set(), not channels)
        return len(channels) or UNSIZED

    def queued(self) -> None:
        """A pub/sub command queued inside MULTI: EXEC's reply will hold its confirmations."""
        self.used = self._queued_in_multi = True

    def transaction_ended(self, exec_slot_id: int | None) -> None:
        """EXEC (its slot) or DISCARD sent."""
        if self._queued_in_multi and exec_slot_id is not None:
            self._exec_replies.add(exec_slot_id)
        self._queued_in_multi = False

    def waits(self, slot_id: int) -> bool:
        return slot_id in self._pending

    def expects(self, slot_id: int, confirmation: bytes) -> bool:
        """Whether the command of ``slot_id`` is one this confirmation (its name) answers."""
        pending = self._pending.get(slot_id)
        return pending is not None and pending.name == confirmation

    def size_for(self, slot_id: int) -> int:
        """The frames of the oldest command, when it is a bare unsubscribe not yet counted (0 otherwise): one
        per subscription of its kind the store has confirmed, one when there is none."""
        pending = self._pending.get(slot_id)
        if pending is None or not pending.bare:
            return 0
        pending.bare = False
        return max(1, len(self.confirmed[kind_of(pending.name)]))

    def confirm(self, name: bytes, channel: bytes | None) -> None:
        """A confirmation arrived (a command's, or the store's own: a shard channel left when its slot moved)."""
        self.used = True
        if channel is None:
            return
        held = self.confirmed[kind_of(name)]
        if name.startswith((b"unsub", b"punsub", b"sunsub")):
            held.discard(channel)
        else:
            held.add(channel)

    def left_by_store(self, name: bytes, channel: bytes | None) -> bool:
        """Whether a confirmation no command waits for is the store's own: a shard channel it left when the
        channel's slot moved (in RESP2 a frame shaped so may also be a script's reply)."""
        return name == b"sunsubscribe" and channel in self.confirmed[b"s"]

    def refused(self, slot_id: int) -> None:
        """The command got an error instead (NOPERM for one of its channels, a redirect): it holds none."""
        pending = self._pending.get(slot_id)
        if pending is not None:
            self.sent[kind_of(pending.name)].difference_update(pending.added)

    def answered(self, slot_id: int, frame: bytes, in_flight: bool) -> None:
        """The command of ``slot_id`` has its whole reply (``frame``: the last one); ``in_flight``: whether
        other commands still wait for theirs."""
        self._pending.pop(slot_id, None)
        if slot_id in self._exec_replies:
            self._exec_replies.discard(slot_id)
            value = _parsed(frame)
            for item in value if isinstance(value, list) else ():
                found = confirmation_in(item)
                if found is not None:
                    self.confirm(*found)
        if not in_flight and self.sent != self.confirmed:  # (equal but for a refusal or a transaction)
            self.sent = {kind: set(held) for kind, held in self.confirmed.items()}

    def reset(self) -> None:
        self.sent, self.confirmed = _kinds(), _kinds()

    def forget_pending(self) -> None:
        """Every command in flight was answered with an error (the store is gone)."""
        self._pending.clear()
        self._exec_replies.clear()


def shard_channels_left(parts: list[list[bytes]]) -> bytes:
    """The reply of a bare SUNSUBSCRIBE sent to every node holding shard channels of a session (``parts``: each
    node's frames), as one Redis 7 holding them all answers: one confirmation per channel left, its count the
    shard channels still held after it (down to 0), in the nodes' order; one with a nil channel and 0 when no
    node held any (the nodes' own, which is that); a node's error instead, should one answer one."""
    frames = [frame for part in parts for frame in part]
    error = next((frame for frame in frames if frame[:1] == b"-"), None)
    if error is not None:
        return error
    left = [(frame[:1], found[0], found[1]) for frame in frames
            if (found := confirmation_of(frame)) is not None and found[1] is not None]
    if not left:
        return frames[0] if frames else b""
    return b"".join(b"%s3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n:%d\r\n" % (kind, len(name), name, len(channel), channel,
                                                                         len(left) - index)
                    for index, (kind, name, channel) in enumerate(left, start=1))


def confirmation_of(frame: bytes) -> tuple[bytes, bytes | None] | None:
    """(name, channel) when ``frame`` is shaped as a pub/sub confirmation (``subscribe``, ``ch``, count)."""
    if b"subscribe\r\n" not in frame[:24]:
        return None
    return confirmation_in(_parsed(frame))


def confirmation_in(value: object) -> tuple[bytes, bytes | None] | None:
    if not isinstance(value, list) or len(value) != 3 or not isinstance(value[2], int):
        return None
    name, channel = value[0], value[1]
    if not isinstance(name, bytes) or not name.endswith(b"subscribe"):
        return None
    return name, channel if isinstance(channel, bytes) else None


def _parsed(frame: bytes) -> object:
    reader = hiredis.Reader()
    reader.feed(frame)
    return reader.gets()
