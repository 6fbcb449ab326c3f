"""COMMAND: our command entries merged with the backing store's, in Redis 7's shapes.

Our rows (server/commands/table.py) replace the store's entries of the same name, so each command is listed
once and ``COMMAND COUNT`` is the length of ``COMMAND`` and of ``COMMAND LIST``. The store's reply is
relayed in the client's protocol and ours are spliced into the raw frame, so every type the store sent
(simple strings, sets, maps) reaches the client as the store sent it. ``COMMAND DOCS`` gives ours for the
AI commands and the store's own documentation for the Redis commands we also answer (PING, INFO, …).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.errors import AIError, wrong_arity
from server.commands.spec import RELAY, CommandSpec, RelayThen
from server.protocol.framer import join_aggregate, split_aggregate
from server.protocol.reply import SetOf, Status, encode

if TYPE_CHECKING:
    from server.commands.context import Client

_FILTERS = (b"MODULE", b"ACLCAT", b"PATTERN")


def cmd_command(client: Client, argv: list[bytes]) -> Any:
    """COMMAND [COUNT | INFO [name ...] | DOCS [name ...] | GETKEYS cmd args ... | GETKEYSANDFLAGS cmd args ...
    | LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]]: ours merged into the store's."""
    table, proto = client.ctx.commands, client.state.proto
    sub = argv[1].upper() if len(argv) > 1 else b""
    if sub == b"" or (sub == b"INFO" and len(argv) == 2):
        ours = [encode(spec.info_reply(), proto) for spec in table.values()]
        return RelayThen(lambda raw: _replace_entries(raw, ours, table), [b"COMMAND"])
    if sub == b"COUNT" and len(argv) == 2:
        return RelayThen(lambda raw: b":%d\r\n" % _top_level(_merged_names(raw, table.values())), [b"COMMAND", b"LIST"])
    if sub == b"LIST":
        return _command_list(client, argv)
    if sub == b"INFO":
        return _command_info(client, argv[2:])
    if sub == b"DOCS":
        return _command_docs(client, argv[2:])
    if sub in (b"GETKEYS", b"GETKEYSANDFLAGS"):
        return _command_getkeys(client, argv)
    return RELAY


def _ours(client: Client, name: bytes) -> CommandSpec | None:
    return client.ctx.commands.get(name.upper().decode(errors="replace"))


def append_elements(raw: bytes, extra: list[bytes], kind: bytes) -> bytes:
    """Our encoded elements after the store's (an error reply from the store counts as an empty aggregate)."""
    if raw[:1] in (b"-", b"_") or raw.startswith(b"*-1"):
        return join_aggregate(kind, extra)
    raw_kind, elements = split_aggregate(raw)
    return join_aggregate(raw_kind, elements + extra)


def _text(frame: bytes) -> str:
    """The text of a raw bulk or simple string frame (a command's name)."""
    if frame[:1] == b"$":
        return frame[frame.index(b"\r\n") + 2 : -2].decode(errors="replace")
    return frame[1:-2].decode(errors="replace")


def _store_elements(raw: bytes) -> list[bytes]:
    return [] if raw[:1] not in (b"*", b"~") else split_aggregate(raw)[1]


def _replace_entries(raw: bytes, ours: list[bytes], table: Any) -> bytes:
    """The store's COMMAND entries without those we answer ourselves, then ours."""
    kept = [entry for entry in _store_elements(raw) if _text(split_aggregate(entry)[1][0]).upper() not in table]
    return join_aggregate(b"*", kept + ours)


def _merged_names(raw: bytes, specs: Iterable[CommandSpec]) -> list[str]:
    """The store's command names (a COMMAND LIST reply), then ours that it does not list, each once."""
    names = dict.fromkeys(_text(frame).lower() for frame in _store_elements(raw))
    names.update(dict.fromkeys(spec.name.lower() for spec in specs))
    return list(names)


def _top_level(names: list[str]) -> int:
    """How many of ``names`` are commands (COMMAND LIST also names subcommands, ``client|kill``)."""
    return sum(1 for name in names if "|" not in name)


