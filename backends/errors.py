"""One error root for every layer, and the catalogue of exact reply texts.

Clients match on these strings (RedisAI 1.2.7 and Redis wording), so every message lives here, once.
Only the connection turns an error into a ``-...`` RESP line.
"""

from __future__ import annotations

from typing import TypeGuard


class AIError(Exception):
    """An error that is answered to the client as ``-<message>``.

    ``message`` is the whole raw text after the ``-`` (it carries its own ``ERR``/``WRONGTYPE`` prefix, or none,
    exactly as RedisAI sends it).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def resp_text(self) -> str:
        """The text on the wire: CR and LF become spaces, as RedisAI's one-line errors do."""
        return self.message.replace("\r", " ").replace("\n", " ")


class ProtocolError(AIError):
    """A malformed or over-limit request: answered, then the connection is closed."""


# Store replies that say "not now", not "not that kind of key": passed through, never turned into WRONGTYPE.
_UNAVAILABLE_PREFIXES = ("LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "ERR backing store unavailable")


def raise_if_unavailable(*replies: object) -> None:
    """Raise a store reply that means the store cannot answer now (LOADING after a restart, a busy script …),
    so callers that map every other error value to WRONGTYPE do not tell clients their key is corrupt."""
    for reply in replies:
        if unavailable(reply):
            raise reply


def unavailable(reply: object) -> TypeGuard[AIError]:
    """Whether ``reply`` is an error value meaning the store cannot answer now (``raise_if_unavailable``)."""
    return isinstance(reply, AIError) and reply.message.startswith(_UNAVAILABLE_PREFIXES)


def wrong_arity(command_as_typed: str) -> AIError:
    """Redis's generic arity error, echoing the command name exactly as the client typed it."""
    return AIError(f"ERR wrong number of arguments for '{command_as_typed}' command")


def subscribed_context(command: str) -> AIError:
    """Redis 7's refusal of a command a RESP2 client sends while subscribed (``command``: its full name)."""
    return AIError(f"ERR Can't execute '{command}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET "
                   "are allowed in this context")


def unknown_command(name: str, args: list[str]) -> AIError:
    """Redis 7's unknown-command error, with the first arguments quoted as Redis does."""
    quoted = "".join(f"'{a}' " for a in args[:20])
    return AIError(f"ERR unknown command '{name}', with args beginning with: {quoted}")


def one_line(exc: BaseException) -> str:
    """An exception's text on one line, for an error reply (TorchScript and torch messages are multi-line
    tracebacks); every backend that wraps a runtime's exception uses this one. Byte for byte as RedisAI: a
    TorchScript compile error ends ``<--- HERE `` (its last newline became a space)."""
    text = str(exc).lstrip()  # torch starts some messages with a newline of its own
    if not text:
        return type(exc).__name__
    return text.replace("\r", " ").replace("\n", " ")  # RedisAI's RAI_Chomp: each CR/LF a space, the last one too


def parse_strict_int(raw: bytes | bytearray) -> int | None:
    """Redis ``string2ll``: optional ``-``, digits without leading zeros (``-0`` refused), int64 range.

    Here, at the bottom of every layer, so that the RESP parser, the command parsers and the tensor and DAG
    parsers read numbers with one and the same rule."""
    if len(raw) == 1:  # the usual count or size: one digit, no slicing or method calls (compiled: byte reads)
        digit = raw[0] - 48
        return digit if 0 <= digit <= 9 else None
    body = raw[1:] if raw[:1] == b"-" else raw
    if not body.isdigit() or (body[:1] == b"0" and (len(body) > 1 or raw[:1] == b"-")):
        return None
    value = int(raw)
    return value if -(2**63) <= value < 2**63 else None


# --- generic server messages (Redis wording) ---------------------------------------------------------------------
NOAUTH_MSG = "NOAUTH Authentication required."
HELLO_NOAUTH_MSG = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> "
    "<pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
)
WRONGPASS_MSG = "WRONGPASS invalid username-password pair or user is disabled."
AUTH_NOT_CONFIGURED_MSG = (
    "ERR AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)
SYNTAX_MSG = "ERR syntax error"
CLIENT_SUBCOMMAND_UNSUPPORTED_FMT = "ERR CLIENT {sub} is not supported by this server (client ids are its own)"
CLIENT_TRACKING_REDIRECT_MSG = "ERR CLIENT TRACKING REDIRECT is not supported by this server; use RESP3 tracking"
NOT_QUEUEABLE_FMT = "ERR {cmd} cannot be queued in MULTI by this server"
HELLO_IN_MULTI_MSG = "ERR HELLO cannot be queued inside MULTI by this server; send it before MULTI"
NOPROTO_MSG = "NOPROTO unsupported protocol version"
INVALID_PROTOVER_MSG = "ERR Protocol version is not an integer or out of range"
NOT_INTEGER_MSG = "ERR value is not an integer or out of range"
DB_INDEX_MSG = "ERR DB index is out of range"
CLIENT_NAME_SPACES_MSG = "ERR Client names cannot contain spaces, newlines or special characters."
NO_SUCH_CLIENT_MSG = "ERR No such client"
UNKNOWN_SUBCOMMAND_FMT = "ERR unknown subcommand '{sub}'. Try {cmd} HELP."
INVALID_COMMAND_GETKEYS_MSG = "ERR Invalid command specified"
NO_KEYS_MSG = "ERR The command has no key arguments"
INVALID_ARGS_GETKEYS_MSG = "ERR Invalid arguments specified for command"
INVALID_ARITY_GETKEYS_MSG = "ERR Invalid number of arguments specified for command"
SHUTTING_DOWN_MSG = "ERR Server is shutting down"
EMBEDDED_STORE_PRIVATE_FMT = ("ERR '{cmd}' is not allowed: the embedded store belongs to this server (run your own "
                              "Redis and use --redis-url to administer it)")
NO_SHUTDOWN_IN_PROGRESS_MSG = "ERR No shutdown in progress."
UPSTREAM_DOWN_MSG = "ERR backing store unavailable: {detail}"
# a tensor the store would refuse as a protocol error (and close the connection over): refused before it is sent
OVER_STORE_BULK_MSG = ("ERR Protocol error: invalid bulk length: the stored tensor would be {size} bytes, over the "
                       "store's proto-max-bulk-len of {limit}")
INTERNAL_MSG = "ERR internal error: {detail}"
PUBSUB_CONTEXT_FMT = (
    "ERR Can't execute '{cmd}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET "
    "are allowed in this context"
)
HELLO_OPTION_SYNTAX_FMT = "ERR Syntax error in HELLO option '{option}'"
UNRECOGNIZED_OPTION_FMT = "ERR Unrecognized option '{option}'"  # CLIENT SETINFO
CLIENT_SETINFO_CHARS_FMT = "ERR {attr} cannot contain spaces, newlines or special characters."  # attr: lib-name
UNKNOWN_CLIENT_TYPE_FMT = "ERR Unknown client type '{kind}'"
NO_SUCH_USER_FMT = "ERR No such user '{user}'"
CLIENT_ID_POSITIVE_MSG = "ERR client-id should be greater than 0"
# Ours: a MULTI/EXEC of our own (tensor and model writes) that the store did not run, with no queued error to tell.
TRANSACTION_ABORTED_MSG = "ERR transaction aborted"
# Ours: a relayed reply we could not rewrite (COMMAND merging ours in); written as a raw ``-`` line by the slot.
REPLY_MERGE_FAILED_FMT = "ERR internal error: cannot merge the store's reply ({kind})"
# Ours: the store refused CLIENT TRACKING, so the coherent cache stays off (logged, never a client's reply).
TRACKING_REFUSED_FMT = "the store refused client-side caching: {detail}"
# The first words of store errors we recognise (Redis wording).
STORE_WRONG_ARITY_PREFIX = "ERR wrong number of arguments"
STORE_UNKNOWN_COMMAND_PREFIX = "ERR unknown command"

# --- a Redis Cluster behind the server (server/store/cluster*.py) -----------------------------------------------
# Redis Cluster's own wording, where we answer for it:
CROSSSLOT_MSG = "CROSSSLOT Keys in request don't hash to the same slot"
CLUSTER_DISABLED_MSG = "ERR This instance has cluster support disabled"  # to our clients we are standalone
# A node's bare CLUSTERDOWN ("Hash slot not served", "The cluster is down": cluster_state:fail), which we
# complete: the slot when the command has keys, always the node asked
NODE_CLUSTERDOWN_FMT = "{message} (slot {slot}, asked {node})"
NODE_CLUSTERDOWN_KEYLESS_FMT = "{message} (asked {node})"
# Ours: no primary in our map for a slot; no node gave us the map; a URL naming another database.
UNSERVED_SLOT_FMT = "CLUSTERDOWN Hash slot not served (slot {slot} has no primary in the cluster's map)"
NO_TOPOLOGY_FMT = "CLUSTERDOWN no cluster node answered the topology query ({detail})"
CLUSTER_DB_FMT = "ERR a Redis Cluster has only database 0 (--redis-url names database {db})"
NESTED_MULTI_MSG = "ERR MULTI calls can not be nested"
INVALID_CURSOR_MSG = "ERR invalid cursor"
# The first words of the redirects a node answers (followed, never relayed).
MOVED_PREFIX = "MOVED "
ASK_PREFIX = "ASK "
CLUSTERDOWN_PREFIX = "CLUSTERDOWN"

# --- RESP protocol errors (Redis wording, connection is closed afterwards) --------------------------------------
PROTO_INVALID_MULTIBULK_MSG = "ERR Protocol error: invalid multibulk length"
PROTO_INVALID_BULK_MSG = "ERR Protocol error: invalid bulk length"
PROTO_EXPECTED_DOLLAR_FMT = "ERR Protocol error: expected '$', got '{got}'"
PROTO_BIG_INLINE_MSG = "ERR Protocol error: too big inline request"
PROTO_BIG_MBULK_MSG = "ERR Protocol error: too big mbulk count string"
PROTO_BIG_BULK_COUNT_MSG = "ERR Protocol error: too big bulk count string"
PROTO_UNBALANCED_QUOTES_MSG = "ERR Protocol error: unbalanced quotes in request"
PROTO_QUERYBUF_MSG = "ERR Protocol error: query buffer limit exceeded"
PROTO_UNAUTH_MULTIBULK_MSG = "ERR Protocol error: unauthenticated multibulk length"
PROTO_UNAUTH_BULK_MSG = "ERR Protocol error: unauthenticated bulk length"

# --- RedisAI 1.2.7's messages, byte for byte (clients match on them) ---------------------------------------------
WRONGTYPE_MSG = "WRONGTYPE Operation against a key holding the wrong kind of value"

# --- models and devices (AI.MODELSTORE/GET/DEL/EXECUTE, AI.MODELSET/RUN) ----------------------------------------
INVALID_DEVICE_MSG = "ERR Invalid DEVICE"
UNSUPPORTED_BACKEND_MSG = "ERR unsupported backend"
COULD_NOT_LOAD_BACKEND_MSG = "ERR Could not load backend"
UNSUPPORTED_DEVICE_MSG = "ERR unsupported device"
MODEL_KEY_EMPTY_MSG = "ERR model key is empty"
# ours: the model was stored again between the read of its metadata and of its blob, twice in a row
MODEL_CHANGED_MSG = "ERR model key changed while the model was being loaded, try again"
INVALID_BATCHSIZE_MSG = "ERR Invalid argument for BATCHSIZE"
INVALID_MINBATCHSIZE_MSG = "ERR Invalid argument for MINBATCHSIZE"
INVALID_MINBATCHTIMEOUT_MSG = "ERR Invalid argument for MINBATCHTIMEOUT"
MINBATCHSIZE_WITHOUT_BATCHSIZE_MSG = "ERR MINBATCHSIZE specified without BATCHSIZE"
MINBATCHTIMEOUT_WITHOUT_MINBATCHSIZE_MSG = "ERR MINBATCHTIMEOUT specified without MINBATCHSIZE"
MINBATCHTIMEOUT_WITHOUT_BATCHSIZE_MSG = "ERR MINBATCHTIMEOUT specified without BATCHSIZE"
TFLITE_NO_BATCHING_MSG = "ERR Auto-batching not supported by the TFLITE backend"
MISSING_BLOB_MSG = "ERR Insufficient arguments, missing model BLOB"
TF_INPUTS_MISSING_MSG = "ERR INPUTS not specified for TF"
TF_OUTPUTS_MISSING_MSG = "ERR OUTPUTS not specified for TF"
TF_NO_INPUTS_OUTPUTS_MSG = "ERR Insufficient arguments, INPUTS and OUTPUTS not specified"
INVALID_INPUT_COUNT_MSG = "ERR Invalid argument for input_count"
INVALID_OUTPUT_COUNT_MSG = "ERR Invalid argument for output_count"
MODEL_INPUTS_MISMATCH_ARGS_MSG = "ERR number of model inputs does not match the number of given arguments"
MODEL_OUTPUTS_MISMATCH_ARGS_MSG = "ERR number of model outputs does not match the number of given arguments"
EXPECTED_BLOB_MSG = "ERR Invalid argument, expected BLOB"
INPUTS_NOT_FOR_BACKEND_MSG = "ERR INPUTS argument should not be specified for this backend"
INPUTS_NOT_SPECIFIED_MSG = "ERR INPUTS not specified"
OUTPUTS_NOT_SPECIFIED_MSG = "ERR OUTPUTS not specified"
INPUT_COUNT_POSITIVE_MSG = "ERR Input count must be a positive integer"
OUTPUT_COUNT_POSITIVE_MSG = "ERR Output count must be a positive integer"
INPUTS_COUNT_MISMATCH_MSG = "Number of keys given as INPUTS here does not match model definition"
OUTPUTS_COUNT_MISMATCH_MSG = "Number of keys given as OUTPUTS here does not match model definition"
INPUT_KEYS_MISMATCH_FMT = "ERR number of input keys to {cmd} command does not match the number of given arguments"
OUTPUT_KEYS_MISMATCH_FMT = "ERR number of output keys to {cmd} command does not match the number of given arguments"
INVALID_ARGUMENT_FMT = "Invalid argument: {arg}"
NO_TIMEOUT_VALUE_MSG = "ERR No value provided for TIMEOUT"
INVALID_TIMEOUT_MSG = "ERR Invalid value for TIMEOUT"
IN_TRANSACTION_MSG = "ERR Cannot run RedisAI command within a transaction or a LUA script"
TENSOR_KEY_EMPTY_MSG = "ERR tensor key is empty or in a different shard"
# AI.TENSORGET … VALUES of a tensor over --tensorget-values-max elements: one reply of tens of millions of numbers
# formatted on the event loop would stall every other client for seconds and take GBs (BLOB costs neither)
TENSORGET_VALUES_OVER_MSG = ("ERR tensor has {count} elements, over --tensorget-values-max ({limit}) for VALUES; "
                             "ask for BLOB")
BATCH_SIZE_MISMATCH_MSG = "ERR Model did not generate the expected batch size"
GPU_NOT_AVAILABLE_FMT = "GPU requested but {backend} couldn't find CUDA"
# RedisAI's backends answer these as they are: Torch without ERR (models and scripts), ONNX with it.
TORCH_GPU_NOT_AVAILABLE_MSG = GPU_NOT_AVAILABLE_FMT.format(backend="Torch")
ONNX_GPU_NOT_AVAILABLE_MSG = "ERR " + GPU_NOT_AVAILABLE_FMT.format(backend="ONNX")
TF_GPU_NOT_AVAILABLE_MSG = "ERR " + GPU_NOT_AVAILABLE_FMT.format(backend="TF")
TF_INPUT_NODE_NOT_FOUND_FMT = 'ERR Input node named "{name}" not found in TF graph.'  # sic: period, unlike outputs
TF_OUTPUT_NODE_NOT_FOUND_FMT = 'ERR Output node named "{name}" not found in TF graph'
TF_INVALID_GRAPHDEF_MSG = "Invalid GraphDef"  # TF's C API text (no ERR)
TF_INPUT_TYPE_FMT = "Expects arg[{index}] to be {expected} but {given} is provided"  # TF's executor text
# TFLite's texts, as RedisAI's libtflite_c sets them (no ERR).
TFLITE_LOAD_FAILED_MSG = "Failed to load model from buffer"
TFLITE_ALLOCATE_FAILED_MSG = "Failed to allocate tensors"
TFLITE_RESIZE_FAILED_MSG = "Failed to resize input tensors"
TFLITE_INVOKE_FAILED_MSG = "Failed to invoke TfLite"
TFLITE_INPUT_COUNT_MSG = "Inconsistent number of inputs"
TFLITE_INPUT_TYPE_MSG = "Input tensor type doesn't match the type expected by the model definition"
TFLITE_HALF_INPUT_MSG = "Float16 not currently supported as input tensor data type"
TFLITE_HALF_OUTPUT_MSG = "Float16 not currently supported as output tensor data type"
TFLITE_INPUT_DTYPE_MSG = "Unsupported input data type"
TFLITE_OUTPUT_DTYPE_MSG = "Unsupported output data type"
TIMEDOUT_STATUS = "TIMEDOUT"
# (MODEL_OUTPUT_COUNT_MSG, shared with redisAI.model_execute in scripts, is in the scripts section below.)
# RedisAI hard-codes these names (upper case whatever the client typed), unlike Redis's wrong_arity().
MODELEXECUTE_ARITY_MSG = "ERR wrong number of arguments for 'AI.MODELEXECUTE' command"
MODELRUN_ARITY_MSG = "ERR wrong number of arguments for 'AI.MODELRUN' command"
# A runtime's own exception text, on one line and as it is: RedisAI's backends reply with the message alone
# (torch's exception text; ONNX Runtime's status message, without the Python binding's
# "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : " prefix).
BACKEND_ERROR_FMT = "{detail}"
# Ours, not RedisAI's: a TorchScript model whose result is not tensors (or lists/tuples of them).
MODEL_OUTPUT_TYPE_FMT = "ERR model returned an unsupported output type: {kind}"
# Ours: onnxruntime's Python binding takes and gives STRING elements as Python text (UTF-8 both ways).
ONNX_STRING_NOT_UTF8_MSG = "ERR ONNX string tensors must hold UTF-8 text"
# Ours: an unexpected exception inside a DAG op (a bug or a runtime's non-AIError), answered for that op.
OP_FAILED_FMT = "ERR {kind}: {detail}"

# --- AI.CONFIG and AI.INFO -------------------------------------------------------------------------------------
CONFIG_UNSUPPORTED_SUBCOMMAND_MSG = "ERR unsupported subcommand"
CONFIG_LOAD_BACKEND_FAILED_MSG = "ERR error loading backend"
CONFIG_BACKENDSPATH_MISSING_MSG = "ERR BACKENDSPATH: missing path argument"
CONFIG_CHUNK_SIZE_MISSING_MSG = "ERR MODEL_CHUNK_SIZE: missing chunk size"
CONFIG_CHUNK_SIZE_INVALID_MSG = "ERR MODEL_CHUNK_SIZE: invalid chunk size"
INFO_NO_RUN_INFO_MSG = "ERR cannot find run info for key"

# --- tensors (AI.TENSORSET / AI.TENSORGET) -----------------------------------------------------------------------
# (TENSOR_KEY_EMPTY_MSG, shared with the model commands, is in the section above.)
INVALID_DTYPE_MSG = "ERR invalid data type"
TENSOR_SHAPE_MSG = "ERR invalid or negative value found in tensor shape"
TENSOR_BLOB_ARITY_MSG = "ERR a single binary string should come after the BLOB argument in 'AI.TENSORSET' command"
TENSOR_VALUES_COUNT_MSG = "ERR wrong number of values was given in 'AI.TENSORSET' command"
TENSOR_DATA_LENGTH_MSG = "ERR data length does not match tensor shape and type"
TENSOR_BOOL_BLOB_MSG = "ERR BOOL tensor elements must be 0 or 1"
TENSOR_STRING_BLOB_MSG = "ERR Number of string elements in data blob does not match tensor length"
TENSOR_INVALID_VALUE_MSG = "ERR invalid value"
TENSOR_CSTRING_NULL_MSG = "ERR C-string value contains null character"
TENSOR_COULD_NOT_SAVE_MSG = "ERR could not save tensor"
TENSOR_FORMAT_MSG = "ERR unsupported data format"
TENSOR_BLOB_AND_VALUES_MSG = "ERR both BLOB and VALUES specified"
TENSOR_UNSUPPORTED_DTYPE_MSG = "ERR unsupported dtype"
TENSOR_CANNOT_GET_VALUES_MSG = "ERR cannot get values for this data type"
# RedisAI's own parser texts (no ERR): what a DAG op answers for a bad arity; standalone commands use wrong_arity().
TENSORSET_PARSER_ARITY_MSG = "wrong number of arguments for 'AI.TENSORSET' command"
TENSORGET_PARSER_ARITY_MSG = "wrong number of arguments for 'AI.TENSORGET' command"
# Ours, not RedisAI's: limits RedisAI never checks (it would crash or allocate without bound).
TENSOR_TOO_MANY_DIMS_MSG = "ERR tensor has more than 64 dimensions"

# --- DAGs (AI.DAGEXECUTE[_RO], AI.DAGRUN[_RO]) ------------------------------------------------------------------
DAG_MISSING_ARGS_FMT = "ERR missing arguments for '{cmd}' command"
DAG_WRONG_ARITY_FMT = "ERR wrong number of arguments for '{cmd}' command"
DAG_LOAD_MISSING_ARGS_MSG = "ERR missing arguments after LOAD keyword in DAG command"
DAG_LOAD_COUNT_MSG = "ERR invalid or negative value found in number of keys to LOAD"
DAG_LOAD_MISMATCH_MSG = "ERR number of keys to LOAD into DAG does not match the number of given arguments"
DAG_PERSIST_RO_MSG = "ERR PERSIST cannot be specified in a read-only DAG"
DAG_PERSIST_MISSING_ARGS_MSG = "ERR missing arguments after PERSIST keyword in DAG command"
DAG_PERSIST_COUNT_MSG = "ERR invalid or negative value found in number of keys to PERSIST"
DAG_PERSIST_UNIQUE_MSG = "ERR PERSIST keys must be unique"
DAG_PERSIST_MISMATCH_MSG = (
    "ERR number of keys to PERSIST after DAG execution does not match the number of given arguments"
)
DAG_KEYS_MISSING_ARGS_MSG = "ERR missing arguments after KEYS keyword in DAG command"
DAG_KEYS_COUNT_MSG = "ERR invalid or negative value found in number of KEYS"
DAG_KEYS_MISMATCH_MSG = "ERR number of KEYS does not match the number of given arguments"
DAG_ROUTING_MISSING_MSG = "ERR Missing ROUTING value"
DAG_UNEXPECTED_ARG_FMT = "ERR Invalid DAG command. Unexpected argument:  {arg}"
DAG_NEEDS_KEYWORD_MSG = (
    "ERR AI.DAGEXECUTE and AI.DAGEXECUTE_RO commands must contain at least one out of ROUTING, LOAD, PERSIST keywords"
)
DAG_EMPTY_MSG = "ERR DAG is empty"
DAG_UNSUPPORTED_OP_MSG = "Unsupported command within DAG"
DAG_TIMEOUT_IN_OP_MSG = "ERR TIMEOUT not allowed within a DAG command"
DAG_SCRIPTEXECUTE_RO_MSG = "ERR AI.SCRIPTEXECUTE command cannot be specified in a read-only DAG"
DAG_DEPRECATED_IN_EXECUTE_FMT = "Deprecated {op} cannot be used in AI.DAGEXECUTE command"
DAG_NEW_IN_DAGRUN_FMT = "{op} cannot be used in a deprecated AI.DAGRUN command"
DAG_INPUT_NOT_FOUND_MSG = "ERR INPUT key cannot be found in DAG"
DAG_PERSIST_NOT_FOUND_MSG = "ERR PERSIST key cannot be found in DAG"
NA_STATUS = "NA"

# --- scripts (AI.SCRIPTSTORE/GET/DEL/EXECUTE, AI.SCRIPTSET/RUN) -----------------------------------------------------
# (WRONGTYPE_MSG, TENSOR_KEY_EMPTY_MSG, INVALID_TIMEOUT_MSG, UNSUPPORTED_DEVICE_MSG, COULD_NOT_LOAD_BACKEND_MSG and
# GPU_NOT_AVAILABLE_FMT above are shared with the scripts.)
SCRIPT_KEY_EMPTY_MSG = "ERR script key is empty"
SCRIPT_CHANGED_MSG = "ERR script key changed while the script was being loaded, try again"  # ours, as above
SCRIPT_MISSING_ENTRY_POINTS_MSG = "ERR Insufficient arguments, missing script entry points"
SCRIPT_ENTRY_POINTS_COUNT_MSG = "ERR Non numeric entry points number provided to AI.SCRIPTSTORE command"
SCRIPT_MISSING_SOURCE_MSG = "ERR Insufficient arguments, missing script SOURCE"
ENTRY_POINT_MISSING_FMT = "Function {fn} does not exist in the given script."
ENTRY_POINT_ARITY_FMT = "Wrong number of inputs in function {fn}. Expected 3 but was {n}"
ENTRY_POINT_TYPES_FMT = (
    "Wrong inputs type in function {fn}. Expected signature similar to: "
    "def {fn}(tensors: List[Tensor], keys: List[str], args: List[str])"
)
SCRIPTEXECUTE_ARITY_MSG = "ERR wrong number of arguments for 'AI.SCRIPTEXECUTE' command"
SCRIPTRUN_ARITY_MSG = "ERR wrong number of arguments for 'AI.SCRIPTRUN' command"
SCRIPTEXECUTE_FIRST_SCOPE_MSG = "ERR KEYS or INPUTS scope must be provided first for AI.SCRIPTEXECUTE command"
KEYS_MISSING_ARGS_MSG = "ERR Missing arguments after KEYS keyword"
KEYS_INVALID_COUNT_MSG = "ERR Invalid or negative value found in number of KEYS"
KEYS_COUNT_MISMATCH_MSG = (
    "ERR Number of pre declared KEYS to be used in the command does not match the number of given arguments"
)
SCRIPTEXECUTE_MISSING_COUNT_MSG = "ERR Invalid arguments provided to AI.SCRIPTEXECUTE"
SCRIPTEXECUTE_INPUTS_COUNT_MSG = "ERR Invalid argument for inputs count in AI.SCRIPTEXECUTE"
SCRIPTEXECUTE_ARGS_COUNT_MSG = "ERR Invalid argument for keys count in AI.SCRIPTEXECUTE"  # sic: the ARGS count
SCRIPTEXECUTE_OUTPUTS_COUNT_MSG = "ERR Invalid argument for outputs count in AI.SCRIPTEXECUTE"
SCRIPTEXECUTE_SCOPE_MISMATCH_FMT = (
    "ERR number of {scope} to AI.SCRIPTEXECUTE command does not match the number of given arguments"
)
SCRIPTEXECUTE_DUPLICATE_SCOPE_FMT = "ERR Already Encountered {scope} scope in AI.SCRIPTEXECUTE command"
SCRIPTEXECUTE_NO_TIMEOUT_VALUE_MSG = "ERR No value provided for TIMEOUT in AI.SCRIPTEXECUTE"
SCRIPTEXECUTE_TRAILING_MSG = "ERR Encountered problem parsing AI.SCRIPTEXECUTE"
SCRIPTEXECUTE_UNEXPECTED_FMT = "ERR Invalid AI.SCRIPTEXECUTE command. Unexpected argument: {arg}"
SCRIPTRUN_TIMEOUT_TWICE_MSG = "ERR Already encountered an TIMEOUT section in SCRIPTRUN"
SCRIPTRUN_INPUTS_SECTION_MSG = "ERR Already encountered an INPUTS section in SCRIPTRUN"
SCRIPTRUN_INPUTS_KEYWORD_MSG = "ERR Already encountered an INPUTS keyword in SCRIPTRUN"
SCRIPTRUN_OUTPUTS_KEYWORD_MSG = "ERR Already encountered an OUTPUTS keyword in SCRIPTRUN"
SCRIPTRUN_VARIADIC_OUTSIDE_MSG = "ERR Encountered a variable size list of tensors outside of input section"
SCRIPTRUN_VARIADIC_TWICE_MSG = "ERR Already encountered a variable size list of tensors"
SCRIPTRUN_UNRECOGNIZED_MSG = "ERR Unrecongnized parameter to SCRIPTRUN"  # sic
# Run time (no ERR: TorchScript's own texts in RedisAI).
FUNCTION_MISSING_FMT = "Function does not exist: {fn}"
FUNCTION_TOO_FEW_INPUTS_FMT = "Wrong number of inputs provided to function: {fn}"
FUNCTION_INPUT_TYPE_FMT = "Unsupported input type in function definition: {fn}"
FUNCTION_NON_TENSOR_FMT = "Function returned non-tensor values{fn}"  # sic: no separator
FUNCTION_OUTPUT_COUNT_FMT = "Function returned unexpected number of outputs - {fn}"
MODEL_OUTPUT_COUNT_MSG = "ERR Model did not generate the expected number of outputs"
# redis.execute: the store's error text, or strerror() where RedisAI's RM_Call refused the call itself.
REDIS_CALL_ERROR_FMT = "Redis command returned an error: {detail}"
REDIS_CALL_EINVAL = "Invalid argument"
REDIS_CALL_ENOENT = "No such file or directory"
# Ours, not RedisAI's: calls a script cannot make here, and the bridge to the event loop failing.
REDIS_CALL_NOT_ALLOWED_MSG = "ERR This Redis command is not allowed from script"
SCRIPT_CALL_OUTSIDE_RUN_MSG = "ERR redis.execute and redisAI.model_execute only work inside a script run"
SCRIPT_CALL_ON_LOOP_MSG = "ERR a script cannot call the store from the event-loop thread"
SCRIPT_CALL_LOOP_GONE_MSG = "ERR the server is shutting down"
SCRIPT_CALL_TIMEOUT_MSG = "ERR timed out waiting for the store"
TENSOR_STRING_TOO_LARGE_MSG = "ERR STRING tensors are limited to {limit} elements by this server"
SCRIPT_NON_UTF8_MSG = "ERR script KEYS and ARGS must be UTF-8 text on this server"
SCRIPT_FORBIDDEN_OPS_FMT = "ERR script uses operations this server does not allow: {ops}"
SCRIPT_RUN_ABANDONED_MSG = "ERR the script run timed out and was given up"
CONFIG_SCRIPT_TIMEOUT_INVALID_MSG = "ERR SCRIPT_EXECUTION_TIMEOUT must be a non-negative integer (milliseconds)"

# --- stored graphs (AI.GRAPHSTORE/GET/DEL/EXECUTE, AI._GRAPHSCAN; ours, docs/commands-graphs.md) ---------------------
GRAPH_KEY_EMPTY_MSG = "ERR graph key is empty"
GRAPH_CHANGED_MSG = "ERR graph key changed while the graph was being loaded, try again"  # ours, as models'
GRAPH_OP_ERROR_FMT = "ERR graph op {op}: {detail}"
GRAPH_INPUT_TWICE_FMT = "ERR graph input '{name}' is declared twice"
GRAPH_DEFINED_TWICE_FMT = "'{name}' is already defined (graph names are single-assignment)"
GRAPH_UNDEFINED_FMT = "'{name}' is not defined (neither a graph input nor the output of an op)"
GRAPH_CYCLE_MSG = "the graph has a cycle through this op"
GRAPH_OUTPUT_UNDEFINED_FMT = "ERR graph output '{name}' is not produced by any op nor a graph input"
GRAPH_OUTPUT_TWICE_MSG = "ERR graph outputs must be unique"
GRAPH_NOT_A_GRAPH_OP_FMT = "{op} is not a graph op (AI.MODELEXECUTE, AI.SCRIPTEXECUTE, AI.TENSORSET)"
GRAPH_EMPTY_OP_MSG = "empty op"
GRAPH_DAMAGED_MSG = "ERR the stored graph is damaged (its compiled form cannot be read)"
GRAPH_FORMAT_FMT = "ERR the stored graph has format version {found}; this server reads version {known}"
GRAPH_STORE_ARITY_MSG = "ERR wrong number of arguments for 'AI.GRAPHSTORE' command"
GRAPH_STORE_SYNTAX_MSG = "ERR AI.GRAPHSTORE key [TAG tag] INPUTS n name... OUTPUTS m name... |> op [|> op ...]"
GRAPH_COUNT_FMT = "ERR invalid {what} count"
GRAPH_COUNT_MISMATCH_FMT = "ERR the number of {what} names does not match the count"
GRAPH_NO_OPS_MSG = "ERR the graph has no ops"
GRAPH_EXECUTE_ARITY_MSG = "ERR wrong number of arguments for 'AI.GRAPHEXECUTE' command"
GRAPH_EXECUTE_SYNTAX_MSG = (
    "ERR AI.GRAPHEXECUTE key INPUTS n key... OUTPUTS m key... [TIMEOUT ms] [MODE COMPILED|INTERPRETED]"
)
GRAPH_BIND_COUNT_FMT = "ERR the graph has {expected} {what}, {given} given"
GRAPH_MODE_MSG = "ERR MODE must be COMPILED or INTERPRETED"
GRAPH_EXECUTE_UNEXPECTED_FMT = "ERR Invalid AI.GRAPHEXECUTE command. Unexpected argument: {arg}"
GRAPH_GET_FLAGS_MSG = "ERR AI.GRAPHGET key [META] [SOURCE]"
ERROR_PREFIX = "ERR "  # what op_error strips from an inner message before naming its op
