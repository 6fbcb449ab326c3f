"""The MULTI forms of the AI commands RedisAI lets a transaction queue (server/commands/queued.py).

RedisAI queues every non-blocking command (REDISAI-REFERENCE.md §0.4) and runs it at EXEC; the execution
commands answer ``ERR Cannot run RedisAI command within a transaction or a LUA script`` there. Here:

* AI.TENSORSET, AI.MODELSTORE/MODELSET, AI.SCRIPTSTORE/SCRIPTSET, AI.MODELDEL, AI.SCRIPTDEL, AI.INFO … RESETSTAT:
  their check-and-write script, run at EXEC. A model is built and a script compiled when the command is
  queued (it takes a thread); its errors, like every argument error, are answered at EXEC.
* AI.TENSORGET, AI.MODELGET, AI.SCRIPTGET, AI.INFO: their reads, run at EXEC, answered in the commands' own
  reply formats (TENSORGET's META / VALUES / BLOB shapes included) from what EXEC's reply holds.
* AI.CONFIG (but LOADBACKEND, which imports a runtime off the loop): applied or read at EXEC.

Each form takes the ``Client`` and argv, and returns a ``Queued`` (or a coroutine of one); an ``AIError`` it
raises is the command's answer at EXEC.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.errors import AIError, wrong_arity
from backends.objects import (
    MODEL_MARKER,
    MODEL_META_FIELDS,
    SCRIPT_MARKER,
    SCRIPT_META_FIELDS,
    decode_script_meta,
)
from backends.tensor import encode_tensor
from backends.tensor_args import build_tensor, parse_tensorset
from server.ai.stored import require_model
from server.commands import config, info, model, script, stored, tensor
from server.commands.model_args import parse_modelget_flags, parse_modelset, parse_modelstore
from server.commands.queued import Queued, answered, at_exec, reads
from server.commands.script_args import parse_scriptget_flags, parse_scriptset, parse_scriptstore
from server.protocol.reply import OK
from server.store.atomic import set_tensors_call

if TYPE_CHECKING:
    from server.commands.context import Client

QueueForm = Callable[["Client", list[bytes]], "Queued | Awaitable[Queued]"]


def _arity_error(argv: list[bytes]) -> AIError:
    return wrong_arity(argv[0].decode(errors="replace"))


def queue_tensorset(client: Client, argv: list[bytes]) -> Queued:
    """AI.TENSORSET: SET_TENSORS at EXEC (WRONGTYPE then, if the key holds something else); an argument error
    comes after the key's check, as outside MULTI."""
    if len(argv) < 4:
        raise _arity_error(argv)
    try:
        encoded = encode_tensor(build_tensor(parse_tensorset(argv)))
    except AIError as exc:
        problem = exc

        def after_the_check(replies: list[Any]) -> Any:
            tensor.check_tensor_or_missing(replies)
            raise problem

        return reads([argv[1]], tensor.tensor_probe(argv[1]), after_the_check)
    return Queued(set_tensors_call([argv[1]], [encoded], empty_is_free=False), lambda _reply: OK)


def queue_tensorget(client: Client, argv: list[bytes]) -> Queued:
    """AI.TENSORGET key [META] [BLOB | VALUES]: the header (META) or the value, read at EXEC."""
    if not 2 <= len(argv) <= 4:
        raise _arity_error(argv)
    key, fmt = argv[1], tensor.format_or_error(argv)
    if isinstance(fmt, AIError) or tensor.meta_only(fmt):
        return reads([key], tensor.meta_reads(key), lambda replies: tensor.meta_answer(fmt, replies))
    values_max = client.ctx.config.tensorget_values_max
    return reads([key], [(b"GET", key)], lambda replies: tensor.tensor_answer(fmt, replies[0], values_max))


def queue_modelget(client: Client, argv: list[bytes]) -> Queued:
    """AI.MODELGET key [META] [BLOB]: the model's fields, read at EXEC; chunked by MODEL_CHUNK_SIZE as it is then."""
    want_meta, want_blob = parse_modelget_flags(argv)
    key, ai = argv[1], client.ctx.ai

    def answer(replies: list[Any]) -> Any:
        values, exists = replies
        fields = values[: len(MODEL_META_FIELDS)] if isinstance(values, list) else values
        meta = require_model(ai.models.decode_meta(fields, exists))
        return model.modelget_reply(meta, values[-1], want_meta, want_blob, ai.settings.model_chunk_size)

    return reads([key], [(b"HMGET", key, *MODEL_META_FIELDS, b"blob"), (b"EXISTS", key)], answer)


