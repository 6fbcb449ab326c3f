"""Check-and-write in one server-side step: Lua scripts run by the store, so no other client's write can slip
between the key-type check and the write.

Usage: ``await keyspace.run_script(SET_TENSORS, keys, values)``; ``STORE_OBJECT`` / ``DELETE_OBJECT`` for models
and scripts. Every store loads them at start (SCRIPT LOAD); ``Keyspace.run_script`` sends EVALSHA and falls
back to EVAL (which loads it again) on NOSCRIPT, e.g. after the store restarted or SCRIPT FLUSH.

Why Lua and not MULTI/EXEC: a transaction cannot branch on what it reads, so the check had to be a separate
round trip before it, and two clients (or two servers) racing on one key could both pass the check and
both write: a model overwritten by a tensor, or the reverse. A script is atomic with its check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from backends import errors as msgs
from backends.objects import GRAPH_MARKER, MARKER_FIELD, MODEL_MARKER, SCRIPT_MARKER
from backends.tensor import (
    DTYPES_BY_CODE,
    FORMAT_VERSION,
    HEADER_SIZE,
    MAGIC,
    MAX_DIMS,
    STAMPED_PREFIX,
    UNSTAMPED_VERSION,
    TensorValue,
    stamped_prefix,
)


@dataclass(frozen=True, slots=True)
class StoreScript:
    """A Lua script and its SHA1 (EVALSHA's name for it)."""

    name: str
    source: bytes
    sha: bytes = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source).hexdigest().encode())


def _lua_bytes(data: bytes) -> str:
    """A Lua string literal of raw bytes (decimal escapes: the tensor magic is not UTF-8)."""
    return '"' + "".join(f"\\{b}" for b in data) + '"'


_WRONGTYPE: Final = f"redis.error_reply('{msgs.WRONGTYPE_MSG}')"

# Same rule as backends.tensor.looks_like_tensor: missing, empty, or a string that starts with our header. One
# GETRANGE answers most of it (a key of another type: its WRONGTYPE error, caught by pcall; EXISTS only for an
# empty answer where an empty string is not free), and the dtype codes are a string constant, so a call builds
# no table: every command and table a script makes costs the store ~1-5k instructions a call (docs/performance.md)
_DTYPE_CODES: Final = "".join("1" if code in DTYPES_BY_CODE else "0" for code in range(256))
_TENSOR_OR_FREE: Final = f"""
local function tensor_or_free(key, empty_is_free)
  local head = redis.pcall('GETRANGE', key, 0, {HEADER_SIZE - 1})
  if type(head) ~= 'string' then return false end
  if #head == 0 then return empty_is_free or redis.call('EXISTS', key) == 0 end
  if #head < {HEADER_SIZE} or string.sub(head, 1, 4) ~= {_lua_bytes(MAGIC)} then return false end
  local version = string.byte(head, 5)
  if version ~= {FORMAT_VERSION} and version ~= {UNSTAMPED_VERSION} then return false end
  return string.byte('{_DTYPE_CODES}', string.byte(head, 6) + 1) == 49
    and string.byte(head, 7) + 256 * string.byte(head, 8) <= {MAX_DIMS}
end
"""

STAT_FIELDS: Final = (b"calls", b"duration", b"samples", b"errors")
"""AI.INFO's counters: fields of the object's own hash, beside its metadata (backends/objects.py), so they
share the object's key: KEYS, SCAN, DBSIZE and RANDOMKEY show only the user's keys, a DEL of the object takes
them with it, and on a cluster they are always in the object's slot."""

RUN_INFO_FIELD: Final = b"run_info"
"""In an object's hash: the key name it was stored under, written by STORE_OBJECT. The counters count and answer
only while it is the key's own name: RedisAI keeps run info by the name at store time, so after a RENAME the
new name has none (``cannot find run info for key``) and runs through it are not counted; renamed back, the
counters answer again."""

# record(key, at): add ARGV[at + 1 .. at + 4] (calls, duration µs, samples, errors) to the AI.INFO counters in
# the hash at KEYS[key]; only while it holds an object stored under that very name (``RUN_INFO_FIELD``; pcall:
# a key that holds another type now counts nothing). A count the store refuses (OOM at its maxmemory) is
# skipped (pcall): in a SET_TENSORS that only checks a model, the run's reply must not turn on its counters
_RECORD_FN: Final = ("local function record(key, at)\n"
                     f"  if redis.pcall('HGET', key, '{RUN_INFO_FIELD.decode()}') ~= key then return 0 end\n"
                     + "".join(f"  if ARGV[at + {i}] ~= '0' then redis.pcall('HINCRBY', key, '{name.decode()}', "
                               f"ARGV[at + {i}]) end\n" for i, name in enumerate(STAT_FIELDS, start=1))
                     + "  return 1\nend\n")

