"""The command table, written out literally (house rule 3).

It drives dispatch, arity errors, ``COMMAND`` replies and docs/commands.md. Commands not listed here go
to the backing store verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from server.commands import config, dag, generic, info, introspection, lifecycle, model, script, tensor
from server.commands.spec import CommandSpec

_CONNECTION = "connection"
_SERVER = "server"
_AI = "ai"
_EXEC_FLAGS = ("write", "denyoom", "movablekeys")

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
                    _CONNECTION, "Resets the connection.", "RESET", after_relays=True),
        CommandSpec("TYPE", generic.cmd_type, 2, ("readonly", "fast"), 1, 1, 1, "keyspace",
                    "The type of a key; RedisAI's names (AI_TENSOR, AI__MODEL, AI_SCRIPT) for AI values.",
                    "TYPE key", after_relays=True),
        CommandSpec("CLIENT", generic.cmd_client, -2, ("noscript", "loading", "stale"), 0, 0, 0, _CONNECTION,
                    "Connection management: SETNAME, GETNAME, SETINFO, ID, INFO, LIST, KILL.",
                    "CLIENT SETNAME|GETNAME|SETINFO|ID|INFO|LIST|KILL ..."),
        CommandSpec("INFO", introspection.cmd_info, -1, ("loading", "stale"), 0, 0, 0, _SERVER,
                    "Information and statistics about the server and its store.", "INFO [section ...]",
                    after_relays=True),
        CommandSpec("SHUTDOWN", lifecycle.cmd_shutdown, -1, ("admin", "noscript", "loading", "stale"), 0, 0, 0,
                    _SERVER, "Stops this server gracefully (and the embedded store with it).",
                    "SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]"),
        CommandSpec("COMMAND", introspection.cmd_command, -1, ("loading", "stale"), 0, 0, 0, _SERVER,
                    "Details about commands: ours and the store's.",
                    "COMMAND [COUNT | INFO name ... | DOCS [name ...] | GETKEYS cmd args ... | LIST]"),
        CommandSpec("AI.TENSORSET", tensor.cmd_tensorset, -1, ("write", "denyoom"), 1, 1, 1, _AI,
                    "Stores a tensor (dtype, shape, and data or zeros) under a key.",
                    "AI.TENSORSET key type [dim ...] [BLOB data | VALUES value [value ...]]",
                    after_relays=True, ai=True),
        CommandSpec("AI.TENSORGET", tensor.cmd_tensorget, -1, ("readonly",), 1, 1, 1, _AI,
                    "Returns a tensor's dtype and shape, and its data as a blob or as values.",
                    "AI.TENSORGET key [META] [BLOB | VALUES]", after_relays=True, ai=True),
        CommandSpec("AI.MODELSTORE", model.cmd_modelstore, -1, ("write", "denyoom"), 1, 1, 1, _AI,
                    "Stores a TorchScript or ONNX model under a key.",
                    "AI.MODELSTORE key backend device [TAG tag] [BATCHSIZE n [MINBATCHSIZE m [MINBATCHTIMEOUT t]]] "
                    "[INPUTS n name ... OUTPUTS m name ...] BLOB chunk ...", after_relays=True, ai=True),
        CommandSpec("AI.MODELSET", model.cmd_modelset, -1, ("write", "denyoom"), 1, 1, 1, _AI,
                    "Stores a model (deprecated 1.0 form of AI.MODELSTORE).",
                    "AI.MODELSET key backend device [TAG tag] [BATCHSIZE n [MINBATCHSIZE m [MINBATCHTIMEOUT t]]] "
                    "[INPUTS name ... OUTPUTS name ...] BLOB chunk ...", after_relays=True, ai=True),
        CommandSpec("AI.MODELGET", model.cmd_modelget, -1, ("readonly",), 1, 1, 1, _AI,
                    "Returns a model's metadata and/or blob.", "AI.MODELGET key [META] [BLOB]",
                    after_relays=True, ai=True),
        CommandSpec("AI.MODELDEL", model.cmd_modeldel, -1, ("write",), 1, 1, 1, _AI,
                    "Deletes a model.", "AI.MODELDEL key", after_relays=True, ai=True),
        CommandSpec("AI.MODELEXECUTE", model.cmd_modelexecute, -1, _EXEC_FLAGS, 1, 1, 1, _AI,
                    "Runs a model on input tensors and stores the output tensors.",
                    "AI.MODELEXECUTE key INPUTS n key ... OUTPUTS m key ... [TIMEOUT ms]", after_relays=True, ai=True),
        CommandSpec("AI.MODELRUN", model.cmd_modelrun, -1, _EXEC_FLAGS, 1, 1, 1, _AI,
                    "Runs a model (deprecated 1.0 form of AI.MODELEXECUTE).",
                    "AI.MODELRUN key [TIMEOUT ms] INPUTS key ... OUTPUTS key ...", after_relays=True, ai=True),
        CommandSpec("AI._MODELSCAN", model.cmd_modelscan, -1, ("readonly",), 0, 0, 0, _AI,
                    "Lists the models in the caller's database, whoever stored them (experimental).",
                    "AI._MODELSCAN", after_relays=True, ai=True),
        CommandSpec("AI.DAGEXECUTE", dag.cmd_dagexecute, -1, _EXEC_FLAGS, 0, 0, 0, _AI,
                    "Runs a DAG of tensor, model and script ops, across devices.",
                    "AI.DAGEXECUTE [LOAD n key ...] [PERSIST n key ...] [ROUTING key] [TIMEOUT ms] |> op [|> op ...]",
                    after_relays=True, ai=True),
        CommandSpec("AI.DAGEXECUTE_RO", dag.cmd_dagexecute_ro, -1, ("readonly", "movablekeys"), 0, 0, 0, _AI,
                    "Runs a read-only DAG (no PERSIST, no scripts).",
                    "AI.DAGEXECUTE_RO [LOAD n key ...] [ROUTING key] [TIMEOUT ms] |> op [|> op ...]",
                    after_relays=True, ai=True),
        CommandSpec("AI.DAGRUN", dag.cmd_dagrun, -1, _EXEC_FLAGS, 0, 0, 0, _AI,
                    "Runs a DAG (deprecated 1.0 form: MODELRUN and SCRIPTRUN ops).",
                    "AI.DAGRUN [LOAD n key ...] [PERSIST n key ...] [TIMEOUT ms] |> op [|> op ...]",
                    after_relays=True, ai=True),
        CommandSpec("AI.DAGRUN_RO", dag.cmd_dagrun_ro, -1, ("readonly", "movablekeys"), 0, 0, 0, _AI,
                    "Runs a read-only DAG (deprecated 1.0 form).",
                    "AI.DAGRUN_RO [LOAD n key ...] [TIMEOUT ms] |> op [|> op ...]", after_relays=True, ai=True),
        CommandSpec("AI.INFO", info.cmd_aiinfo, -1, ("readonly",), 1, 1, 1, _AI,
                    "Returns a model's or script's run statistics, or resets them.", "AI.INFO key [RESETSTAT]",
                    after_relays=True, ai=True),
        CommandSpec("AI.CONFIG", config.cmd_config, -1, ("write",), 0, 0, 0, _AI,
                    "Sets or gets RedisAI's run-time settings; loads a backend.",
                    "AI.CONFIG BACKENDSPATH path | LOADBACKEND backend path | MODEL_CHUNK_SIZE bytes | GET name",
                    ai=True),
        CommandSpec("AI.SCRIPTSTORE", script.cmd_scriptstore, -1, ("write", "denyoom"), 1, 1, 1, _AI,
                    "Stores a TorchScript script (its source and entry points) under a key.",
                    "AI.SCRIPTSTORE key device [TAG tag] ENTRY_POINTS n function ... SOURCE script",
                    after_relays=True, ai=True),
        CommandSpec("AI.SCRIPTSET", script.cmd_scriptset, -1, ("write", "denyoom"), 1, 1, 1, _AI,
                    "Stores a script (deprecated 1.0 form of AI.SCRIPTSTORE).",
                    "AI.SCRIPTSET key device [TAG tag] SOURCE script", after_relays=True, ai=True),
        CommandSpec("AI.SCRIPTGET", script.cmd_scriptget, -1, ("readonly",), 1, 1, 1, _AI,
                    "Returns a script's metadata and/or source.", "AI.SCRIPTGET key [META] [SOURCE]",
                    after_relays=True, ai=True),
        CommandSpec("AI.SCRIPTDEL", script.cmd_scriptdel, -1, ("write",), 1, 1, 1, _AI,
                    "Deletes a script.", "AI.SCRIPTDEL key", after_relays=True, ai=True),
        CommandSpec("AI.SCRIPTEXECUTE", script.cmd_scriptexecute, -1, _EXEC_FLAGS, 1, 1, 1, _AI,
                    "Runs a script function on input tensors, keys and arguments; stores the output tensors.",
                    "AI.SCRIPTEXECUTE key function [KEYS n key ...] [INPUTS n key ...] [ARGS n arg ...] "
                    "[OUTPUTS m key ...] [TIMEOUT ms]", after_relays=True, ai=True),
        CommandSpec("AI.SCRIPTRUN", script.cmd_scriptrun, -1, _EXEC_FLAGS, 1, 1, 1, _AI,
                    "Runs a script function (deprecated 1.0 form of AI.SCRIPTEXECUTE).",
                    "AI.SCRIPTRUN key function [TIMEOUT ms] INPUTS key ... [$ key ...] OUTPUTS key ...",
                    after_relays=True, ai=True),
        CommandSpec("AI._SCRIPTSCAN", script.cmd_scriptscan, -1, ("readonly",), 0, 0, 0, _AI,
                    "Lists the scripts in the caller's database, whoever stored them (experimental).",
                    "AI._SCRIPTSCAN", after_relays=True, ai=True),
    )
})

# Commands the gate lets through before AUTH.
NO_AUTH_COMMANDS = frozenset({"AUTH", "HELLO", "QUIT", "RESET"})
