"""MULTI: a client's transaction bookkeeping, and AI commands queued in the store's transaction, answered at
EXEC as RedisAI answers them.

The store runs the transaction itself (MULTI, the queued commands and EXEC are relayed). ``Transaction``
tracks what the connection must know of it: that one is open, a SELECT queued inside it (applied to the
connection when EXEC's reply says it ran), and the answers owed for our own commands.

The store cannot queue our commands, so each one is replaced by something it can queue (its MULTI form,
server/commands/in_multi.py): a store-side script of server/store/atomic.py in its *tagged* form, which
answers ``[token, reply]``, or ``ECHO <token>`` for an answer that needs no key (an argument error, AI.CONFIG,
the execution commands' ``ERR Cannot run RedisAI command within a transaction or a LUA script``). The client
sees the store's own ``+QUEUED``. EXEC's reply is rewritten: each element that carries one of our tokens
becomes the command's own reply, made from what the script answered (an error the script answered stays as
it is). Every token is random and never reaches the client.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import hiredis

from backends import errors as msgs
from backends.errors import AIError
from server.commands.client_state import ClientState
from server.commands.context import DATABASES, Client
from server.commands.in_multi import FORMS
from server.commands.queued import Queued, answered
from server.commands.spec import RELAY, CommandSpec, RelayThen
from server.frontend.replies import failure_reply
from server.protocol.framer import join_aggregate, split_aggregate
from server.protocol.reply import encode
from server.protocol.request import parse_strict_int
from server.store.atomic import TAGGED

# Sent on a slot nobody waits for: a command the store cannot queue, so its open transaction fails at EXEC.
QUEUE_TIME_ERROR = [b"REDISAI.QUEUE-TIME-ERROR"]

EXECUTION_COMMANDS = frozenset({"AI.MODELEXECUTE", "AI.MODELRUN", "AI.SCRIPTEXECUTE", "AI.SCRIPTRUN",
                                "AI.DAGEXECUTE", "AI.DAGEXECUTE_RO", "AI.DAGRUN", "AI.DAGRUN_RO"})

Answer = Callable[[bytes], bytes]  # an EXEC element that carries our token → the command's encoded reply


def _unchanged(raw: bytes) -> bytes:
    return raw


def _decoded(element: bytes) -> Any:
    reader = hiredis.Reader(replyError=AIError)
    reader.feed(element)
    return reader.gets()


@dataclass
class MultiSubstitutions:
    """The answers a connection's open transaction owes at EXEC, by token."""

    prefix: bytes = field(default_factory=lambda: b"\x00redisai-multi-" + os.urandom(8).hex().encode() + b"-")
    answers: dict[bytes, Answer] = field(default_factory=dict)
    _numbers: itertools.count[int] = field(default_factory=itertools.count)

    def queue(self, client: Client, name: str, argv: list[bytes]) -> RelayThen | Coroutine[Any, Any, RelayThen]:
        """What to queue in the store's transaction for our command ``argv`` (a coroutine when its form must
        build something first: a model, a compiled script)."""
        proto = client.state.proto
        form = FORMS.get(name)
        if form is None:
            refusal = msgs.IN_TRANSACTION_MSG if name in EXECUTION_COMMANDS else msgs.NOT_QUEUEABLE_FMT.format(cmd=name)
            return self._substitute(answered(AIError(refusal)), argv, proto)
        try:
            queued = form(client, argv)
        except Exception as exc:  # its answer at EXEC, as RedisAI's would be (a bug: logged, still queued)
            return self._substitute(self._failed(exc, argv, proto), argv, proto)
        if isinstance(queued, Queued):
            return self._substitute(queued, argv, proto)
        return self._when_built(queued, argv, proto)

    async def _when_built(self, pending: Awaitable[Queued], argv: list[bytes], proto: int) -> RelayThen:
        try:
            queued = await pending
        except Exception as exc:
            queued = self._failed(exc, argv, proto)
        return self._substitute(queued, argv, proto)

    @staticmethod
    def _failed(exc: Exception, argv: list[bytes], proto: int) -> Queued:
        encoded = failure_reply(exc, argv, proto)
        return Queued(None, lambda _reply: _Encoded(encoded))

    def _substitute(self, queued: Queued, argv: list[bytes], proto: int) -> RelayThen:
        token = self.prefix + b"%d" % next(self._numbers)

        def answer(element: bytes) -> bytes:
            try:
                reply = None if queued.call is None else _decoded(element)[1]
                value = queued.finish(reply)
            except Exception as exc:  # an AIError is the command's error reply; anything else a logged bug
                return failure_reply(exc, argv, proto)
            return value.data if isinstance(value, _Encoded) else encode(value, proto)

        self.answers[token] = answer
        if queued.call is None:
            return RelayThen(_unchanged, [b"ECHO", token])
        script, keys, args = queued.call
        return RelayThen(_unchanged, [b"EVAL", TAGGED[script.name].source, b"%d" % len(keys), *keys, *args, token])

    def exec_relay(self, on_success: Callable[[], None] | None = None) -> RelayThen | None:
        """EXEC's rewrite, when the transaction queued answers or must tell the connection it committed (a
        SELECT inside it): ``on_success`` runs only when EXEC's reply says the transaction ran."""
        if not self.answers and on_success is None:
            return None
        owed, self.answers = self.answers, {}

        def rewrite(raw: bytes) -> bytes:
            if raw[:1] not in (b"*", b"~") or raw.startswith(b"*-"):  # aborted (null) or an error: keep it
                return raw
            if on_success is not None:
                on_success()
            if not owed:
                return raw
            kind, elements = split_aggregate(raw)
            return join_aggregate(kind, [self._answered(element, owed) for element in elements])

        return RelayThen(rewrite)

    def _answered(self, element: bytes, owed: dict[bytes, Answer]) -> bytes:
        answer = owed.pop(_token_of(element, self.prefix), None)
        return element if answer is None else answer(element)

    def discard(self) -> None:
        self.answers = {}