def _command_list(client: Client, argv: list[bytes]) -> Any:
    """COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]: the store's names, filtered by
    the store, with ours that pass the same filter."""
    specs = list(client.ctx.commands.values())
    if len(argv) > 2:
        if len(argv) != 5 or argv[2].upper() != b"FILTERBY" or argv[3].upper() not in _FILTERS:
            raise AIError(msgs.SYNTAX_MSG)
        specs = [spec for spec in specs if _passes(spec, argv[3].upper(), argv[4].decode(errors="replace"))]
    proto = client.state.proto
    return RelayThen(lambda raw: join_aggregate(b"*", [encode(name, proto) for name in _merged_names(raw, specs)]))


def _passes(spec: CommandSpec, kind: bytes, value: str) -> bool:
    if kind == b"MODULE":
        return bool(spec.module) and spec.module.lower() == value.lower()
    if kind == b"ACLCAT":
        return "@" + value.lower() in spec.acl_categories
    return glob_regex(value).fullmatch(spec.name.lower()) is not None


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Redis's glob (``*``, ``?``, ``[abc]``, ``[^a-z]``, ``\\x``), case-insensitive, as a regular expression."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 1
        elif char in "*?":
            out.append(".*" if char == "*" else ".")
        elif char == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 2 if pattern[i + 1 : i + 2] == "^" else i + 1)
            body = pattern[i + 1 : end]
            negate = body.startswith("^")
            body = re.escape(body[1:] if negate else body).replace("\\-", "-")
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out), re.IGNORECASE | re.DOTALL)


def _command_info(client: Client, names: list[bytes]) -> Any:
    specs = [_ours(client, name) for name in names]
    if all(spec is not None for spec in specs):
        return [spec.info_reply() for spec in specs if spec is not None]
    others = [name for name, spec in zip(names, specs, strict=False) if spec is None]
    proto = client.state.proto

    def merge(raw: bytes) -> bytes:
        kind, theirs = split_aggregate(raw) if raw[:1] == b"*" else (b"*", [encode(None, proto)] * len(others))
        it = iter(theirs)
        return join_aggregate(kind, [encode(s.info_reply(), proto) if s else next(it) for s in specs])

    return RelayThen(merge, [b"COMMAND", b"INFO", *(name.lower() for name in others)])


def _command_docs(client: Client, names: list[bytes]) -> Any:
    """Ours for the AI commands; the store's own documentation for every other command (PING, INFO, …)."""
    proto = client.state.proto
    if names:
        specs = {name: _ours(client, name) for name in names}
        ours = {name.lower(): spec.docs_reply() for name, spec in specs.items() if spec is not None and spec.ai}
        others = [name for name in names if name.lower() not in ours]
    else:
        ours = {spec.name.lower().encode(): spec.docs_reply() for spec in client.ctx.commands.values() if spec.ai}
        others = []
    if names and not others:
        return ours
    extra = [encode(part, proto) for key, doc in ours.items() for part in (key, doc)]
    kind = b"%" if proto == 3 else b"*"
    return RelayThen(lambda raw: append_elements(raw, extra, kind), [b"COMMAND", b"DOCS", *others])


def _command_getkeys(client: Client, argv: list[bytes]) -> Any:
    """COMMAND GETKEYS / GETKEYSANDFLAGS cmd args...: Redis 7's checks and texts, in its order."""
    if len(argv) < 3:
        raise wrong_arity(f"command|{argv[1].decode(errors='replace').lower()}")
    spec = client.ctx.commands.get(argv[2].upper().decode(errors="replace"))
    if spec is None:
        return RELAY
    if not spec.specs() and spec.find_keys is None:
        raise AIError(msgs.NO_KEYS_MSG)
    if not spec.arity_ok(len(argv) - 2):
        raise AIError(msgs.INVALID_ARITY_GETKEYS_MSG)
    keys = spec.keys_with_flags(argv[2:])
    if not keys:
        raise AIError(msgs.INVALID_ARGS_GETKEYS_MSG)
    if argv[1].upper() == b"GETKEYSANDFLAGS":
        return [[key, SetOf([Status(flag) for flag in flags])] for key, flags in keys]
    return [key for key, _flags in keys]
