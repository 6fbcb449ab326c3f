"""One client connection: bytes in → commands → replies out, in order.

Ordering and pipelining. Every parsed command gets a slot in the connection's ``ReplyQueue``
(server/frontend/replies.py); replies are written from its head only, so pipelined replies always leave in
command order. Commands
relayed to the backing store are sent at once, back to back, over the client's own store session (one
round trip for a whole pipeline). A command marked ``after_relays`` (its handler reads the store through the
keyspace or runs work on a device queue) starts only when no relayed reply is outstanding, and nothing
after it starts until it is done: its effects and replies are ordered with the relayed ones around it.

Backpressure. More than ``HIGH_WATER`` parsed commands waiting, or the transport's write buffer full →
stop reading from the socket until the backlog drains.

Errors. An ``AIError`` becomes ``-<text>``; any other exception is logged and answered as an internal
error (``failure_reply``); neither closes the connection. A ``ProtocolError`` is answered after every
earlier reply and then the connection is closed, as Redis does.

Where relayed commands go (the client's session or the shared relay) is ``Relay`` (server/frontend/relay.py);
MULTI bookkeeping is ``Transaction`` (server/frontend/multi.py); reply order is ``ReplyQueue``
(server/frontend/replies.py). Handlers see this class only through the ``Client`` protocol
(server/commands/context.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from types import CoroutineType
from typing import Any, Final, cast

from backends import errors as msgs
from backends.errors import AIError, ProtocolError, subscribed_context
from server.commands.client_state import NO_SUBSCRIPTIONS, ClientState, format_peer
from server.commands.context import ServerContext
from server.commands.spec import SUBSCRIBED_CONTEXT_COMMANDS, CommandSpec
from server.frontend.bulk_reader import BulkReader
from server.frontend.eager import Cancellable, drive
from server.frontend.multi import Transaction
from server.frontend.relay import Relay
from server.frontend.replies import ReplyQueue, failure_reply
from server.ops.logs import VERBOSE
from server.ops.stats import CommandStat
from server.protocol.reply import MEMORYVIEW, Raw, RawParts, Status, encode, vectored
from server.protocol.request import RequestParser
from server.protocol.slot import ReplySlot
from server.store.keyspace import Keyspace
from server.store.session import SessionSink
from server.store.upstream import writes_buffers

log: Final = logging.getLogger("redisai.connection")

# time's functions as module constants: compiled, a call of ``time.x()`` looks ``x`` up on the module each time
_monotonic: Final = time.monotonic
_perf_counter_ns: Final = time.perf_counter_ns

HIGH_WATER: Final = 1024
LOW_WATER: Final = 128
PUBSUB_OUTPUT_LIMIT = 32 * 1024 * 1024
PUSH_OUTPUT_LIMIT = 1024 * 1024 * 1024  # a client not subscribed that gets pushes: bounded, unlike Redis's
# What synchronous handlers return; anything else may be a coroutine of a compiled (mypyc) handler, whose type
# is not CoroutineType.
PLAIN_OUTCOMES: Final[frozenset[type]] = frozenset({bytes, str, int, float, list, tuple, dict, type(None), Status, Raw,
                                                   RawParts, memoryview})




class ClientConnection(asyncio.Protocol, SessionSink):
    """The asyncio protocol of one client (RESP2/RESP3, TCP, TLS or unix socket); a ``Client`` to handlers."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.parser = RequestParser(ctx.limits)
        self.replies = ReplyQueue()
        self.backlog: deque[list[bytes] | ProtocolError] = deque()
        self.transport: asyncio.Transport | None = None
        self.state = ClientState(0, "", "", -1, True)
        self.transaction = Transaction(self.state)
        self.relay = Relay(ctx, self.state, self, self.transaction)
        self._task: Cancellable | None = None  # the handler still running (it waits on the store or a worker)
        self._close_after_reply = False
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False
        self._executing = False
        self._protocol_broken = False
        self._in_place = False  # a big bulk is read straight into its place (not over TLS: decrypting copies)
        self._writes_buffers = False  # a big reply part is written as it is (``writes_buffers``: uvloop's)
        self._bulk_reader: BulkReader | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._in_place = transport.get_extra_info("sslcontext") is None
        self._writes_buffers = writes_buffers(transport)
        sock = transport.get_extra_info("socket")
        self.state = ClientState(
            id=self.ctx.next_client_id(),
            addr=format_peer(transport.get_extra_info("peername")),
            laddr=format_peer(transport.get_extra_info("sockname")),
            fd=sock.fileno() if sock is not None else -1,
            authenticated=not self.ctx.config.requirepass,
            db=self.ctx.store.default_db,
        )
        self.transaction = Transaction(self.state)
        self.relay = Relay(self.ctx, self.state, self, self.transaction)
        self.ctx.stats.connections_received += 1
        if self.ctx.shutting_down:
            self.ctx.stats.rejected_connections += 1
            self.transport.write(encode(AIError(msgs.SHUTTING_DOWN_MSG)))
            self.transport.close()
            return
        self.ctx.clients[self.state.id] = self
        if log.isEnabledFor(VERBOSE):
            log.log(VERBOSE, "client connected", extra={"fields": {"id": self.state.id, "addr": self.state.addr,
                                                                   "laddr": self.state.laddr}})

    def data_received(self, data: bytes) -> None:
        if self._closed or self._close_after_reply or self._protocol_broken:
            return
        try:
            self.parser.feed(data)
            self.parser.authenticated = self.state.authenticated
            while (argv := self.parser.next_command()) is not None:
                self.backlog.append(argv)
                if not self.state.authenticated:  # an AUTH in this very read lifts the small-request limits
                    self._pump()
                    self.parser.authenticated = self.state.authenticated
        except ProtocolError as exc:
            self.protocol_broken(exc)
            return
        self._after_read()
        if self._in_place and self.parser.big_arriving() and not self._closed:
            self._receive_in_place()

    def protocol_broken(self, exc: ProtocolError) -> None:
        """Bad bytes from the client: nothing after them is read; the error is answered, then the connection
        closed."""
        self._protocol_broken = True
        self.backlog.append(exc)
        self._pause_reading()
        self._after_read()

    def _after_read(self) -> None:
        self.state.last_active = _monotonic()
        self._pump()
        self._write_ready()
        if len(self.backlog) > HIGH_WATER:
            self._pause_reading()

    def _receive_in_place(self) -> None:
        """The rest of the big bulk that has started is read straight into its place (server/frontend/
        bulk_reader.py): the transport's protocol is the reader while big bulks keep coming (it hands it back
        with ``end_in_place``)."""
        if self._bulk_reader is None:
            self._bulk_reader = BulkReader(self)
        self._switch_protocol(self._bulk_reader)

    def end_in_place(self) -> None:
        self._switch_protocol(self)

    def _switch_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """uvloop picks its read callbacks (plain or buffered) when reading starts: reading stops around the
        switch, where it was on."""
        transport = self.transport
        if transport is None or transport.is_closing() or transport.get_protocol() is protocol:
            return
        reading = transport.is_reading()
        if reading:
            transport.pause_reading()
        transport.set_protocol(protocol)
        if reading:
            transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self.ctx.clients.pop(self.state.id, None) is not None and log.isEnabledFor(VERBOSE):
            log.log(VERBOSE, "client disconnected", extra={"fields": {"id": self.state.id, "addr": self.state.addr,
                                                                      "reason": str(exc) if exc else "closed"}})
        self.backlog.clear()
        self.parser.drop_big()
        self.relay.drop_session()
        if self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._pump()
        self._write_ready()

    # --- SessionSink --------------------------------------------------------------------------------------------

    def push(self, data: bytes) -> None:
        """Replies already answered go out first, so a push never overtakes a reply the store sent before it.

        A subscriber that does not read is closed once PUBSUB_OUTPUT_LIMIT bytes wait for it (Redis's
        client-output-buffer-limit for pub/sub clients), instead of growing our memory for ever. Any other
        client getting pushes (CLIENT TRACKING's invalidations, MONITOR) is a normal client to Redis, which
        sets it no limit: it gets PUSH_OUTPUT_LIMIT, far above any one reply (the limit counts the replies
        waiting too: a 40 MB GET unread plus an invalidation closed it under the pub/sub limit)."""
        if self._closed or self.transport is None:
            return
        self._write_ready()
        session = self.relay.session
        limit = PUBSUB_OUTPUT_LIMIT if session is not None and session.subscribed() else PUSH_OUTPUT_LIMIT
        if self.transport.get_write_buffer_size() + len(data) > limit:
            log.warning("closing client %d: %d bytes of pushes unread", self.state.id,
                        self.transport.get_write_buffer_size())
            self.transport.abort()
            return
        self.transport.write(data)

    def flush(self) -> None:
        self._write_ready()
        if self.backlog:
            self._pump()
            self._write_ready()

    def store_lost(self) -> None:
        self.relay.session_lost()
        self._close_after_reply = True
        self._write_ready()

    def reset(self) -> None:
        """RESET: drop the store session; the next relayed command opens a fresh one (RESP2, default db, no
        MULTI, WATCH or subscriptions), which is what RESET leaves on the Redis side too."""
        self.relay.drop_session()
        self.transaction.discard()

    # --- what handlers may use ----------------------------------------------------------------------------------

    def keyspace(self) -> Keyspace:
        """The store's keys in the database this client selected."""
        return self.ctx.keyspace(self.state.db)

    def set_protocol(self, proto: int) -> None:
        self.state.proto = proto
        self.relay.set_protocol(proto)

    def close_after_reply(self) -> None:
        self._close_after_reply = True

    def show_current_reply(self, visible: bool) -> None:
        """CLIENT REPLY OFF/SKIP send no reply themselves; CLIENT REPLY ON does, even when replies were off."""
        self.replies.show_last(visible)

    def relays_everything(self) -> bool:
        """Inside MULTI or once subscribed, the store must see even PING so it can queue or shape the reply."""
        return self.state.in_multi or self.state.used_pubsub

    def kill(self) -> None:
        """CLIENT KILL: close now; a client that kills itself still gets its reply first."""
        if self._executing:
            self._close_after_reply = True
        elif self.transport is not None:
            self.transport.close()

    def describe(self) -> str:
        """One CLIENT LIST line."""
        session = self.relay.session
        held = session.subscription_counts() if self.state.used_pubsub and session is not None else NO_SUBSCRIPTIONS
        return self.state.describe(self.parser.buffered(), held)

    def subscribed(self) -> bool:
        """Whether the client holds a channel, pattern or shard channel subscription now (Redis's pub/sub
        client: CLIENT LIST's flag P and TYPE pubsub, INFO's pubsub_clients); not once it left them all."""
        session = self.relay.session
        return self.state.used_pubsub and session is not None and session.subscribed()

    # --- the command pump ---------------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Start every command that may start now, in order."""
        while (self.backlog and self._task is None and not self._close_after_reply and not self._writing_paused
               and self.transport is not None and not self.transport.is_closing()):
            item = self.backlog[0]
            if isinstance(item, ProtocolError):
                self.backlog.clear()
                self.ctx.stats.protocol_errors += 1
                self.replies.open(self.state).fill(encode(item, self.state.proto))
                self._close_after_reply = True
                break
            spec = self.ctx.spec_of(item[0]) if item else None
            if self.relay.session is None and self.replies.outstanding() and not self.relay.is_shared(spec, item):
                break  # the shared relay's replies first: what follows may use a session, another connection
            if spec is not None and spec.after_relays:
                if self.replies.outstanding():
                    break
                self._write_ready()  # answered replies go out first: their rewrites (EXEC's SELECT) apply now
            self.backlog.popleft()
            self._execute(item, spec)
        if (self._reading_paused and len(self.backlog) < LOW_WATER and not self._close_after_reply
                and not self._protocol_broken):
            self._reading_paused = False
            if self.transport is not None:
                self.transport.resume_reading()

    def _execute(self, argv: list[bytes], spec: CommandSpec | None) -> None:
        slot = self.replies.open(self.state)
        self.ctx.stats.commands_processed += 1
        self.state.last_command = argv[0]
        self._executing = True
        started = _perf_counter_ns() if spec is not None else 0
        try:
            outcome = self._dispatch(argv, spec)
            # an async handler: CoroutineType first (the cheap check), then a compiled (mypyc) coroutine
            kind = type(outcome)
            if kind is CoroutineType or (kind not in PLAIN_OUTCOMES and self.ctx.is_coroutine(outcome)):
                finished, outcome = drive(outcome, lambda reply, failure: self._finish(
                    reply, failure, argv, slot, spec, started))  # runs synchronously until it really waits
                if not finished:
                    self._task = outcome
                    return
        except (Exception, asyncio.CancelledError) as exc:  # a bug must cost one error reply, never the connection
            slot.fill(failure_reply(exc, argv, self.state.proto))
            self._account(spec, started, True)
            return
        finally:
            self._executing = False
        self._account(spec, started, False)
        self._deliver(argv, slot, outcome)

    def _deliver(self, argv: list[bytes], slot: ReplySlot, outcome: Any) -> None:
        """A handler's result: relay the command (maybe rewriting the store's reply), or fill the slot."""
        try:
            if not self.relay.send(argv, slot, outcome):
                kind = type(outcome)  # (only these may be written unjoined: no call for any other reply)
                parts = vectored(outcome) if kind is bytes or kind is MEMORYVIEW or kind is RawParts else None
                if parts is None:
                    slot.fill(encode(outcome, self.state.proto))
                else:
                    slot.fill_parts(parts)
        except Exception as exc:  # a reply we cannot encode or relay is a bug: one error reply
            slot.fill(failure_reply(exc, argv, self.state.proto, "could not be answered"))

    def _account(self, spec: CommandSpec | None, started: int, failed: bool) -> None:
        """INFO commandstats for our own commands: one dict lookup and three additions per command."""
        if spec is None:
            return
        stat = self.ctx.stats.commands.get(spec.name)
        if stat is None:
            stat = self.ctx.stats.commands[spec.name] = CommandStat()
        stat.calls += 1
        stat.usec += (_perf_counter_ns() - started) // 1000
        stat.failed += failed

    def _dispatch(self, argv: list[bytes], spec: CommandSpec | None) -> Any:
        if not self.state.authenticated and (spec is None or not spec.no_auth):
            raise AIError(msgs.NOAUTH_MSG)
        if spec is None:
            return self.relay.route(argv)
        if self.state.in_multi and spec.name not in ("QUIT", "RESET"):
            try:
                return self.transaction.queue(self, argv, spec)
            except AIError:
                self.relay.poison_transaction()
                raise
        if not spec.arity_ok(len(argv)):
            raise spec.arity_error(argv)
        if self.state.used_pubsub and self._subscribed_context(spec):  # (relayed ones: the store refuses them)
            raise subscribed_context(spec.full_name(argv))  # (after the arity check, as in Redis)
        return spec.handler(self, argv)

    def _subscribed_context(self, spec: CommandSpec) -> bool:
        """A RESP2 client holding a subscription may send only (P|S)(UN)SUBSCRIBE, PING, QUIT and RESET."""
        session = self.relay.session
        return (self.state.proto == 2 and spec.name not in SUBSCRIBED_CONTEXT_COMMANDS and session is not None
                and session.subscribed())

    def _finish(self, reply: Any, failure: BaseException | None, argv: list[bytes], slot: ReplySlot,
                spec: CommandSpec | None, started: int) -> None:
        """A handler that had to wait has ended: deliver its result, and let the pump go on."""
        self._task = None
        self._account(spec, started, failure is not None)
        if self._closed:  # our own client went away (that is what cancelled it): nothing to answer
            return
        if failure is not None:
            slot.fill(failure_reply(failure, argv, self.state.proto))  # a cancellation from elsewhere too
        else:
            self._deliver(argv, slot, reply)
        self.flush()

    def _write_ready(self) -> None:
        if self.transport is None or self._closed:
            return
        out = self.replies.ready()
        if isinstance(out, bytes):
            if out:
                self.transport.write(out)
        elif self._writes_buffers:
            self.transport.writelines(out)
        else:
            self.transport.write(b"".join(out))
        if self._close_after_reply and not self.replies and self._task is None:
            self.transport.close()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def close(self) -> None:
        """Close the connection now (shutdown, after the drain)."""
        if self.transport is not None:
            self.transport.close()

    def idle(self) -> bool:
        """Nothing in flight that will end by itself: no running handler, and no unanswered command but a
        blocking one with no timeout (BLPOP k 0 …) and what is pipelined behind it, started or still waiting for
        it in the backlog (INFO, CLIENT … start only once it is answered) — graceful shutdown waits
        for the others (a BLPOP k 1 is answered), and closes a client blocked for ever at once, as Redis
        does, rather than after the whole --shutdown-timeout. The client's oldest reply decides: on a cluster
        a BLPOP k 1 on one node before a BLPOP j 0 on another is answered first (the other node's command
        once closed the client at once)."""
        if self._task is not None:
            return False
        oldest = self.replies.oldest()
        if oldest is None:
            return not self.backlog
        session = self.relay.session
        return not oldest.done and session is not None and session.blocks_for_ever(oldest)
