"""The command table, written out literally (CONTRIBUTING.md, *One command table*).

It drives dispatch, arity errors, ``COMMAND`` replies and docs/commands.md. Commands not listed here go
to the backing store verbatim. Each row is written by keyword (``command`` / ``ai_command``,
server/commands/spec.py); tests/unit/test_command_table.py checks every row against its handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from server.commands import (
    command_info,
    config,
    dag,
    generic,
    getkeys,
    graph,
    info,
    introspection,
    lifecycle,
    model,
    modules,
    script,
    store_log,
    tensor,
)
from server.commands.keyspecs import (
    DELETE,
    OVERWRITE,
    READ,
    READ_WRITE,
    ROUTE_ONLY,
    KeySpecRow,
    key_at,
    keys_after,
    unknown_keys,
)
from server.commands.spec import CommandSpec, ai_command, command

_CONNECTION = "connection"
_SERVER = "server"
_EXEC_FLAGS = ("write", "denyoom", "movablekeys")
_ONE_KEY = (1, 1, 1)  # (first, last, step): the key is the first argument
_OWN_KEY = key_at(1, READ)  # the model, script or graph a run command names
_READS_KEY, _WRITES_KEY, _DELETES_KEY = (_OWN_KEY,), (key_at(1, OVERWRITE),), (key_at(1, DELETE),)
_OP_KEYS = "The model and script keys the ops run"

_ELEMENTS = "O(N) where N is the number of elements in the tensor"
_BLOB = "O(N) where N is the size of the blob, plus the time to load the model (it is loaded when stored)"
_BLOB_OUT = "O(N) where N is the size of the blob (O(1) with META only)"
_SOURCE = "O(N) where N is the length of the source, plus the time to compile it (it is compiled when stored)"
_RUN = "The run time of the model or script, plus O(N) in the size of the input and output tensors"
_DAG = "The run time of every op, plus O(N) in the size of the tensors loaded and persisted"
_SCAN = "O(N) where N is the number of keys in the database"


def _io_specs(startfrom: int) -> tuple[KeySpecRow, ...]:
    """The object key, then ``INPUTS n key...`` read and ``OUTPUTS m key...`` written."""
    return (_OWN_KEY, keys_after(b"INPUTS", startfrom, READ), keys_after(b"OUTPUTS", startfrom, OVERWRITE))


def _dag_specs(*, persist: bool) -> tuple[KeySpecRow, ...]:
    """A DAG's header keys (LOAD read, PERSIST written, KEYS and ROUTING only routed), then its ops' keys."""
    written = (keys_after(b"PERSIST", 1, OVERWRITE),) if persist else ()
    return (keys_after(b"LOAD", 1, READ), *written, keys_after(b"KEYS", 1, ROUTE_ONLY),
            keys_after(b"ROUTING", 1, ROUTE_ONLY, lastkey=0),
            unknown_keys(READ, _OP_KEYS))

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
                usage="CLIENT SETNAME|GETNAME|SETINFO|ID|INFO|LIST|KILL ...", after_relays=True),
        command("INFO", introspection.cmd_info, arity=-1, flags=("loading", "stale"), group=_SERVER,
                summary="Information and statistics about the server and its store.", usage="INFO [section ...]",
                after_relays=True),
        command("SHUTDOWN", lifecycle.cmd_shutdown, arity=-1, flags=("admin", "noscript", "loading", "stale"),
                group=_SERVER, summary="Stops this server gracefully (and the embedded store with it).",
                usage="SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]"),
        command("MODULE", modules.cmd_module, arity=-2, flags=("admin", "noscript"), group=_SERVER,
                summary="MODULE LIST shows RedisAI's module, ai; other subcommands are the store's.",
                usage="MODULE LIST | HELP | LOAD path [arg ...] | LOADEX path ... | UNLOAD name"),
        command("COMMAND", command_info.cmd_command, arity=-1, flags=("loading", "stale"), group=_SERVER,
                summary="Details about commands: ours and the store's.",
                usage="COMMAND [COUNT | INFO [name ...] | DOCS [name ...] | GETKEYS cmd args ... | GETKEYSANDFLAGS cmd "
                      "args ... | LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]]"),
        ai_command("AI.TENSORSET", tensor.cmd_tensorset, flags=("write", "denyoom"), keys=_ONE_KEY,
                   key_specs=_WRITES_KEY, since="1.0.0", complexity=_ELEMENTS,
                   summary="Stores a tensor (dtype, shape, and data or zeros) under a key.",
                   usage="AI.TENSORSET key type [dim ...] [BLOB data | VALUES value [value ...]]",
                   after_relays=True),
        ai_command("AI.TENSORGET", tensor.cmd_tensorget, flags=("readonly",), keys=_ONE_KEY,
                   key_specs=_READS_KEY, since="1.0.0", complexity=_ELEMENTS,
                   summary="Returns a tensor's dtype and shape, and its data as a blob or as values.",
                   usage="AI.TENSORGET key [META] [BLOB | VALUES]", after_relays=True),
        ai_command("AI.MODELSTORE", store_log.cmd_modelstore, flags=("write", "denyoom"), keys=_ONE_KEY,
                   key_specs=_WRITES_KEY, complexity=_BLOB,
                   summary="Stores a TorchScript, ONNX, TF or TFLite model under a key.",
                   usage="AI.MODELSTORE key backend device [TAG tag] [BATCHSIZE n [MINBATCHSIZE m "
                         "[MINBATCHTIMEOUT t]]] [INPUTS n name ... OUTPUTS m name ...] BLOB chunk ...",
                   after_relays=True),
        ai_command("AI.MODELSET", store_log.cmd_modelset, flags=("write", "denyoom"), keys=_ONE_KEY,
                   key_specs=_WRITES_KEY, since="1.0.0", complexity=_BLOB, replaced_by="AI.MODELSTORE",
                   summary="Stores a model (deprecated 1.0 form of AI.MODELSTORE).",
                   usage="AI.MODELSET key backend device [TAG tag] [BATCHSIZE n [MINBATCHSIZE m "
                         "[MINBATCHTIMEOUT t]]] [INPUTS name ... OUTPUTS name ...] BLOB chunk ...",
                   after_relays=True),
        ai_command("AI.MODELGET", model.cmd_modelget, flags=("readonly",), keys=_ONE_KEY,
                   key_specs=_READS_KEY, since="1.0.0", complexity=_BLOB_OUT,
                   summary="Returns a model's metadata and/or blob.", usage="AI.MODELGET key [META] [BLOB]",
                   after_relays=True),
        ai_command("AI.MODELDEL", model.cmd_modeldel, flags=("write",), keys=_ONE_KEY, key_specs=_DELETES_KEY,
                   since="1.0.0", complexity="O(1)", summary="Deletes a model.", usage="AI.MODELDEL key",
                   after_relays=True),
        ai_command("AI.MODELEXECUTE", model.cmd_modelexecute, flags=_EXEC_FLAGS, keys=_ONE_KEY,
                   key_specs=_io_specs(2), find_keys=getkeys.modelexecute_keys, complexity=_RUN,
                   summary="Runs a model on input tensors and stores the output tensors.",
                   usage="AI.MODELEXECUTE key INPUTS n key ... OUTPUTS m key ... [TIMEOUT ms]", after_relays=True),
        ai_command("AI.MODELRUN", model.cmd_modelrun, flags=_EXEC_FLAGS, keys=_ONE_KEY,
                   key_specs=(_OWN_KEY, unknown_keys(READ, "The INPUTS, up to OUTPUTS"),
                              keys_after(b"OUTPUTS", 2, OVERWRITE, lastkey=-1)),
                   find_keys=getkeys.modelrun_keys, since="1.0.0", complexity=_RUN, replaced_by="AI.MODELEXECUTE",
                   summary="Runs a model (deprecated 1.0 form of AI.MODELEXECUTE).",
                   usage="AI.MODELRUN key [TIMEOUT ms] INPUTS key ... OUTPUTS key ...", after_relays=True),
        ai_command("AI._MODELSCAN", model.cmd_modelscan, flags=("readonly",), complexity=_SCAN,
                   summary="Lists the models in the caller's database, whoever stored them (experimental).",
                   usage="AI._MODELSCAN", after_relays=True),
        ai_command("AI.DAGEXECUTE", dag.cmd_dagexecute, flags=_EXEC_FLAGS, key_specs=_dag_specs(persist=True),
                   find_keys=getkeys.dagexecute_keys, complexity=_DAG,
                   summary="Runs a DAG of tensor, model and script ops, across devices.",
                   usage="AI.DAGEXECUTE [LOAD n key ...] [PERSIST n key ...] [KEYS n key ...] [ROUTING key] "
                         "[TIMEOUT ms] |> op [|> op ...]", after_relays=True),
        ai_command("AI.DAGEXECUTE_RO", dag.cmd_dagexecute_ro, flags=("readonly", "movablekeys"),
                   key_specs=_dag_specs(persist=False), find_keys=getkeys.dagexecute_ro_keys, complexity=_DAG,
                   summary="Runs a read-only DAG (no PERSIST, no scripts).",
                   usage="AI.DAGEXECUTE_RO [LOAD n key ...] [KEYS n key ...] [ROUTING key] [TIMEOUT ms] "
                         "|> op [|> op ...]",
                   after_relays=True),
        ai_command("AI.DAGRUN", dag.cmd_dagrun, flags=_EXEC_FLAGS, key_specs=_dag_specs(persist=True),
                   find_keys=getkeys.dagrun_keys, since="1.0.0", complexity=_DAG, replaced_by="AI.DAGEXECUTE",
                   summary="Runs a DAG (deprecated 1.0 form: MODELRUN and SCRIPTRUN ops).",
                   usage="AI.DAGRUN [LOAD n key ...] [PERSIST n key ...] [TIMEOUT ms] |> op [|> op ...]",
                   after_relays=True),
        ai_command("AI.DAGRUN_RO", dag.cmd_dagrun_ro, flags=("readonly", "movablekeys"),
                   key_specs=_dag_specs(persist=False), find_keys=getkeys.dagrun_ro_keys, since="1.0.0",
                   complexity=_DAG, replaced_by="AI.DAGEXECUTE_RO",
                   summary="Runs a read-only DAG (deprecated 1.0 form).",
                   usage="AI.DAGRUN_RO [LOAD n key ...] [TIMEOUT ms] |> op [|> op ...]", after_relays=True),
        ai_command("AI.GRAPHSTORE", store_log.cmd_graphstore, flags=("write", "denyoom", "movablekeys"),
                   keys=_ONE_KEY, key_specs=(key_at(1, OVERWRITE), unknown_keys(READ, _OP_KEYS)),
                   find_keys=getkeys.graphstore_keys, complexity="O(N) in the number of ops",
                   summary="Validates and compiles a DAG of model, script and constant ops once; stores it as a graph.",
                   usage="AI.GRAPHSTORE key [TAG tag] INPUTS n name ... OUTPUTS m name ... |> op [|> op ...]",
                   after_relays=True),
        ai_command("AI.GRAPHEXECUTE", graph.cmd_graphexecute, flags=_EXEC_FLAGS, keys=_ONE_KEY,
                   key_specs=_io_specs(2), find_keys=getkeys.graphexecute_keys, complexity=_DAG,
                   summary="Runs a stored graph on input keys and stores its outputs (compiled, or interpreted).",
                   usage="AI.GRAPHEXECUTE key INPUTS n key ... OUTPUTS m key ... [TIMEOUT ms] "
                         "[MODE (COMPILED | INTERPRETED)]", after_relays=True),
        ai_command("AI.GRAPHGET", graph.cmd_graphget, flags=("readonly",), keys=_ONE_KEY, key_specs=_READS_KEY,
                   complexity="O(N) in the size of the graph",
                   summary="Returns a stored graph's metadata and compiled form, and/or its source.",
                   usage="AI.GRAPHGET key [META] [SOURCE]", after_relays=True),
        ai_command("AI.GRAPHDEL", graph.cmd_graphdel, flags=("write",), keys=_ONE_KEY, key_specs=_DELETES_KEY,
                   complexity="O(1)", summary="Deletes a stored graph.", usage="AI.GRAPHDEL key",
                   after_relays=True),
        ai_command("AI._GRAPHSCAN", graph.cmd_graphscan, flags=("readonly",), complexity=_SCAN,
                   summary="Lists the graphs in the caller's database, whoever stored them (experimental).",
                   usage="AI._GRAPHSCAN", after_relays=True),
        ai_command("AI.INFO", info.cmd_aiinfo, flags=("readonly",), keys=_ONE_KEY, key_specs=_READS_KEY,
                   since="1.0.0", complexity="O(1)",
                   summary="Returns a model's, script's or graph's run statistics, or resets them.",
                   usage="AI.INFO key [RESETSTAT]", after_relays=True),
        ai_command("AI.CONFIG", config.cmd_config, flags=("write",), since="1.0.0",
                   complexity="O(1); LOADBACKEND: the time to import the backend; PRELOAD: the time to load the models",
                   summary="Sets or gets RedisAI's run-time settings; loads a backend.",
                   usage="AI.CONFIG BACKENDSPATH path | LOADBACKEND backend path | MODEL_CHUNK_SIZE bytes "
                         "| PRELOAD pattern | GET name",
                   after_relays=True),  # LOADBACKEND and PRELOAD return a coroutine (the loads run off the loop)
        ai_command("AI.SCRIPTSTORE", store_log.cmd_scriptstore, flags=("write", "denyoom"), keys=_ONE_KEY,
                   key_specs=_WRITES_KEY, complexity=_SOURCE,
                   summary="Stores a TorchScript script (its source and entry points) under a key.",
                   usage="AI.SCRIPTSTORE key device [TAG tag] ENTRY_POINTS n function ... SOURCE script",
                   after_relays=True),
        ai_command("AI.SCRIPTSET", store_log.cmd_scriptset, flags=("write", "denyoom"), keys=_ONE_KEY,
                   key_specs=_WRITES_KEY, since="1.0.0", complexity=_SOURCE, replaced_by="AI.SCRIPTSTORE",
                   summary="Stores a script (deprecated 1.0 form of AI.SCRIPTSTORE).",
                   usage="AI.SCRIPTSET key device [TAG tag] SOURCE script", after_relays=True),
        ai_command("AI.SCRIPTGET", script.cmd_scriptget, flags=("readonly",), keys=_ONE_KEY, key_specs=_READS_KEY,
                   since="1.0.0", complexity="O(N) in the length of the source",
                   summary="Returns a script's metadata and/or source.", usage="AI.SCRIPTGET key [META] [SOURCE]",
                   after_relays=True),
        ai_command("AI.SCRIPTDEL", script.cmd_scriptdel, flags=("write",), keys=_ONE_KEY, key_specs=_DELETES_KEY,
                   since="1.0.0", complexity="O(1)", summary="Deletes a script.", usage="AI.SCRIPTDEL key",
                   after_relays=True),
        ai_command("AI.SCRIPTEXECUTE", script.cmd_scriptexecute, flags=_EXEC_FLAGS, keys=_ONE_KEY,
                   key_specs=(_OWN_KEY, keys_after(b"KEYS", 3, READ_WRITE), *_io_specs(3)[1:]),
                   find_keys=getkeys.scriptexecute_keys, complexity=_RUN,
                   summary="Runs a script function on input tensors, keys and arguments; stores the output tensors.",
                   usage="AI.SCRIPTEXECUTE key function [KEYS n key ...] [INPUTS n key ...] [ARGS n arg ...] "
                         "[OUTPUTS m key ...] [TIMEOUT ms]", after_relays=True),
        ai_command("AI.SCRIPTRUN", script.cmd_scriptrun, flags=_EXEC_FLAGS, keys=_ONE_KEY,
                   key_specs=(_OWN_KEY, unknown_keys(READ, "The INPUTS, and those after $"),
                              unknown_keys(OVERWRITE, "The OUTPUTS")),
                   find_keys=getkeys.scriptrun_keys, since="1.0.0", complexity=_RUN, replaced_by="AI.SCRIPTEXECUTE",
                   summary="Runs a script function (deprecated 1.0 form of AI.SCRIPTEXECUTE).",
                   usage="AI.SCRIPTRUN key function [TIMEOUT ms] INPUTS key ... [$ key ...] OUTPUTS key ...",
                   after_relays=True),
        ai_command("AI._SCRIPTSCAN", script.cmd_scriptscan, flags=("readonly",), complexity=_SCAN,
                   summary="Lists the scripts in the caller's database, whoever stored them (experimental).",
                   usage="AI._SCRIPTSCAN", after_relays=True),
    )
})
