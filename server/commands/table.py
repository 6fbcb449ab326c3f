"""The command table, written out literally (house rule 3).

It drives dispatch, arity errors, ``COMMAND`` replies and docs/commands.md. Commands not listed here go
to the backing store verbatim. Each row is written by keyword (``command`` / ``ai_command``,
server/commands/spec.py); tests/unit/test_command_table.py checks every row against its handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from server.commands import (
    config,
    dag,
    generic,
    info,
    introspection,
    lifecycle,
    model,
    modules,
    script,
    tensor,
)
from server.commands.spec import CommandSpec, ai_command, command

_CONNECTION = "connection"
_SERVER = "server"
_EXEC_FLAGS = ("write", "denyoom", "movablekeys")
_ONE_KEY = (1, 1, 1)  # (first, last, step): the key is the first argument

COMMAND_TABLE: Mapping[str, CommandSpec] = MappingProxyType({
    spec.name: spec
    for spec in (
        command("PING", generic.cmd_ping, arity=-1, flags=("fast", "stale"), group=_CONNECTION,
                summary="Returns the server's liveliness response.", usage="PING [message]"),
        command("ECHO", generic.cmd_echo, arity=2, flags=("fast",), group=_CONNECTION,
                summary="Returns the given string.", usage="ECHO message"),
        command("QUIT", generic.cmd_quit, arity=-1, flags=("noauth", "fast", "no_auth"), group=_CONNECTION,
                summary="Closes the connection after replying.", usage="QUIT"),
        command("AUTH", generic.cmd_auth, arity=-2, flags=("noscript", "loading", "stale", "fast", "no_auth"),
                group=_CONNECTION, summary="Authenticates the connection.", usage="AUTH [username] password"),
        command("HELLO", generic.cmd_hello, arity=-1, flags=("noscript", "loading", "stale", "fast", "no_auth"),
                group=_CONNECTION, summary="Handshakes with the server (RESP2 or RESP3).",
                usage="HELLO [protover [AUTH username password] [SETNAME clientname]]"),
        command("SELECT", generic.cmd_select, arity=2, flags=("loading", "stale", "fast"), group=_CONNECTION,
                summary="Changes the selected database.", usage="SELECT index"),
        command("RESET", generic.cmd_reset, arity=1, flags=("noscript", "loading", "stale", "fast", "no_auth"),
                group=_CONNECTION, summary="Resets the connection.", usage="RESET", after_relays=True),
        command("TYPE", generic.cmd_type, arity=2, flags=("readonly", "fast"), keys=_ONE_KEY, group="keyspace",
                summary="The type of a key; RedisAI's names (AI_TENSOR, AI__MODEL, AI_SCRIPT) for AI values.",
                usage="TYPE key", after_relays=True),
        command("CLIENT", generic.cmd_client, arity=-2, flags=("noscript", "loading", "stale"), group=_CONNECTION,
                summary="Connection management: SETNAME, GETNAME, SETINFO, ID, INFO, LIST, KILL.",
                usage="CLIENT SETNAME|GETNAME|SETINFO|ID|INFO|LIST|KILL ..."),
        command("INFO", introspection.cmd_info, arity=-1, flags=("loading", "stale"), group=_SERVER,
                summary="Information and statistics about the server and its store.", usage="INFO [section ...]",
                after_relays=True),
        command("SHUTDOWN", lifecycle.cmd_shutdown, arity=-1, flags=("admin", "noscript", "loading", "stale"),
                group=_SERVER, summary="Stops this server gracefully (and the embedded store with it).",
                usage="SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]"),
        command("MODULE", modules.cmd_module, arity=-2, flags=("admin", "noscript"), group=_SERVER,
                summary="MODULE LIST shows RedisAI's module, ai; other subcommands are the store's.",
                usage="MODULE LIST | HELP | LOAD path [arg ...] | LOADEX path ... | UNLOAD name"),
        command("COMMAND", introspection.cmd_command, arity=-1, flags=("loading", "stale"), group=_SERVER,
                summary="Details about commands: ours and the store's.",
                usage="COMMAND [COUNT | INFO name ... | DOCS [name ...] | GETKEYS cmd args ... | LIST]"),
        ai_command("AI.TENSORSET", tensor.cmd_tensorset, flags=("write", "denyoom"), keys=_ONE_KEY,
                   summary="Stores a tensor (dtype, shape, and data or zeros) under a key.",
                   usage="AI.TENSORSET key type [dim ...] [BLOB data | VALUES value [value ...]]",
                   after_relays=True),
        ai_command("AI.TENSORGET", tensor.cmd_tensorget, flags=("readonly",), keys=_ONE_KEY,
                   summary="Returns a tensor's dtype and shape, and its data as a blob or as values.",
                   usage="AI.TENSORGET key [META] [BLOB | VALUES]", after_relays=True),
        ai_command("AI.MODELSTORE", model.cmd_modelstore, flags=("write", "denyoom"), keys=_ONE_KEY,
                   summary="Stores a TorchScript, ONNX, TF or TFLite model under a key.",
                   usage="AI.MODELSTORE key backend device [TAG tag] [BATCHSIZE n [MINBATCHSIZE m "
                         "[MINBATCHTIMEOUT t]]] [INPUTS n name ... OUTPUTS m name ...] BLOB chunk ...",
                   after_relays=True),
        ai_command("AI.MODELSET", model.cmd_modelset, flags=("write", "denyoom"), keys=_ONE_KEY,
                   summary="Stores a model (deprecated 1.0 form of AI.MODELSTORE).",
                   usage="AI.MODELSET key backend device [TAG tag] [BATCHSIZE n [MINBATCHSIZE m "
                         "[MINBATCHTIMEOUT t]]] [INPUTS name ... OUTPUTS name ...] BLOB chunk ...",
                   after_relays=True),
        ai_command("AI.MODELGET", model.cmd_modelget, flags=("readonly",), keys=_ONE_KEY,
                   summary="Returns a model's metadata and/or blob.", usage="AI.MODELGET key [META] [BLOB]",
                   after_relays=True),
        ai_command("AI.MODELDEL", model.cmd_modeldel, flags=("write",), keys=_ONE_KEY,
                   summary="Deletes a model.", usage="AI.MODELDEL key", after_relays=True),
        ai_command("AI.MODELEXECUTE", model.cmd_modelexecute, flags=_EXEC_FLAGS, keys=_ONE_KEY,
                   summary="Runs a model on input tensors and stores the output tensors.",
                   usage="AI.MODELEXECUTE key INPUTS n key ... OUTPUTS m key ... [TIMEOUT ms]", after_relays=True),
        ai_command("AI.MODELRUN", model.cmd_modelrun, flags=_EXEC_FLAGS, keys=_ONE_KEY,
                   summary="Runs a model (deprecated 1.0 form of AI.MODELEXECUTE).",
                   usage="AI.MODELRUN key [TIMEOUT ms] INPUTS key ... OUTPUTS key ...", after_relays=True),
        ai_command("AI._MODELSCAN", model.cmd_modelscan, flags=("readonly",),
                   summary="Lists the models in the caller's database, whoever stored them (experimental).",
                   usage="AI._MODELSCAN", after_relays=True),
        ai_command("AI.DAGEXECUTE", dag.cmd_dagexecute, flags=_EXEC_FLAGS,
                   summary="Runs a DAG of tensor, model and script ops, across devices.",
                   usage="AI.DAGEXECUTE [LOAD n key ...] [PERSIST n key ...] [ROUTING key] [TIMEOUT ms] "
                         "|> op [|> op ...]", after_relays=True),
        ai_command("AI.DAGEXECUTE_RO", dag.cmd_dagexecute_ro, flags=("readonly", "movablekeys"),
                   summary="Runs a read-only DAG (no PERSIST, no scripts).",
                   usage="AI.DAGEXECUTE_RO [LOAD n key ...] [ROUTING key] [TIMEOUT ms] |> op [|> op ...]",
                   after_relays=True),
        ai_command("AI.DAGRUN", dag.cmd_dagrun, flags=_EXEC_FLAGS,
                   summary="Runs a DAG (deprecated 1.0 form: MODELRUN and SCRIPTRUN ops).",
                   usage="AI.DAGRUN [LOAD n key ...] [PERSIST n key ...] [TIMEOUT ms] |> op [|> op ...]",
                   after_relays=True),
        ai_command("AI.DAGRUN_RO", dag.cmd_dagrun_ro, flags=("readonly", "movablekeys"),
                   summary="Runs a read-only DAG (deprecated 1.0 form).",
                   usage="AI.DAGRUN_RO [LOAD n key ...] [TIMEOUT ms] |> op [|> op ...]", after_relays=True),
        ai_command("AI.INFO", info.cmd_aiinfo, flags=("readonly",), keys=_ONE_KEY,
                   summary="Returns a model's or script's run statistics, or resets them.",
                   usage="AI.INFO key [RESETSTAT]", after_relays=True),
        ai_command("AI.CONFIG", config.cmd_config, flags=("write",),
                   summary="Sets or gets RedisAI's run-time settings; loads a backend.",
                   usage="AI.CONFIG BACKENDSPATH path | LOADBACKEND backend path | MODEL_CHUNK_SIZE bytes | GET name",
                   after_relays=True),  # LOADBACKEND returns a coroutine (the import runs off the loop)
        ai_command("AI.SCRIPTSTORE", script.cmd_scriptstore, flags=("write", "denyoom"), keys=_ONE_KEY,
                   summary="Stores a TorchScript script (its source and entry points) under a key.",
                   usage="AI.SCRIPTSTORE key device [TAG tag] ENTRY_POINTS n function ... SOURCE script",
                   after_relays=True),
        ai_command("AI.SCRIPTSET", script.cmd_scriptset, flags=("write", "denyoom"), keys=_ONE_KEY,
                   summary="Stores a script (deprecated 1.0 form of AI.SCRIPTSTORE).",
                   usage="AI.SCRIPTSET key device [TAG tag] SOURCE script", after_relays=True),
        ai_command("AI.SCRIPTGET", script.cmd_scriptget, flags=("readonly",), keys=_ONE_KEY,
                   summary="Returns a script's metadata and/or source.", usage="AI.SCRIPTGET key [META] [SOURCE]",
                   after_relays=True),
        ai_command("AI.SCRIPTDEL", script.cmd_scriptdel, flags=("write",), keys=_ONE_KEY,
                   summary="Deletes a script.", usage="AI.SCRIPTDEL key", after_relays=True),
        ai_command("AI.SCRIPTEXECUTE", script.cmd_scriptexecute, flags=_EXEC_FLAGS, keys=_ONE_KEY,
                   summary="Runs a script function on input tensors, keys and arguments; stores the output tensors.",
                   usage="AI.SCRIPTEXECUTE key function [KEYS n key ...] [INPUTS n key ...] [ARGS n arg ...] "
                         "[OUTPUTS m key ...] [TIMEOUT ms]", after_relays=True),
        ai_command("AI.SCRIPTRUN", script.cmd_scriptrun, flags=_EXEC_FLAGS, keys=_ONE_KEY,
                   summary="Runs a script function (deprecated 1.0 form of AI.SCRIPTEXECUTE).",
                   usage="AI.SCRIPTRUN key function [TIMEOUT ms] INPUTS key ... [$ key ...] OUTPUTS key ...",
                   after_relays=True),
        ai_command("AI._SCRIPTSCAN", script.cmd_scriptscan, flags=("readonly",),
                   summary="Lists the scripts in the caller's database, whoever stored them (experimental).",
                   usage="AI._SCRIPTSCAN", after_relays=True),
    )
})
