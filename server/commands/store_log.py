"""AI.MODELSTORE, AI.MODELSET, AI.SCRIPTSTORE, AI.SCRIPTSET and AI.GRAPHSTORE as the command table runs them: the
commands themselves (server/commands/model.py, script.py, graph.py), with a refusal logged at notice.

    model store failed key=m backend=TORCH device=CPU error="ERR ... "

Why: a store that succeeds is logged (``model stored key=…``); one that fails (a blob its backend cannot load, a
script that does not compile, WRONGTYPE, a syntax error) answered its client and left no trace, so an operator
could not tell from the log why a model never appeared. Inside MULTI the queued store is not logged here (its
error is EXEC's reply).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from backends.errors import AIError
from server.commands import graph, model, script

if TYPE_CHECKING:
    from server.commands.context import Client

log = logging.getLogger("redisai.commands")

Handler = Callable[["Client", list[bytes]], Awaitable[Any]]


async def cmd_modelstore(client: Client, argv: list[bytes]) -> Any:
    """AI.MODELSTORE key backend device [TAG tag] [BATCHSIZE n [MINBATCHSIZE m [MINBATCHTIMEOUT t]]]
    [INPUTS n name... OUTPUTS m name...] BLOB chunk..."""
    return await _logged("model", model.cmd_modelstore, client, argv, _model_fields)


async def cmd_modelset(client: Client, argv: list[bytes]) -> Any:
    """AI.MODELSET key backend device [TAG tag] [BATCHSIZE n ...] [INPUTS name... OUTPUTS name...] BLOB chunk..."""
    return await _logged("model", model.cmd_modelset, client, argv, _model_fields)


async def cmd_scriptstore(client: Client, argv: list[bytes]) -> Any:
    """AI.SCRIPTSTORE key device [TAG tag] ENTRY_POINTS n fn... SOURCE src"""
    return await _logged("script", script.cmd_scriptstore, client, argv, _script_fields)


async def cmd_scriptset(client: Client, argv: list[bytes]) -> Any:
    """AI.SCRIPTSET key device [TAG tag] SOURCE src   (deprecated: no entry points)"""
    return await _logged("script", script.cmd_scriptset, client, argv, _script_fields)


async def cmd_graphstore(client: Client, argv: list[bytes]) -> Any:
    """AI.GRAPHSTORE key [TAG tag] INPUTS n name... OUTPUTS m name... |> op [|> op ...]"""
    return await _logged("graph", graph.cmd_graphstore, client, argv, _no_fields)


async def _logged(kind: str, handler: Handler, client: Client, argv: list[bytes],
                  fields: Callable[[list[bytes]], dict[str, str]]) -> Any:
    try:
        return await handler(client, argv)
    except AIError as exc:
        log_store_failed(kind, argv, fields(argv), exc.message)
        raise


def log_store_failed(kind: str, argv: list[bytes], fields: dict[str, str], reason: str) -> None:
    """The notice line of a store refused: the key (as sent, when there is one), what was asked, and the error."""
    key = _word(argv, 1, 256)
    log.info("%s store failed", kind, extra={"fields": {"key": key, **fields, "error": reason}})


def _model_fields(argv: list[bytes]) -> dict[str, str]:
    """The backend and device as asked (AI.MODELSTORE key backend device ...), when they are there."""
    return {"backend": _word(argv, 2), "device": _word(argv, 3)}


def _script_fields(argv: list[bytes]) -> dict[str, str]:
    return {"device": _word(argv, 2)}


def _no_fields(_argv: list[bytes]) -> dict[str, str]:
    return {}


def _word(argv: list[bytes], at: int, limit: int = 64) -> str:
    """``argv[at]`` as text, cut at ``limit`` characters (a log line stays a line), or "" when it is missing."""
    return argv[at][:limit].decode(errors="replace") if len(argv) > at else ""
