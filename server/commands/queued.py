"""An AI command inside MULTI: what the store's transaction queues for it, and how its answer is made at EXEC.

The store runs the transaction; it cannot queue our commands, so each one queues a store-side script of
server/store/atomic.py instead (READS for the gets and AI.INFO, the check-and-write scripts for the stores,
deletes and AI.TENSORSET) and ``finish`` turns that script's reply, at EXEC, into the command's own reply,
as RedisAI answers it. The forms themselves are in server/commands/in_multi.py; server/frontend/multi.py
queues them and rewrites EXEC's reply.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from backends.errors import AIError
from server.store.atomic import ScriptCall, read_call

Finish = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Queued:
    """``call``: the script the transaction runs at EXEC (None: nothing for the store to do, e.g. an argument
    error known at once, or AI.CONFIG); ``finish``: its reply (None without a script) → our reply value, run
    only when the transaction ran. An ``AIError`` raised by ``finish`` is the command's error reply."""

    call: ScriptCall | None
    finish: Finish


def answered(value: Any) -> Queued:
    """A command whose answer is known now (an error, usually): the transaction only holds its place."""
    def finish(_reply: Any) -> Any:
        if isinstance(value, AIError):
            raise value
        return value

    return Queued(None, finish)


def at_exec(finish: Callable[[], Any]) -> Queued:
    """A command that needs no key but must act only if, and when, the transaction runs (AI.CONFIG)."""
    return Queued(None, lambda _reply: finish())


def reads(keys: Sequence[bytes], commands: Sequence[Sequence[bytes]], finish: Callable[[list[Any]], Any]) -> Queued:
    """Read ``commands`` at EXEC (one READS script over ``keys``); ``finish`` gets their replies as
    ``Keyspace.pipeline`` gives them (error replies as ``AIError`` values)."""
    return Queued(read_call(keys, commands), finish)
