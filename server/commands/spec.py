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
    ai: bool = False  # an AI.* command: inside MULTI, queued by its MULTI form (server/commands/in_multi.py)

    @property
    def no_auth(self) -> bool:
        """Allowed before AUTH (Redis's ``no_auth`` flag): the flag the row carries is the one rule, so the
        auth gate and ``COMMAND INFO`` cannot disagree."""
        return "no_auth" in self.flags

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


NO_KEYS = (0, 0, 0)


def command(name: str, handler: Handler, *, arity: int, group: str, summary: str, usage: str,
            flags: tuple[str, ...] = (), keys: tuple[int, int, int] = NO_KEYS, after_relays: bool = False,
            ai: bool = False) -> CommandSpec:
    """One table row, by keyword: ten positional fields read as a row of numbers, so a row written with
    this names each of them (``keys`` is Redis's (first, last, step) of the key arguments; ``NO_KEYS``: none).
    """
    first_key, last_key, step = keys
    return CommandSpec(name, handler, arity, flags, first_key, last_key, step, group, summary, usage,
                       after_relays=after_relays, ai=ai)


def ai_command(name: str, handler: Handler, *, flags: tuple[str, ...], summary: str, usage: str,
               keys: tuple[int, int, int] = NO_KEYS, after_relays: bool = False) -> CommandSpec:
    """An AI.* row: group ``ai``, queued in MULTI by its MULTI form, and any arity (RedisAI checks the argument
    count itself, with its own texts, so the table must not answer Redis's generic arity error first)."""
    return command(name, handler, arity=-1, group="ai", summary=summary, usage=usage, flags=flags, keys=keys,
                   after_relays=after_relays, ai=True)