@dataclass(frozen=True, slots=True)
class _Encoded:
    """A reply already encoded (a failure's text), passed through ``finish`` as it is."""

    data: bytes


def _token_of(element: bytes, prefix: bytes) -> bytes:
    """The token an EXEC element carries: ECHO's bulk reply, or the first element of a tagged script's
    ``[token, reply]``; b"" for any other element."""
    start = 4 if element.startswith(b"*2\r\n$") else 0
    if element[start : start + 1] != b"$":
        return b""
    end = element.find(b"\r\n", start)
    length = parse_strict_int(element[start + 1 : end]) if end > 0 else None
    if length is None or length < len(prefix):
        return b""
    value = element[end + 2 : end + 2 + length]
    return value if value.startswith(prefix) else b""


class Transaction:
    """One client's MULTI state; the connection relays MULTI, the queued commands and EXEC to its session."""

    __slots__ = ("_state", "substitutions")

    def __init__(self, state: ClientState) -> None:
        self._state = state
        self.substitutions = MultiSubstitutions()

    def queue(self, client: Client, argv: list[bytes], spec: CommandSpec) -> Any:
        """Inside MULTI the store queues our generic commands too (so EXEC's reply has them); what changes
        connection state is applied when EXEC's reply says the transaction ran. An ``AIError`` raised here
        is a queue-time error: the caller poisons the transaction (Redis answers EXECABORT at EXEC); an AI
        command's errors are answered at EXEC instead, as RedisAI's."""
        if not spec.arity_ok(len(argv)):
            raise spec.arity_error(argv)
        if spec.ai:
            return self.substitutions.queue(client, spec.name, argv)
        if (spec.name in ("HELLO", "MODULE")
                or (spec.name == "CLIENT" and argv[1].upper() in (b"REPLY", b"UNBLOCK"))):
            words = argv[:1 if spec.name == "HELLO" else 2]
            raise AIError(msgs.NOT_QUEUEABLE_FMT.format(cmd=b" ".join(words).decode(errors="replace").upper()))
        if spec.name == "SELECT":
            index = parse_strict_int(argv[1])
            if index is not None and 0 <= index < DATABASES:
                self._state.pending_db = index
        return RELAY

    def exec(self) -> Any:
        """EXEC: the transaction ends; relay it, rewriting its reply when answers are owed or a SELECT ran."""
        self._state.in_multi = False
        return self.substitutions.exec_relay(self._commit_pending_db()) or RELAY

    def relayed(self, name: bytes) -> None:
        """A relayed MULTI opens a transaction, DISCARD ends one (``name`` is lower case)."""
        if name == b"multi":
            self._state.in_multi = True
        elif name == b"discard":
            self._state.in_multi = False
            self._state.pending_db = None
            self.substitutions.discard()

    def discard(self) -> None:
        """RESET: whatever was owed is forgotten with the store session."""
        self.substitutions.discard()

    def _commit_pending_db(self) -> Callable[[], None] | None:
        state = self._state
        pending, state.pending_db = state.pending_db, None
        if pending is None:
            return None

        def commit() -> None:
            state.db = pending  # the SELECT queued in the transaction ran

        return commit
