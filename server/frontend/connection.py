"""One client connection: bytes in → commands → replies out, in order.

Ordering and pipelining. Every parsed command gets a ``ReplySlot`` appended to ``self.slots``; replies are
written from the head of that queue only, so pipelined replies always leave in command order. Commands
relayed to the backing store are sent at once, back to back, over the client's own store session (one
round trip for a whole pipeline). A command marked ``after_relays`` (its handler reads the store through the
keyspace or runs work on a device queue) starts only when no relayed reply is outstanding, and nothing
after it starts until it is done: its effects and replies are ordered with the relayed ones around it.

Backpressure. More than ``HIGH_WATER`` parsed commands waiting, or the transport's write buffer full →
stop reading from the socket until the backlog drains.

Errors. An ``AIError`` becomes ``-<text>``; any other exception is logged and answered as an internal
error; neither closes the connection. A ``ProtocolError`` is answered after every earlier reply and then
the connection is closed, as Redis does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, cast

from backends import errors as msgs
from backends.errors import AIError, ProtocolError, wrong_arity
from server.commands.client_state import ClientState, format_peer
from server.commands.context import DATABASES, ServerContext
from server.commands.spec import RELAY, CommandSpec, RelayThen
from server.commands.table import NO_AUTH_COMMANDS
from server.frontend.eager import step_once
from server.frontend.multi import MultiSubstitutions
from server.ops.stats import CommandStat
from server.protocol.reply import encode
from server.protocol.request import RequestParser, parse_strict_int
from server.protocol.slot import ReplySlot
from server.store.embedded import refused_on_embedded
from server.store.keyspace import Keyspace
from server.store.session import SUBSCRIBE_COMMANDS, SessionSink, StoreSession

log = logging.getLogger("redisai.connection")

HIGH_WATER = 1024
LOW_WATER = 128
PUBSUB_OUTPUT_LIMIT = 32 * 1024 * 1024


class ClientConnection(asyncio.Protocol, SessionSink):
    """The asyncio protocol of one client (RESP2/RESP3, TCP, TLS or unix socket)."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.parser = RequestParser(ctx.limits)
        self.slots: deque[ReplySlot] = deque()
        self.backlog: deque[list[bytes] | ProtocolError] = deque()
        self.session: StoreSession | None = None
        self.transport: asyncio.Transport | None = None
        self.state = ClientState(0, "", "", -1, True)
        self._task: asyncio.Task[None] | None = None
        self._close_after_reply = False
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False
        self._executing = False
        self._protocol_broken = False
        self.multi = MultiSubstitutions()

    # --- asyncio.Protocol ---------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        self.state = ClientState(
            id=self.ctx.next_client_id(),
            addr=format_peer(transport.get_extra_info("peername")),
            laddr=format_peer(transport.get_extra_info("sockname")),
            fd=sock.fileno() if sock is not None else -1,
            authenticated=not self.ctx.config.requirepass,
            db=self.ctx.store.default_db,
        )
        self.ctx.stats.connections_received += 1
        if self.ctx.shutting_down:
            self.ctx.stats.rejected_connections += 1
            self.transport.write(encode(AIError(msgs.SHUTTING_DOWN_MSG)))
            self.transport.close()
            return
        self.ctx.clients[self.state.id] = self

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
            self._protocol_broken = True  # nothing after the bad bytes is read: answered, then closed
            self.backlog.append(exc)
            self._pause_reading()
        self.state.last_active = time.monotonic()
        self._pump()
        self._write_ready()
        if len(self.backlog) > HIGH_WATER:
            self._pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.ctx.clients.pop(self.state.id, None)
        self.backlog.clear()
        if self.session is not None:
            self.session.close()
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
        client-output-buffer-limit for pub/sub clients), instead of growing our memory for ever."""
        if self._closed or self.transport is None:
            return
        self._write_ready()
        if self.transport.get_write_buffer_size() + len(data) > PUBSUB_OUTPUT_LIMIT:
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
        self.session = None
        self._close_after_reply = True
        self._write_ready()

    def reset(self) -> None:
        """RESET: drop the store session; the next relayed command opens a fresh one (RESP2, default db, no
        MULTI, WATCH or subscriptions), which is what RESET leaves on the Redis side too."""
        if self.session is not None:
            self.session.close()
            self.session = None
        self.multi.discard()

    # --- what handlers may use ----------------------------------------------------------------------------------

    def keyspace(self) -> Keyspace:
        """The store's keys in the database this client selected."""
        return self.ctx.keyspace(self.state.db)

    def set_protocol(self, proto: int) -> None:
        self.state.proto = proto
        if self.session is not None:
            self.session.set_protocol(proto)

    def close_after_reply(self) -> None:
        self._close_after_reply = True

    def show_current_reply(self, visible: bool) -> None:
        """CLIENT REPLY OFF/SKIP send no reply themselves; CLIENT REPLY ON does, even when replies were off."""
        if self.slots:
            self.slots[-1].suppressed = not visible

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
        return self.state.describe(self.parser.buffered())

    # --- the command pump ---------------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Start every command that may start now, in order."""
        while (self.backlog and self._task is None and not self._close_after_reply and not self._writing_paused
               and self.transport is not None and not self.transport.is_closing()):
            item = self.backlog[0]
            if isinstance(item, ProtocolError):
                self.backlog.clear()
                self.ctx.stats.protocol_errors += 1
                self._new_slot().fill(encode(item, self.state.proto))
                self._close_after_reply = True
                break
            spec = self.ctx.commands.get(item[0].upper().decode(errors="replace")) if item else None
            if spec is not None and spec.after_relays:
                if self._relay_pending():
                    break
                self._write_ready()  # answered replies go out first: their rewrites (EXEC's SELECT) apply now
            self.backlog.popleft()
            self._execute(item, spec)
        if (self._reading_paused and len(self.backlog) < LOW_WATER and not self._close_after_reply
                and not self._protocol_broken):
            self._reading_paused = False
            if self.transport is not None:
                self.transport.resume_reading()

    def _relay_pending(self) -> bool:
        return any(not slot.done for slot in self.slots)

    def _new_slot(self) -> ReplySlot:
        slot = ReplySlot()
        mode = self.state.reply_mode
        if mode != "on":  # CLIENT REPLY OFF / SKIP: the command runs, its reply is dropped
            slot.suppressed = True
            if mode == "skip":
                self.state.reply_mode = "on"
        self.slots.append(slot)
        return slot

    def _execute(self, argv: list[bytes], spec: CommandSpec | None) -> None:
        slot = self._new_slot()
        self.ctx.stats.commands_processed += 1
        self.state.last_command = argv[0].decode(errors="replace").lower()
        self._executing = True
        started = time.perf_counter_ns() if spec is not None else 0
        try:
            outcome = self._dispatch(argv, spec)
            if asyncio.iscoroutine(outcome):
                finished, outcome = step_once(outcome)  # runs synchronously until it really waits
                if not finished:
                    self._task = asyncio.get_running_loop().create_task(
                        self._finish(outcome, argv, slot, spec, started))
                    return
        except AIError as exc:
            slot.fill(encode(exc, self.state.proto))
            self._account(spec, started, True)
            return
        except asyncio.CancelledError:  # e.g. awaiting a build another caller's cancellation ended
            slot.fill(encode(AIError(msgs.INTERNAL_MSG.format(detail="cancelled")), self.state.proto))
            self._account(spec, started, True)
            return
        except Exception as exc:  # a bug must cost one error reply, never the connection
            log.exception("command %r failed", argv[:1])
            slot.fill(encode(AIError(msgs.INTERNAL_MSG.format(detail=type(exc).__name__)), self.state.proto))
            self._account(spec, started, True)
            return
        finally:
            self._executing = False
        self._account(spec, started, False)
        try:
            self._deliver(argv, slot, outcome)
        except Exception as exc:  # a reply we cannot encode is a bug: one error reply, never the connection
            log.exception("reply of %r could not be encoded", argv[:1])
            slot.fill(encode(AIError(msgs.INTERNAL_MSG.format(detail=type(exc).__name__)), self.state.proto))

    def _deliver(self, argv: list[bytes], slot: ReplySlot, outcome: Any) -> None:
        """A handler's result: relay the command (maybe rewriting the store's reply), or fill the slot."""
        if outcome is RELAY:
            self._relay_safely(argv, slot)
        elif isinstance(outcome, RelayThen):
            slot.transform = outcome.transform
            self._relay_safely(outcome.argv or argv, slot)
        else:
            slot.fill(encode(outcome, self.state.proto))

    def _account(self, spec: CommandSpec | None, started: int, failed: bool) -> None:
        """INFO commandstats for our own commands: one dict lookup and three additions per command."""
        if spec is None:
            return
        stat = self.ctx.stats.commands.get(spec.name)
        if stat is None:
            stat = self.ctx.stats.commands[spec.name] = CommandStat()
        stat.calls += 1
        stat.usec += (time.perf_counter_ns() - started) // 1000
        stat.failed += failed

    def _dispatch(self, argv: list[bytes], spec: CommandSpec | None) -> Any:
        if not self.state.authenticated and (spec is None or spec.name not in NO_AUTH_COMMANDS):
            raise AIError(msgs.NOAUTH_MSG)
        if spec is None:
            name = argv[0].lower()
            if self.ctx.store.kind == "embedded" and refused_on_embedded(argv):
                if self.state.in_multi:
                    self._poison_transaction()
                raise AIError(msgs.EMBEDDED_STORE_PRIVATE_FMT.format(cmd=b" ".join(argv[:2]).decode(errors="replace")))
            if name == b"exec" and self.state.in_multi:
                self._end_multi()
                return self.multi.exec_relay(self._commit_pending_db()) or RELAY
            self._track_relayed(name)
            return RELAY
        if self.state.in_multi and spec.name not in ("QUIT", "RESET"):
            try:
                if not spec.arity_ok(len(argv)):
                    raise wrong_arity(argv[0].decode(errors="replace"))
                return self._queue_in_multi(argv, spec)
            except AIError:
                self._poison_transaction()  # a queue-time error: Redis answers EXECABORT at EXEC
                raise
        if not spec.arity_ok(len(argv)):
            raise wrong_arity(argv[0].decode(errors="replace"))
        return spec.handler(self, argv)

    def _queue_in_multi(self, argv: list[bytes], spec: CommandSpec) -> Any:
        """Inside MULTI the store queues our generic commands too (so EXEC's reply has them); what changes
        connection state is applied when EXEC's reply says the transaction ran."""
        if spec.ai:
            return self.multi.queue(spec.name, argv, self.state.proto)
        if spec.name == "HELLO" or (spec.name == "CLIENT" and argv[1].upper() in (b"REPLY", b"UNBLOCK")):
            raise AIError(msgs.NOT_QUEUEABLE_FMT.format(cmd=b" ".join(argv[:2 if spec.name == "CLIENT" else 1])
                                                        .decode(errors="replace").upper()))
        if spec.name == "SELECT":
            index = parse_strict_int(argv[1])
            if index is not None and 0 <= index < DATABASES:
                self.state.pending_db = index
        return RELAY

    def _poison_transaction(self) -> None:
        """Make the store's open transaction fail at EXEC, as Redis does after a queue-time error: a command
        it cannot queue is sent on a slot nobody waits for."""
        if self.session is not None:
            self.session.send([b"REDISAI.QUEUE-TIME-ERROR"], ReplySlot())

    def _commit_pending_db(self) -> Callable[[], None] | None:
        pending, self.state.pending_db = self.state.pending_db, None
        if pending is None:
            return None

        def commit() -> None:
            self.state.db = pending  # the SELECT queued in the transaction ran

        return commit

    def _end_multi(self) -> None:
        self.state.in_multi = False

    def _track_relayed(self, name: bytes) -> None:
        if name == b"multi":
            self.state.in_multi = True
        elif name == b"discard":
            self._end_multi()
            self.state.pending_db = None
            self.multi.discard()
        elif name in SUBSCRIBE_COMMANDS:
            self.state.used_pubsub = True

    def _relay_safely(self, argv: list[bytes], slot: ReplySlot) -> None:
        try:
            self._relay(argv, slot)
        except Exception as exc:
            log.exception("relaying %r failed", argv[:1])
            slot.fill(encode(AIError(msgs.INTERNAL_MSG.format(detail=type(exc).__name__)), self.state.proto))

    def _relay(self, argv: list[bytes], slot: ReplySlot) -> None:
        self.ctx.store.cache.invalidate_for(self.state.db, argv)  # before the store can see it
        if self.session is None:
            self.session = self.ctx.store.open_session(self)
            if self.state.proto != 2:
                self.session.set_protocol(self.state.proto)
        self.session.send(argv, slot)

    async def _finish(self, outcome: Awaitable[Any], argv: list[bytes], slot: ReplySlot,
                      spec: CommandSpec | None = None, started: int = 0) -> None:
        """Await a handler that had to wait, deliver its result, and let the pump go on."""
        error: AIError | None = None
        reply: Any = None
        try:
            reply = await outcome
        except AIError as exc:
            error = exc
        except asyncio.CancelledError:
            if self._closed:  # our own client went away: nothing to answer
                self._task = None
                raise
            error = AIError(msgs.INTERNAL_MSG.format(detail="cancelled"))  # cancelled from elsewhere: answer it
        except Exception as exc:
            log.exception("command %r failed", argv[:1])
            error = AIError(msgs.INTERNAL_MSG.format(detail=type(exc).__name__))
        finally:
            self._task = None
        self._account(spec, started, error is not None)
        if self._closed:
            return
        if error is not None:
            slot.fill(encode(error, self.state.proto))
        else:
            try:
                self._deliver(argv, slot, reply)
            except Exception as exc:
                log.exception("reply of %r could not be encoded", argv[:1])
                slot.fill(encode(AIError(msgs.INTERNAL_MSG.format(detail=type(exc).__name__)), self.state.proto))
        self.flush()

    def _write_ready(self) -> None:
        if self.transport is None or self._closed:
            return
        out: list[bytes] = []
        while self.slots and self.slots[0].done:
            out.append(self.slots.popleft().output())
        if out:
            self.transport.write(b"".join(out))
        if self._close_after_reply and not self.slots and self._task is None:
            self.transport.close()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def idle(self) -> bool:
        """Nothing in flight: no unanswered command and no running handler (used by graceful shutdown)."""
        return not self.slots and self._task is None and not self.backlog
