"""Relay: where one client's commands for the store go — its own store session, or the shared relay.

A command we do not implement is relayed verbatim. A client that has not needed a session yet sends the
stateless data commands (``STATELESS_COMMANDS``, server/store/session.py) over its database's shared relay,
so many clients share its syscalls; anything else opens the client's own session (SELECT, MULTI, WATCH,
subscriptions, blocking commands, RESP3 …) and from then on every relayed command of that client uses it.
The connection's pump keeps the switch ordered: a command that may use the session waits until the
client's shared-relay replies are in, since the two are different store connections.
"""

from __future__ import annotations

import time
from typing import Any, Final

from backends import errors as msgs
from backends.errors import AIError
from server.commands.client_state import ClientState
from server.commands.context import ServerContext
from server.commands.spec import RELAY, CommandSpec, RelayThen
from server.frontend.multi import QUEUE_TIME_ERROR, Transaction
from server.protocol.slot import ReplySlot
from server.store.embedded import refused_on_embedded
from server.store.session import STATELESS_COMMANDS, SUBSCRIBE_COMMANDS, SessionSink, StoreSession


class _Shared:
    """A relayed command that goes over its database's shared relay, not the client's session."""

    def __repr__(self) -> str:
        return "SHARED"


SHARED: Final = _Shared()
# WAIT counts the writes of the connection it runs on. A client's writes may have gone over the shared relay
# or the AI commands' link, so its own session first sends a write that changes nothing but is replicated (a
# PUBLISH to a channel of ours: a standalone store propagates PUBLISH to its replicas), which makes the
# session's offset the store's current one: the WAIT after it covers every write acknowledged before it.
# (A cluster sends PUBLISH over its bus, not to replicas: there WAIT keeps its own meaning; docs/deployment.md.)
_WAIT_MARK: Final = [b"PUBLISH", b"__redisai__:wait", b""]


class Relay:
    """One client's way to the store for the commands it relays."""

    __slots__ = ("_ctx", "_sink", "_state", "_transaction", "session")

    def __init__(self, ctx: ServerContext, state: ClientState, sink: SessionSink, transaction: Transaction) -> None:
        self._ctx = ctx
        self._state = state
        self._sink = sink
        self._transaction = transaction
        self.session: StoreSession | None = None  # opened on first need, kept for the client's life

    def route(self, argv: list[bytes]) -> Any:
        """What to do with a command we do not implement: SHARED, RELAY, or EXEC's rewrite (after the
        embedded store's deny-list and the MULTI bookkeeping)."""
        name = argv[0].lower()
        if self._ctx.store.kind == "embedded" and refused_on_embedded(argv):
            if self._state.in_multi:
                self.poison_transaction()
            raise AIError(msgs.EMBEDDED_STORE_PRIVATE_FMT.format(cmd=b" ".join(argv[:2]).decode(errors="replace")))
        if name == b"cluster" and self._ctx.store.kind == "cluster":  # one endpoint: clients must not route around it
            raise AIError(msgs.CLUSTER_DISABLED_MSG)
        if name == b"exec" and self._state.in_multi:
            return self._transaction.exec()
        if self.is_shared(None, argv):
            return SHARED
        self._transaction.relayed(name)
        if name in SUBSCRIBE_COMMANDS:
            self._state.used_pubsub = True
        return RELAY

    def is_shared(self, spec: CommandSpec | None, argv: list[bytes]) -> bool:
        """A stateless data command of a client without a session of its own, in RESP2 (the shared relay's)."""
        state = self._state
        return (spec is None and self.session is None and state.proto == 2 and not state.in_multi
                and not state.used_pubsub and argv[0].lower() in STATELESS_COMMANDS
                and self._not_paused())

    def _not_paused(self) -> bool:
        """No CLIENT PAUSE … WRITE in force (the clock is read only while one was sent)."""
        until = self._ctx.shared_relay_paused_until
        return not until or time.monotonic() >= until

    def send(self, argv: list[bytes], slot: ReplySlot, outcome: Any) -> bool:
        """Relay ``argv`` as a handler's ``outcome`` says (False: the outcome is a reply, not a relay)."""
        if outcome is SHARED:
            self._ctx.store.cache.invalidate_for(self._state.db, argv)  # before the store can see it
            self._ctx.store.shared_relay(self._state.db).send(argv, slot, self._sink)
        elif outcome is RELAY:
            self._to_session(argv, slot)
        elif isinstance(outcome, RelayThen):
            slot.transform = outcome.transform
            self._to_session(outcome.argv or argv, slot)
        else:
            return False
        return True

    def _to_session(self, argv: list[bytes], slot: ReplySlot) -> None:
        self._ctx.store.cache.invalidate_for(self._state.db, argv)  # before the store can see it
        if self.session is None:
            self.session = self._ctx.store.open_session(self._sink)
            if self._state.proto != 2:
                self.session.set_protocol(self._state.proto)
        if len(argv[0]) == 4 and argv[0].lower() == b"wait" and not self._state.in_multi \
                and self._ctx.store.kind != "cluster":
            self.session.send(_WAIT_MARK, ReplySlot())  # its reply dropped (see _WAIT_MARK)
        self.session.send(argv, slot)

    def poison_transaction(self) -> None:
        """Make the store's open transaction fail at EXEC, as Redis does after a queue-time error."""
        if self.session is not None:
            self.session.send(QUEUE_TIME_ERROR, ReplySlot())

    def set_protocol(self, proto: int) -> None:
        if self.session is not None:
            self.session.set_protocol(proto)

    def drop_session(self) -> None:
        """RESET (the next relayed command opens a fresh session) or connection end."""
        if self.session is not None:
            self.session.close()
            self.session = None

    def session_lost(self) -> None:
        """The session's store connection dropped (the client is being closed): let go of the rest of it too
        (a cluster session's connections to the other nodes)."""
        if self.session is not None:
            self.session.close()
        self.session = None