def queue_scriptget(client: Client, argv: list[bytes]) -> Queued:
    """AI.SCRIPTGET key [META] [SOURCE]: the script's fields, read at EXEC."""
    want_meta, want_source = parse_scriptget_flags(argv)
    key = argv[1]

    def answer(replies: list[Any]) -> Any:
        values, exists = replies
        fields = values[: len(SCRIPT_META_FIELDS)] if isinstance(values, list) else values
        meta = decode_script_meta(fields, exists)
        if meta is None:
            raise AIError(msgs.SCRIPT_KEY_EMPTY_MSG)
        return script.scriptget_reply(meta, values[-1], want_meta, want_source)

    return reads([key], [(b"HMGET", key, *SCRIPT_META_FIELDS, b"source"), (b"EXISTS", key)], answer)


async def _queue_store(client: Client, prepare: Callable[[Client, Any], Awaitable[Any]], req: Any) -> Queued:
    """A model or script store: built now, written at EXEC by STORE_OBJECT; cached here once it was written."""
    write, done = await prepare(client, req)

    def answer(_reply: Any) -> Any:
        done()
        return OK

    return Queued(write, answer)


def _store_form(parse: Callable[[list[bytes]], Any], prepare: Callable[[Client, Any], Awaitable[Any]]) -> QueueForm:
    """AI.MODELSTORE/MODELSET, AI.SCRIPTSTORE/SCRIPTSET: parsed now (an error is the answer), then built."""
    def form(client: Client, argv: list[bytes]) -> Awaitable[Queued]:
        return _queue_store(client, prepare, parse(argv))

    return form


def _queue_delete(marker: bytes, empty_msg: str) -> QueueForm:
    """AI.MODELDEL / AI.SCRIPTDEL key: DELETE_OBJECT at EXEC (the right kind of object, or its error)."""
    def form(client: Client, argv: list[bytes]) -> Queued:
        if len(argv) != 2:
            raise _arity_error(argv)
        return Queued(stored.delete_call(client.keyspace(), argv[1], marker),
                      lambda reply: stored.deleted(client, argv[1], reply, empty_msg))

    return form


def queue_aiinfo(client: Client, argv: list[bytes]) -> Queued:
    """AI.INFO key [RESETSTAT]: the counters read (or zeroed) at EXEC."""
    if not 2 <= len(argv) <= 3:
        raise _arity_error(argv)
    keyspace, key = client.keyspace(), argv[1]
    if len(argv) == 3 and argv[2].upper() == b"RESETSTAT":
        return Queued(info.reset_call(keyspace, key), lambda _reply: OK)
    return reads([keyspace.stats_key(key)], info.stats_reads(keyspace, key),
                 lambda replies: info.info_answer(key, replies))


def queue_config(client: Client, argv: list[bytes]) -> Queued:
    """AI.CONFIG: applied (or read) at EXEC; LOADBACKEND, which must import a runtime off the loop, is refused."""
    req = config.parse_config(argv)
    if req.action == "LOADBACKEND":
        return answered(AIError(msgs.NOT_QUEUEABLE_FMT.format(cmd="AI.CONFIG LOADBACKEND")))
    ai = client.ctx.ai
    return at_exec(lambda: config.apply_config(ai, req))


FORMS: Mapping[str, QueueForm] = MappingProxyType({
    "AI.TENSORSET": queue_tensorset,
    "AI.TENSORGET": queue_tensorget,
    "AI.MODELSTORE": _store_form(parse_modelstore, model.prepare_store),
    "AI.MODELSET": _store_form(parse_modelset, model.prepare_store),
    "AI.MODELGET": queue_modelget,
    "AI.MODELDEL": _queue_delete(MODEL_MARKER, msgs.MODEL_KEY_EMPTY_MSG),
    "AI.SCRIPTSTORE": _store_form(parse_scriptstore, script.prepare_store),
    "AI.SCRIPTSET": _store_form(parse_scriptset, script.prepare_store),
    "AI.SCRIPTGET": queue_scriptget,
    "AI.SCRIPTDEL": _queue_delete(SCRIPT_MARKER, msgs.SCRIPT_KEY_EMPTY_MSG),
    "AI.INFO": queue_aiinfo,
    "AI.CONFIG": queue_config,
})
"""The AI commands a transaction queues, by name; the rest answer at EXEC with RedisAI's in-MULTI error
(execution commands) or ``ERR <command> cannot be queued in MULTI by this server``."""
