"""SHUTDOWN: stops this server, as redis-server's SHUTDOWN stops redis-server.

    SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]

It is ours, not relayed: relayed, it would stop the embedded store under us (which we would then start
again, empty without ``--dir``) or a Redis shared with other servers. The server shuts down gracefully
(in-flight commands finish within ``--shutdown-timeout``); the embedded store is stopped with it and, with
``--dir``, keeps its data (its AOF is always on there, whatever SAVE/NOSAVE say). As redis-server 7 does, a
SHUTDOWN that goes ahead is not answered: the connection closes without a reply (redis-cli prints nothing,
redis-py's ``shutdown()`` returns); a refused one (a syntax error, ABORT) answers its error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.errors import AIError
from server.protocol.reply import OK

if TYPE_CHECKING:
    from server.commands.context import Client

_FLAGS = frozenset({b"NOSAVE", b"SAVE", b"NOW", b"FORCE", b"ABORT"})


def cmd_shutdown(client: Client, argv: list[bytes]) -> Any:
    """SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]: the connection closes without a reply (redis-server's
    behaviour: a client sees the server go), and the server stops."""
    flags = {arg.upper() for arg in argv[1:]}
    if not flags <= _FLAGS or {b"NOSAVE", b"SAVE"} <= flags:
        raise AIError(msgs.SYNTAX_MSG)
    if b"ABORT" in flags:
        raise AIError(msgs.NO_SHUTDOWN_IN_PROGRESS_MSG)
    client.show_current_reply(False)
    client.close_after_reply()
    client.ctx.request_shutdown()
    return OK  # (hidden: never written)