STALE_MODEL: Final = "STALEMODEL the model changed while it ran"
STALE_INPUT: Final = "STALEINPUT an input changed while the model ran"
# the write found that something a run took from our cache had changed
STALE_PREFIXES: Final = ("STALEMODEL", "STALEINPUT")

SET_TENSORS: Final = StoreScript("set_tensors", (_TENSOR_OR_FREE + _RECORD_FN + f"""
local empty_is_free = ARGV[1] == '1'
local checks, inputs, counters = #ARGV[2], #ARGV[3], #ARGV[4]
local outputs = #KEYS - checks - inputs - counters
local numbers = #ARGV - 4 * counters
for i = 1, counters do record(KEYS[#KEYS - counters + i], numbers + 4 * (i - 1)) end
for i = 1, checks do
  if redis.pcall('HGET', KEYS[outputs + i], 'digest') ~= ARGV[4 + outputs + i] then
    return redis.error_reply('{STALE_MODEL}')
  end
end
for i = 1, inputs do
  local used, key = ARGV[4 + outputs + checks + i], KEYS[outputs + checks + i]
  local now
  if #used == {STAMPED_PREFIX} and string.byte(used, 5) == {FORMAT_VERSION} then
    now = redis.pcall('GETRANGE', key, 0, {STAMPED_PREFIX - 1})
  else
    now = redis.pcall('GET', key)
  end
  if now ~= used then return redis.error_reply('{STALE_INPUT}') end
end
for i = 1, outputs do
  if not tensor_or_free(KEYS[i], empty_is_free) then return {_WRONGTYPE} end
end
for i = 1, outputs do redis.call('SET', KEYS[i], ARGV[i + 4]) end
return 1
""").encode())
"""KEYS: tensor keys, then (ARGV[2] of them) the keys of the objects the tensors were computed with (a model; a
stored graph and its models and scripts), then (ARGV[3] of them) input tensor keys whose values the run took
from our cache, then (ARGV[4] of them) AI.INFO counter keys. ARGV[1]: '1' when a key holding an empty string
may be replaced (outputs of a run, as RedisAI's), '0' when that is WRONGTYPE (AI.TENSORSET); ARGV[2], [3], [4]:
how many object, input and counter keys follow the tensor keys, each count as a run of that many dots (its
length is read with no call: ``tonumber`` costs the store ~1k instructions); ARGV[5..]: the encoded tensors, then the
objects' digests as the run knew them, then the input values the run used (a stamped tensor's
``STAMPED_PREFIX`` bytes alone: its stamp names the value, so only that much is read and compared), then four
numbers per counter key
(calls, duration µs, samples, errors: RECORD_RUN's).
The counters are added first, whatever follows (a run is counted even when its write is refused, as when
RECORD_RUN went beside it). WRONGTYPE (and no tensor written) if any key holds something else than a tensor;
STALEMODEL (likewise) if an object is no longer the one that ran, STALEINPUT if an input no longer holds the
value the run used — both came from our cache, and the run is done again with what the store holds now. Every
SET drops a TTL, as RedisAI's overwrite does. The reply is 1 (no status table to build)."""

ScriptCall = tuple[StoreScript, list[bytes], list[bytes]]

_COUNTS: Final = tuple(b"." * count for count in range(16))


def _count(count: int) -> bytes:
    """SET_TENSORS's count argument: ``count`` dots."""
    return _COUNTS[count] if count < 16 else b"." * count


def set_tensors_call(keys: Sequence[bytes], values: Sequence[bytes], empty_is_free: bool = True,
                     checked: Sequence[tuple[bytes, str]] = (),
                     inputs: Sequence[tuple[bytes, bytes]] = (),
                     counters: Sequence[ScriptCall] = ()) -> ScriptCall:
    """SET_TENSORS of ``values`` at ``keys``: ``checked`` (key, digest) objects and ``inputs`` (key,
    ``input_check_value``) a run took from our cache are checked first, after ``counters`` (RECORD_RUN calls:
    ``record_run_call``) are added, in the same script (see SET_TENSORS): one script call a run, where there
    were two."""
    script_keys = list(keys)  # plain loops: compiled, a generator unpacked into a list is an object of its own
    argv = [b"1" if empty_is_free else b"0", _count(len(checked)), _count(len(inputs)), _count(len(counters))]
    argv.extend(values)
    for key, digest in checked:
        script_keys.append(key)
        argv.append(digest.encode())
    for key, check in inputs:
        script_keys.append(key)
        argv.append(check)
    for _script, counter_keys, numbers in counters:
        script_keys.append(counter_keys[0])
        argv.extend(numbers)
    return SET_TENSORS, script_keys, argv


