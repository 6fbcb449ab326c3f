"""MULTI: a client's transaction bookkeeping, and AI commands queued in the store's transaction, answered at
EXEC as RedisAI answers them.

The store runs the transaction itself (MULTI, the queued commands and EXEC are relayed). ``Transaction``
tracks what the connection must know of it: that one is open, a SELECT queued inside it (applied to the
connection when EXEC's reply says it ran), and the answers owed for our own commands.

The store cannot queue our commands, so each one is replaced by something it can queue:

* AI.TENSORSET → ``EVAL <set_tensors> 1 key <encoded tensor>``, the store-side check-and-write of
  server/store/atomic.py (RedisAI queues it too; its EXEC element is ``+OK``, or WRONGTYPE when, at EXEC, the
  key holds something else). Its argument errors are known at once and answered at EXEC, like RedisAI's.
* execution commands (MODELEXECUTE, SCRIPTEXECUTE, DAG*, and their deprecated forms) → RedisAI's
  ``ERR Cannot run RedisAI command within a transaction or a LUA script`` at EXEC;
* every other AI command → ``ERR <command> cannot be queued in MULTI by this server`` at EXEC.

An answer decided now is queued as ``ECHO <token>`` (the client sees the store's own ``+QUEUED``); the EXEC
reply is rewritten, replacing each token element with the answer.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from backends import errors as msgs
from backends.errors import AIError, wrong_arity
from backends.tensor import encode_tensor
from backends.tensor_args import build_tensor, parse_tensorset
from server.commands.client_state import ClientState
from server.commands.context import DATABASES
from server.commands.spec import RELAY, CommandSpec, RelayThen
from server.protocol.framer import join_aggregate, split_aggregate
from server.protocol.reply import encode
from server.protocol.request import parse_strict_int
from server.store.atomic import SET_TENSORS

# Sent on a slot nobody waits for: a command the store cannot queue, so its open transaction fails at EXEC.
QUEUE_TIME_ERROR = [b"REDISAI.QUEUE-TIME-ERROR"]

EXECUTION_COMMANDS = frozenset({"AI.MODELEXECUTE", "AI.MODELRUN", "AI.SCRIPTEXECUTE", "AI.SCRIPTRUN",
                                "AI.DAGEXECUTE", "AI.DAGEXECUTE_RO", "AI.DAGRUN", "AI.DAGRUN_RO"})


def _unchanged(raw: bytes) -> bytes:
    return raw


@dataclass
class MultiSubstitutions:
    """The answers a connection's open transaction owes at EXEC, by token."""

    prefix: bytes = field(default_factory=lambda: b"\x00redisai-multi-" + os.urandom(8).hex().encode() + b"-")
    answers: dict[bytes, bytes] = field(default_factory=dict)
    _numbers: itertools.count[int] = field(default_factory=itertools.count)

    def queue(self, name: str, argv: list[bytes], proto: int) -> RelayThen:
        """What to queue in the store's transaction for our command ``argv``."""
        if name == "AI.TENSORSET":
            try:
                if len(argv) < 4:
                    raise wrong_arity(argv[0].decode(errors="replace"))
                request = parse_tensorset(argv)
                tensor = encode_tensor(build_tensor(request))
                return RelayThen(_unchanged, [b"EVAL", SET_TENSORS.source, b"1", argv[1], b"0", b"", tensor])
            except AIError as exc:
                return self._answer_at_exec(encode(exc, proto))
        if name in EXECUTION_COMMANDS:
            return self._answer_at_exec(encode(AIError(msgs.IN_TRANSACTION_MSG), proto))
        return self._answer_at_exec(encode(AIError(msgs.NOT_QUEUEABLE_FMT.format(cmd=name)), proto))

    def _answer_at_exec(self, answer: bytes) -> RelayThen:
        token = self.prefix + b"%d" % next(self._numbers)
        self.answers[token] = answer
        return RelayThen(_unchanged, [b"ECHO", token])

    def exec_relay(self, on_success: Callable[[], None] | None = None) -> RelayThen | None:
        """EXEC's rewrite, when the transaction queued answers or must tell the connection it committed (a
        SELECT inside it): ``on_success`` runs only when EXEC's reply says the transaction ran."""
        if not self.answers and on_success is None:
            return None
        wanted = {b"$%d\r\n%s\r\n" % (len(token), token): answer for token, answer in self.answers.items()}
        self.answers = {}

        def rewrite(raw: bytes) -> bytes:
            if raw[:1] not in (b"*", b"~") or raw.startswith(b"*-"):  # aborted (null) or an error: keep it
                return raw
            if on_success is not None:
                on_success()
            if not wanted:
                return raw
            kind, elements = split_aggregate(raw)
            return join_aggregate(kind, [wanted.get(element, element) for element in elements])

        return RelayThen(rewrite)

    def discard(self) -> None:
        self.answers = {}


class Transaction:
    """One client's MULTI state; the connection relays MULTI, the queued commands and EXEC to its session."""

    __slots__ = ("_state", "substitutions")

    def __init__(self, state: ClientState) -> None:
        self._state = state
        self.substitutions = MultiSubstitutions()

    def queue(self, argv: list[bytes], spec: CommandSpec) -> Any:
        """Inside MULTI the store queues our generic commands too (so EXEC's reply has them); what changes
        connection state is applied when EXEC's reply says the transaction ran. An ``AIError`` raised here
        is a queue-time error: the caller poisons the transaction (Redis answers EXECABORT at EXEC)."""
        if not spec.arity_ok(len(argv)):
            raise wrong_arity(argv[0].decode(errors="replace"))
        if spec.ai:
            return self.substitutions.queue(spec.name, argv, self._state.proto)
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
