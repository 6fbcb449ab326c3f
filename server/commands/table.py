"""The command table, written out literally (house rule 3).

It drives dispatch, arity errors, ``COMMAND`` replies and docs/commands.md. Commands not listed here go
to the backing store verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from server.commands import generic, introspection
from server.commands.spec import CommandSpec

_CONNECTION = "connection"
_SERVER = "server"

COMMAND_TABLE: Mapping[str, CommandSpec] = MappingProxyType({
    spec.name: spec
    for spec in (
        CommandSpec("PING", generic.cmd_ping, -1, ("fast", "stale"), 0, 0, 0, _CONNECTION,
                    "Returns the server's liveliness response.", "PING [message]"),
        CommandSpec("ECHO", generic.cmd_echo, 2, ("fast",), 0, 0, 0, _CONNECTION,
                    "Returns the given string.", "ECHO message"),
        CommandSpec("QUIT", generic.cmd_quit, -1, ("noauth", "fast", "no_auth"), 0, 0, 0, _CONNECTION,
                    "Closes the connection after replying.", "QUIT"),
        CommandSpec("AUTH", generic.cmd_auth, -2, ("noscript", "loading", "stale", "fast", "no_auth"), 0, 0, 0,
                    _CONNECTION, "Authenticates the connection.", "AUTH [username] password"),
        CommandSpec("HELLO", generic.cmd_hello, -1, ("noscript", "loading", "stale", "fast", "no_auth"), 0, 0, 0,
                    _CONNECTION, "Handshakes with the server (RESP2 or RESP3).",
                    "HELLO [protover [AUTH username password] [SETNAME clientname]]"),
        CommandSpec("SELECT", generic.cmd_select, 2, ("loading", "stale", "fast"), 0, 0, 0, _CONNECTION,
                    "Changes the selected database.", "SELECT index"),
        CommandSpec("RESET", generic.cmd_reset, 1, ("noscript", "loading", "stale", "fast", "no_auth"), 0, 0, 0,
                    _CONNECTION, "Resets the connection.", "RESET"),
        CommandSpec("CLIENT", generic.cmd_client, -2, ("noscript", "loading", "stale"), 0, 0, 0, _CONNECTION,
                    "Connection management: SETNAME, GETNAME, SETINFO, ID, INFO, LIST, KILL.",
                    "CLIENT SETNAME|GETNAME|SETINFO|ID|INFO|LIST|KILL ..."),
        CommandSpec("INFO", introspection.cmd_info, -1, ("loading", "stale"), 0, 0, 0, _SERVER,
                    "Information and statistics about the server and its store.", "INFO [section ...]",
                    waits=True),
        CommandSpec("COMMAND", introspection.cmd_command, -1, ("loading", "stale"), 0, 0, 0, _SERVER,
                    "Details about commands: ours and the store's.",
                    "COMMAND [COUNT | INFO name ... | DOCS [name ...] | GETKEYS cmd args ... | LIST]"),
    )
})

# Commands the gate lets through before AUTH.
NO_AUTH_COMMANDS = frozenset({"AUTH", "HELLO", "QUIT", "RESET"})
