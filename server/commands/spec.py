"""CommandSpec: one row of the command table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from server.protocol.reply import Status


class _Relay:
    """Returned by a handler that wants its command sent to the backing store as it is."""

    def __repr__(self) -> str:
        return "RELAY"


RELAY = _Relay()


@dataclass(frozen=True, slots=True)
class RelayThen:
    """Relay ``argv`` (or the command itself) to the store, then rewrite its raw reply with ``transform``."""

    transform: Callable[[bytes], bytes]
    argv: list[bytes] | None = None

# A handler takes the ``Client`` (server/commands/context.py) and argv. Typed ``Any`` here because the context
# module, which defines ``Client``, holds the table of specs: naming it would make an import cycle.
Handler = Callable[[Any, list[bytes]], Any]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """How one of our commands is dispatched and described.

    ``arity`` follows Redis: ``n`` means exactly n arguments (command name included), ``-n`` at least n.
    ``after_relays`` marks a command that must start only once every earlier relayed command of its client has
    been answered, and that holds the client's later commands until it is done: every handler that returns a
    coroutine (it reads the store through the keyspace, or runs work on a device queue), and RESET, which
    drops the store session the earlier relayed commands are still waiting on. Their effects and replies are
    then ordered with the relayed ones around them. tests/unit/test_command_table.py checks each row.
    """

    name: str
    handler: Handler
    arity: int
    flags: tuple[str, ...]
    first_key: int
    last_key: int
    step: int
    group: str
    summary: str
    usage: str
    after_relays: bool = False
    ai: bool = False  # an AI.* command: refused inside MULTI (the store cannot queue it)

    def arity_ok(self, argc: int) -> bool:
        return argc == self.arity if self.arity > 0 else argc >= -self.arity

    def keys_of(self, argv: list[bytes]) -> list[bytes]:
        """The key arguments of ``argv`` by the spec's first/last/step (COMMAND GETKEYS)."""
        if self.first_key <= 0:
            return []
        last = self.last_key if self.last_key >= 0 else len(argv) + self.last_key
        return [argv[i] for i in range(self.first_key, min(last, len(argv) - 1) + 1, max(self.step, 1))]

    def info_reply(self) -> list[Any]:
        """The COMMAND INFO entry (Redis 7 layout)."""
        return [self.name.lower(), self.arity, [Status(flag) for flag in self.flags], self.first_key, self.last_key,
                self.step, [Status("@" + self.group)], [], [], []]

    def docs_reply(self) -> dict[str, Any]:
        return {"summary": self.summary, "since": "1.0.0", "group": self.group,
                "complexity": "", "arguments": []}