def input_check_value(value: bytes | TensorValue) -> bytes:
    """What SET_TENSORS compares an input a run took from our cache with: a stamped tensor's prefix (a few
    bytes, however big the tensor), else the whole value. Taken when the run reads the input."""
    prefix = stamped_prefix(value)
    if prefix is not None:
        return prefix
    return value.joined() if isinstance(value, TensorValue) else value


_ZERO_STATS: Final = ", ".join(f"'{name.decode()}', 0" for name in STAT_FIELDS)


def stats_key(key: bytes) -> bytes:
    """Where the AI.INFO counters of the model, script or graph at ``key`` live: in the object's own hash
    (``STAT_FIELDS``), so the key is the object's. In the store, so every server and every process answers the
    same, and a flush, DEL or re-store by anyone is followed."""
    return key


_OBJECT_OR_FREE: Final = f"""
local kind = redis.call('TYPE', KEYS[1])['ok']
local ours = kind == 'hash' and redis.call('HGET', KEYS[1], '{MARKER_FIELD.decode()}') == ARGV[1]
if kind ~= 'none' and not ours then return {_WRONGTYPE} end
"""

STORE_OBJECT: Final = StoreScript("store_object", (_OBJECT_OR_FREE + f"""
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '{RUN_INFO_FIELD.decode()}', KEYS[1], {_ZERO_STATS}, unpack(ARGV, 2))
return redis.status_reply('OK')
""").encode())
"""KEYS[1]: the model, script or graph key; ARGV[1]: its marker (model / script / graph); ARGV[2..]: the hash's
fields and values. WRONGTYPE unless the key is missing or holds the same kind of object, which is then replaced
whole: its AI.INFO counters start again from zero, under this name (``RUN_INFO_FIELD``)."""


def store_object_call(key: bytes, counters: bytes, marker: bytes, fields: Sequence[bytes]) -> ScriptCall:
    """The STORE_OBJECT call storing the object of kind ``marker`` at ``key``. ``counters`` is ``stats_key(key)``,
    the key itself: the counters are fields of the object's hash (kept as a parameter for the callers)."""
    if counters != key:
        raise ValueError("an object's counters live in its own hash")
    return STORE_OBJECT, [key], [marker, *fields]

DELETE_OBJECT: Final = StoreScript("delete_object", (_OBJECT_OR_FREE + """
return redis.call('DEL', KEYS[1])
""").encode())
"""KEYS and ARGV[1] as STORE_OBJECT: 1 when deleted (its counters with it: they are in its hash), 0 when missing,
WRONGTYPE when it holds anything else."""

RECORD_RUN: Final = StoreScript("record_run", (_RECORD_FN + "return record(KEYS[1], 0)\n").encode())
"""KEYS[1]: an object's key; ARGV: calls, duration (µs), samples and errors to add. They count only while the
key holds an object stored under that name (``RUN_INFO_FIELD``): RedisAI keeps run info by the stored name."""


def record_run_call(counters: bytes, calls: int, duration_us: int, samples: int, errors: int) -> ScriptCall:
    """The RECORD_RUN call adding one run's counts to the AI.INFO counters at ``counters`` (``stats_key``: the
    object's own key)."""
    return RECORD_RUN, [counters], [str(n).encode() for n in (calls, duration_us, samples, errors)]


_RUN_INFO_KINDS: Final = ", ".join(
    f"['{marker.decode()}']=true" for marker in (MODEL_MARKER, SCRIPT_MARKER, GRAPH_MARKER))

RESET_STATS: Final = StoreScript("reset_stats", f"""
local kinds = {{{_RUN_INFO_KINDS}}}
local ours = redis.call('TYPE', KEYS[1])['ok'] == 'hash'
if ours then
  local head = redis.call('HMGET', KEYS[1], '{MARKER_FIELD.decode()}', '{RUN_INFO_FIELD.decode()}')
  ours = kinds[head[1]] and head[2] == KEYS[1]
end
if not ours then return redis.error_reply('{msgs.INFO_NO_RUN_INFO_MSG}') end
redis.call('HSET', KEYS[1], {_ZERO_STATS})
return redis.status_reply('OK')
""".encode())
"""AI.INFO … RESETSTAT: KEYS[1] a model, script or graph. Zeroes its counters, or answers ``cannot find run
info`` (nothing written) unless the key holds such an object stored under that name (``RUN_INFO_FIELD``)."""

LEGACY_STATS_PREFIX: Final = b"__redisai_stats__:"
"""Where releases before the counters moved into the object's hash kept them: a hash of their own per object,
``__redisai_stats__:<key>`` (on a cluster ``__redisai_stats__:{tag}<key>``, the tag in the object's slot),
holding the counters and a random ``run_info`` id also written into the object's hash."""

