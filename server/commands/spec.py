"""CommandSpec: one row of the command table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from backends.errors import AIError, wrong_arity
from server.commands.argdocs import arguments
from server.commands.info_text import MODULE_NAME
from server.commands.keyspecs import READ, READ_WRITE, KeySpecRow, key_at
from server.protocol.reply import SetOf, Status


class _Relay:
    """Returned by a handler that wants its command sent to the backing store as it is."""

    def __repr__(self) -> str:
        return "RELAY"


RELAY: Final = _Relay()


# Redis's commands with subcommands (their full names are ``container|sub``)
CONTAINER_COMMANDS: Final = frozenset({"acl", "client", "cluster", "command", "config", "function", "latency",
                                       "memory", "module", "object", "pubsub", "script", "slowlog", "xgroup",
                                       "xinfo"})
# what a RESP2 client may send while subscribed
SUBSCRIBED_CONTEXT_COMMANDS: Final = frozenset({"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE",
                                                "PUNSUBSCRIBE", "SUNSUBSCRIBE", "PING", "QUIT", "RESET"})


@dataclass(frozen=True, slots=True)
class RelayThen:
    """Relay ``argv`` (or the command itself) to the store, then rewrite its raw reply with ``transform``."""

    transform: Callable[[bytes], bytes]
    argv: list[bytes] | None = None

# A command's own key finder (server/commands/getkeys.py): argv → (key, key-spec flags) pairs.
KeyFinder = Callable[[list[bytes]], list[tuple[bytes, tuple[str, ...]]]]

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
    key_specs: tuple[KeySpecRow, ...] = ()
    find_keys: KeyFinder | None = None
    complexity: str = ""
    since: str = ""
    replaced_by: str = ""  # a deprecated command: the one to use instead

    @property
    def no_auth(self) -> bool:
        """Allowed before AUTH (Redis's ``no_auth`` flag): the flag the row carries is the one rule, so the
        auth gate and ``COMMAND INFO`` cannot disagree."""
        return "no_auth" in self.flags

    @property
    def acl_categories(self) -> tuple[str, ...]:
        return ("@" + self.group,)

    @property
    def module(self) -> str:
        """The module a client sees the command come from (``MODULE LIST`` shows RedisAI's as ``ai``)."""
        return MODULE_NAME if self.ai else ""

    def arity_ok(self, argc: int) -> bool:
        return argc == self.arity if self.arity > 0 else argc >= -self.arity

    def full_name(self, argv: list[bytes]) -> str:
        """Redis's name of the command sent: lower case, and ``container|sub`` for a command with
        subcommands ('client|id'); the errors that name a command use it."""
        name = self.name.lower()
        if name in CONTAINER_COMMANDS and len(argv) > 1:
            return f"{name}|{argv[1].decode(errors='replace').lower()}"
        return name

    def arity_error(self, argv: list[bytes]) -> AIError:
        """The wrong-arity error: Redis names its own commands by their table name, lower case ('echo', as
        redis-server 7 does however it was typed); a module command (ours, AI.*) is named as the client typed
        it (``RedisModule_WrongArity``)."""
        return wrong_arity(argv[0].decode(errors="replace") if self.ai else self.name.lower())

    def specs(self) -> tuple[KeySpecRow, ...]:
        """The key specs: the row's own, or one spec from its (first, last, step) positions."""
        if self.key_specs or self.first_key <= 0:
            return self.key_specs
        lastkey = self.last_key - self.first_key if self.last_key >= 0 else self.last_key
        return (key_at(self.first_key, READ if "readonly" in self.flags else READ_WRITE, lastkey=lastkey),)

    def keys_with_flags(self, argv: list[bytes]) -> list[tuple[bytes, tuple[str, ...]]]:
        """The key arguments of ``argv`` with their spec's flags (COMMAND GETKEYS / GETKEYSANDFLAGS): by the
        command's own finder where it has one, else by its key specs, as Redis does."""
        if self.find_keys is not None:
            return self.find_keys(argv)
        return [(key, spec.flags) for spec in self.specs() for key in spec.keys(argv)]

    def keys_of(self, argv: list[bytes]) -> list[bytes]:
        return [key for key, _flags in self.keys_with_flags(argv)]

    def info_reply(self) -> list[Any]:
        """The COMMAND INFO entry (Redis 7 layout: flags, categories, tips, key specs, subcommands)."""
        return [self.name.lower(), self.arity, SetOf([Status(flag) for flag in self.flags]), self.first_key,
                self.last_key, self.step, SetOf([Status(cat) for cat in self.acl_categories]), SetOf([]),
                SetOf([spec.reply() for spec in self.specs()]), SetOf([])]

    def docs_reply(self) -> dict[str, Any]:
        """The COMMAND DOCS entry (Redis 7 layout; a module's commands are in group ``module``)."""
        docs: dict[str, Any] = {"summary": self.summary}
        if self.since:
            docs["since"] = self.since
        docs["group"] = "module" if self.module else self.group
        if self.complexity:
            docs["complexity"] = self.complexity
        if self.module:
            docs["module"] = self.module
        if self.replaced_by:
            docs |= {"doc_flags": SetOf([Status("deprecated")]), "replaced_by": f"`{self.replaced_by}`"}
        return docs | {"arguments": arguments(self.usage, self.specs())}


NO_KEYS: Final = (0, 0, 0)


def command(name: str, handler: Handler, *, arity: int, group: str, summary: str, usage: str,
            flags: tuple[str, ...] = (), keys: tuple[int, int, int] = NO_KEYS, after_relays: bool = False,
            ai: bool = False, key_specs: tuple[KeySpecRow, ...] = (), find_keys: KeyFinder | None = None,
            complexity: str = "", since: str = "", replaced_by: str = "") -> CommandSpec:
    """One table row, by keyword: ten positional fields read as a row of numbers, so a row written with
    this names each of them (``keys`` is Redis's (first, last, step) of the key arguments; ``NO_KEYS``: none;
    ``key_specs`` Redis 7's, server/commands/keyspecs.py; ``find_keys`` the command's own key finder,
    server/commands/getkeys.py; ``replaced_by`` marks a deprecated command).
    """
    first_key, last_key, step = keys
    return CommandSpec(name, handler, arity, flags, first_key, last_key, step, group, summary, usage,
                       after_relays=after_relays, ai=ai, key_specs=key_specs, find_keys=find_keys,
                       complexity=complexity, since=since, replaced_by=replaced_by)


def ai_command(name: str, handler: Handler, *, flags: tuple[str, ...], summary: str, usage: str,
               complexity: str, keys: tuple[int, int, int] = NO_KEYS, after_relays: bool = False,
               key_specs: tuple[KeySpecRow, ...] = (), find_keys: KeyFinder | None = None, since: str = "",
               replaced_by: str = "") -> CommandSpec:
    """An AI.* row: group ``ai``, queued in MULTI by its MULTI form, and any arity (RedisAI checks the argument
    count itself, with its own texts, so the table must not answer Redis's generic arity error first)."""
    return command(name, handler, arity=-1, group="ai", summary=summary, usage=usage, flags=flags, keys=keys,
                   after_relays=after_relays, ai=True, key_specs=key_specs, find_keys=find_keys,
                   complexity=complexity, since=since, replaced_by=replaced_by)
