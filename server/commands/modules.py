"""MODULE: RedisAI's module, ``ai``, where tools that detect RedisAI look for it.

Tools find RedisAI through ``MODULE LIST`` (or ``INFO modules``, server/commands/info_text.py): a module named
``ai`` whose version is RedisAI's (1.2.7 → 10207). We are not a module, but we answer for one, so such
tools find the commands they expect. Every other MODULE subcommand is the store's: relayed to a store behind
``--redis-url``, refused on the embedded store, which belongs to this server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.errors import AIError
from server.commands.command_info import append_elements
from server.commands.info_text import MODULE_NAME, MODULE_VERSION
from server.commands.spec import RELAY, RelayThen
from server.protocol.reply import encode

if TYPE_CHECKING:
    from server.commands.context import Client


def cmd_module(client: Client, argv: list[bytes]) -> Any:
    """MODULE LIST | HELP | LOAD path [arg ...] | LOADEX ... | UNLOAD name

    LIST: the ``ai`` module, then (behind --redis-url) the store's own modules."""
    embedded = client.ctx.store.kind == "embedded"
    if argv[1].upper() == b"LIST" and len(argv) == 2:
        entry = ai_module_entry()
        if embedded:
            return [entry]
        ours = [encode(entry, client.state.proto)]
        return RelayThen(lambda raw: append_elements(raw, ours, b"*"))
    if embedded:
        raise AIError(msgs.EMBEDDED_STORE_PRIVATE_FMT.format(cmd=b" ".join(argv[:2]).decode(errors="replace")))
    return RELAY


def ai_module_entry() -> dict[bytes, Any]:
    """One MODULE LIST entry, as Redis 7 gives it (a map in RESP3, a flat array in RESP2)."""
    return {b"name": MODULE_NAME.encode(), b"ver": MODULE_VERSION,
            b"path": b"builtin", b"args": []}  # as HELLO's modules entry says: no module file to load