MIGRATE_STATS: Final = StoreScript("migrate_stats", f"""
local id = '{RUN_INFO_FIELD.decode()}'
local kinds = {{{_RUN_INFO_KINDS}}}
local old = redis.call('HMGET', KEYS[2], id, {", ".join(f"'{name.decode()}'" for name in STAT_FIELDS)})
redis.call('DEL', KEYS[2])
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' or old[1] == false then return 0 end
local head = redis.call('HMGET', KEYS[1], '{MARKER_FIELD.decode()}', id)
if not kinds[head[1]] or head[2] ~= old[1] then return 0 end
redis.call('HSET', KEYS[1], id, KEYS[1], {", ".join(f"'{name.decode()}', old[{i}] or 0"
                                          for i, name in enumerate(STAT_FIELDS, start=2))})
return 1
""".encode())
"""An older release's counters moved into the object's hash: KEYS[1] the object, KEYS[2] its legacy counters
hash (``LEGACY_STATS_PREFIX``). When both hold the same random run-info id, the counters are copied into the
object and its ``run_info`` becomes its name (1); the legacy hash is deleted in every case (0: its object was
deleted, renamed or replaced meanwhile, so those counters were no one's). Run by every server at its start
(server/store/stored_objects.py); a second run finds nothing to do."""

CLEAR_FOR_TENSOR: Final = StoreScript("clear_for_tensor", (_TENSOR_OR_FREE + f"""
if not tensor_or_free(KEYS[1], ARGV[1] == '1') then return {_WRONGTYPE} end
redis.call('DEL', KEYS[1])
return 1
""").encode())
"""The first half of a big tensor's write (``big_tensor_write``): KEYS[1] the tensor's key, ARGV[1] as
SET_TENSORS's. The key checked as SET_TENSORS checks it, then deleted, so the SET … NX after it writes; WRONGTYPE
and the key left as it is otherwise, so that SET writes nothing."""


def big_tensor_write(key: bytes, value: bytes, empty_is_free: bool, loaded: bool = True) -> list[list[bytes]]:
    """One big tensor written without its value passing through Lua, where a script gets its arguments as Lua
    strings and its SET copies them again (two copies of a 602 KB image in the store a write); nor through a
    RENAME, which copies the value in Valkey 8 (a key is embedded in its value's object, and the value is
    shared while it is renamed). CLEAR_FOR_TENSOR checks the key and deletes it when it may be replaced; then
    ``SET key value NX`` writes only if the key is missing, so it never replaces a key the check refused, nor
    one it did not see (the script lost by the store: NOSCRIPT). MULTI/EXEC makes the pair one atomic step.
    The commands, EXEC's reply being [the script's, SET's]; ``loaded``: EVALSHA, else EVAL with the source."""
    flag = b"1" if empty_is_free else b"0"
    check = [b"EVALSHA", CLEAR_FOR_TENSOR.sha] if loaded else [b"EVAL", CLEAR_FOR_TENSOR.source]
    return [[b"MULTI"], [*check, b"1", key, flag], [b"SET", key, value, b"NX"], [b"EXEC"]]


BIG_VALUE_AT: Final = (2, 2)
"""Where ``big_tensor_write`` puts the value: its third command (SET), third argument."""


SCRIPTS: Final = (SET_TENSORS, STORE_OBJECT, DELETE_OBJECT, RECORD_RUN, RESET_STATS, CLEAR_FOR_TENSOR, MIGRATE_STATS)

READS: Final = StoreScript("reads", b"""
local replies, i = {}, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  replies[#replies + 1] = redis.pcall(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return replies
""")
"""Several read commands run where a transaction stands (inside MULTI, at EXEC): ARGV holds each command as its
argument count then its arguments; KEYS names the keys they read (so a cluster routes it). The reply is the
list of their replies, errors as error values: what ``Keyspace.pipeline`` would have answered."""


def tagged(script: StoreScript) -> StoreScript:
    """``script`` answering ``{tag, reply}`` (an error reply stays an error), the tag being the last ARGV: the
    form queued inside a client's MULTI, so the element of EXEC's reply that holds its answer can be found and
    answered as the AI command would be (server/frontend/multi.py)."""
    return StoreScript(script.name + "_tagged", b"local tag = table.remove(ARGV)\nlocal function body()\n"
                       + script.source + b"\nend\nlocal reply = body()\n"
                       b"if type(reply) == 'table' and reply.err then return reply end\nreturn {tag, reply}\n")


TAGGED: Final = MappingProxyType({script.name: tagged(script) for script in (*SCRIPTS, READS)})
"""Every script's tagged form, by the script's name."""


def read_call(keys: Sequence[bytes], commands: Sequence[Sequence[bytes]]) -> ScriptCall:
    """The READS call running ``commands`` (which read ``keys``) in one step."""
    return READS, list(keys), [part for command in commands for part in (str(len(command)).encode(), *command)]
