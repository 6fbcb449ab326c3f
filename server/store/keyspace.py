"""The one async interface the AI commands use to read and write keys, over any store.

Reads are batched into one round trip (``pipeline``, ``read_many``; model metadata through the coherent
cache, ``read_through``). Writes that check a key's type are store-side scripts (``set_tensors``,
``run_script``/``run_scripts``: server/store/atomic.py), so check and write are one atomic step;
``write_atomic`` (MULTI … EXEC) remains for plain multi-key writes. Replies are Python values; an error reply
is an ``AIError`` value in ``pipeline`` results and is raised by ``call``. Runs on the event-loop thread only:
worker threads hand their store requests to the loop.

A single store is a cluster of one shard: what differs is asked of the link's router (server/store/cluster_link.py
``Router``), never branched on here — the hash tag of a derived key, a write's script calls by slot, and a run's
checks that lie on other shards than its outputs (server/store/slot_writes.py, server/store/shared_checks.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Final, Protocol, TypeGuard

from backends import errors as msgs
from backends.errors import AIError, raise_if_unavailable
from backends.tensor import TensorValue
from server.store.atomic import (
    BIG_VALUE_AT,
    LEGACY_STATS_PREFIX,
    SCRIPTS,
    ScriptCall,
    StoreScript,
    big_tensor_write,
    set_tensors_call,
    stats_key,
)
from server.store.cache import TrackedCache, TrackingRefused
from server.store.cluster_link import Router, is_redirect, is_retry_later
from server.store.shared_checks import SharedChecks, alone
from server.store.slot_writes import Apart
from server.store.upstream import pack_parted

Arg = bytes | str | int | float | memoryview | TensorValue

JOIN_WHEN_WAITING: Final = 2
"""A run's write with checks apart joins others' only while this many such writes wait: with one waiting (two
clients) the round usually holds one run, and a send shared by one costs a Task more than its own
(docs/bench-log.md)."""


class Pipelined(Protocol):
    """A pipelined channel to the store: one node's link, or a link over every shard."""

    def pipeline(self, commands: list[list[bytes]]) -> Awaitable[list[Any]]:
        """The replies of ``commands``, in one round trip (a coroutine, or the reply future itself)."""
        ...


class StoreLink(Pipelined, Protocol):
    """One pipelined channel to one database of the backing store, over its shards (a single store is a cluster
    of one shard)."""

    @property
    def router(self) -> Router:
        """Where keys live: the shards, the node of a key, and how a key or a write is placed by slot — all a
        single store's answers on one node (server/store/cluster_link.py ``Router``)."""
        ...


def to_argv(args: Sequence[Arg]) -> list[bytes]:
    out: list[bytes] = []
    for arg in args:
        if isinstance(arg, bytes):
            out.append(arg)
        elif isinstance(arg, str):
            out.append(arg.encode())
        elif isinstance(arg, memoryview):
            out.append(arg.tobytes())
        elif isinstance(arg, TensorValue):
            out.append(arg.joined())
        elif isinstance(arg, (int, float)):
            out.append(repr(arg).encode())
        else:
            raise TypeError(f"cannot send {type(arg).__name__} to the store")
    return out


class Keyspace:
    """Keys of one database of the backing store, as the AI commands see them."""

    def __init__(self, link: StoreLink, db: int, cache: TrackedCache | None = None) -> None:
        self._link = link
        self._router = link.router  # asked where a derived key or a write's parts go (nothing asked of a kind)
        self.db = db
        self._cache = cache if cache is not None and cache.enabled else None
        self._max_bulk = 0  # the store's proto-max-bulk-len, read before the first big write (0: not yet)
        # runs whose model or inputs are on other shards than their outputs join (server/store/shared_checks.py)
        self._shared = SharedChecks(self.script_replies, self._router.node_for)

    def stats_key(self, key: bytes) -> bytes:
        """Where the AI.INFO counters of ``key`` live: in the object's own hash (server/store/atomic.py,
        ``STAT_FIELDS``), so on a cluster they are in its slot with no tag, written with it in one script."""
        return stats_key(key)

    def object_of_legacy_stats(self, name: bytes) -> bytes:
        """The object key whose counters an older release kept at ``name`` (``LEGACY_STATS_PREFIX`` + key; on a
        cluster with a ``{tag}`` in the object's slot before the key): server/store/stored_objects.py."""
        return self._router.untagged(name[len(LEGACY_STATS_PREFIX) :])

    async def scan(self, match: bytes, kind: bytes = b"") -> list[bytes]:
        """Every key matching ``match`` (and of type ``kind``, when given: SCAN's TYPE), over every shard
        (SCAN … MATCH … COUNT 1000 until each cursor is 0)."""
        found: list[bytes] = []
        only = [b"TYPE", kind] if kind else []
        for link in self._router.shards():
            cursor = b"0"
            while True:
                (reply,) = await link.pipeline([[b"SCAN", cursor, b"MATCH", match, b"COUNT", b"1000", *only]])
                raise_if_unavailable(reply)
                if isinstance(reply, AIError):
                    raise reply
                cursor, batch = reply
                found += batch
                if cursor == b"0":
                    break
        return found

    @property
    def caching(self) -> bool:
        return self._cache is not None and self._cache.enabled

    async def read_through(self, commands: Sequence[tuple[bytes, ...]], hits: list[bool] | None = None,
                           checked: bool = True) -> list[Any]:
        """GET / HMGET replies from the coherent cache where it has them, the rest in one round trip
        (server/store/cache.py); without a cache (or a store that refuses to track keys), one pipeline.
        ``hits``, when given, gets one flag per command: whether its reply came from the cache. ``checked``
        (every caller today: a run's read) says the caller's write checks what it took (the model's digest,
        STALEINPUT), so a metadata entry a push left unconfirmed serves it too; a read whose reply answers a
        client or decides anything without such a check passes False and gets only confirmed entries."""
        if self._cache is None or not self._cache.enabled:
            return await self._read_past_cache(commands, hits)
        held = self._cache.held(self.db, commands, hits, checked)
        if held is not None:
            return held  # cached values are never "unavailable" errors: those are not kept
        try:
            replies = await self._cache.read_many(self.db, commands, hits, checked)
        except TrackingRefused:
            return await self._read_past_cache(commands, hits)
        raise_if_unavailable(*replies)
        return replies

    async def _read_past_cache(self, commands: Sequence[tuple[bytes, ...]], hits: list[bool] | None) -> list[Any]:
        if hits is not None:
            hits[:] = [False] * len(commands)
        return await self.pipeline(commands)

    def known_tensors(self, keys: Sequence[bytes]) -> bool:
        """Whether each key last held a tensor we wrote (a pre-run type check may be skipped; see the cache)."""
        return self._cache is not None and self._cache.known_tensors(self.db, keys)

    def forget(self, keys: Sequence[bytes], keep_written: bool = False) -> None:
        """Drop ``keys`` from the coherent cache (before we write them, or when they proved stale).
        ``keep_written``: the keys still count as last holding a tensor of ours (what we are about to write
        there is a tensor too, so concurrent runs keep skipping their pre-run type check: ``known_tensors``)."""
        if self._cache is not None:
            self._cache.forget(self.db, keys, keep_written)

    async def command(self, argv: list[bytes]) -> Any:
        """Any command, e.g. a script's ``redis.execute``: what it may change leaves the cache first."""
        if self._cache is not None:
            self._cache.invalidate_for(self.db, argv)
        return (await self._link.pipeline([argv]))[0]

    async def call(self, *args: Arg) -> Any:
        """Run one command; an error reply is raised as ``AIError`` with the store's exact text."""
        (reply,) = await self._link.pipeline([to_argv(args)])
        if isinstance(reply, AIError):
            raise reply
        return reply

    async def pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Run several commands in one round trip; error replies come back as ``AIError`` values — except a
        store that cannot answer now (LOADING after a restart, BUSY …): that is raised, so no caller mistakes
        it for a key of the wrong type."""
        if not commands:
            return []
        replies = await self._link.pipeline([to_argv(c) for c in commands])
        raise_if_unavailable(*replies)
        return replies

    async def read_many(self, keys: Sequence[bytes]) -> list[Any]:
        """GET each key in one round trip: bytes, None when missing, or the WRONGTYPE error value."""
        return await self.pipeline([(b"GET", key) for key in keys])

    async def run_script(self, script: StoreScript, keys: Sequence[Arg], args: Sequence[Arg] = ()) -> Any:
        """Run one of server/store/atomic.py's scripts (EVALSHA; EVAL when the store lost it); an error reply
        (WRONGTYPE …) is raised with its exact text."""
        self.forget(to_argv(keys))  # it writes them
        (reply,) = await self.run_scripts([(script, list(to_argv(keys)), list(to_argv(args)))])
        if isinstance(reply, AIError):
            raise reply
        return reply

    async def run_scripts(self, calls: Sequence[ScriptCall], raise_unavailable: bool = True) -> list[Any]:
        """Several scripts in one round trip (EVALSHA each; the ones the store lost are sent again as EVAL,
        which loads them). Replies in order; error replies as AIError values, except a store that cannot answer
        now (``raise_if_unavailable``): raised — unless not ``raise_unavailable``, for calls that stand for
        several callers, each of which decides on its own reply (server/store/shared_checks.py)."""
        if not calls:
            return []
        replies = await self._link.pipeline(
            [[b"EVALSHA", script.sha, str(len(keys)).encode(), *keys, *args] for script, keys, args in calls])
        lost = [i for i, reply in enumerate(replies) if isinstance(reply, AIError) and _no_script(reply)]
        if lost:
            again = await self._link.pipeline([[b"EVAL", calls[i][0].source, str(len(calls[i][1])).encode(),
                                                *calls[i][1], *calls[i][2]] for i in lost])
            for i, reply in zip(lost, again, strict=True):
                replies[i] = reply
        if raise_unavailable:
            raise_if_unavailable(*replies)
        return replies

    def script_replies(self, calls: Sequence[ScriptCall]) -> Awaitable[list[Any]]:
        """``run_scripts`` with every error reply a value, "cannot answer now" too (no coroutine of its own)."""
        return self.run_scripts(calls, raise_unavailable=False)

    async def set_tensors(self, keys: Sequence[bytes], values: Sequence[Arg], empty_is_free: bool = True,
                          also: Sequence[ScriptCall] = (), model: tuple[bytes, str] | None = None,
                          guards: Sequence[tuple[bytes, str]] = (),
                          inputs: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """SET every tensor in one atomic step, or none with WRONGTYPE when a key holds something else (an empty
        string counts as free for run outputs, as in RedisAI; AI.TENSORSET passes ``empty_is_free=False``).
        ``also``: more scripts for the same round trip (a run's AI.INFO counters). ``model``: (key, digest) of
        the model the tensors came from; if the store holds another one now, STALEMODEL and nothing written.
        ``guards``: more (key, digest) pairs checked alike (a stored graph's objects). ``inputs``: (key,
        ``input_check_value``) of the inputs a run took from our cache; STALEINPUT and nothing written if one
        holds another value now (on a cluster, an input in another slot than the outputs is compared on its own
        shard, in the same round trip, not atomically with their write: docs/deployment.md, "What is atomic on a
        cluster")."""
        if not keys and not inputs and model is None:
            await self.run_scripts(also)
            return
        for big in values:
            if _big(big):
                await self._check_bulk(len(big))
        value = values[0] if len(keys) == 1 and not inputs and model is None and not guards and not also else None
        if value is not None and _big(value):
            await self._set_big(keys[0], value, empty_is_free)
            return
        # Our write in flight leaves the keys marked as ours: were the mark dropped until the reply, concurrent
        # runs writing the same output (50 clients of one model) would all miss the cache and re-check the type
        # (the write script checks it again, atomically, either way). A refused write drops the mark.
        self.forget(keys, keep_written=True)
        encoded = to_argv(values)
        # the model and guards are read, not written: their cache entries stay
        heads, counted, apart = self._router.write_plan(keys, encoded, empty_is_free, model, guards, inputs, also)
        if apart is not None and model is not None:
            replies = await self._write_apart(keys, encoded, empty_is_free, model, also, apart)
            self._raise_refused(keys, replies)
        else:  # (here, not in a coroutine of its own: one generator less a write)
            replies = await self.run_scripts(heads if counted else [*heads, *also])
            self._raise_refused(keys, replies[: len(heads)])
        if self._cache is not None:
            self._cache.note_written(self.db, keys)
            self._cache.remember_tensors(self.db, keys, encoded)

    async def _set_big(self, key: bytes, value: bytes | TensorValue, empty_is_free: bool) -> None:
        """One big tensor, checked and written in one transaction, its value through no script and no RENAME
        (``big_tensor_write``). Written or refused, nothing else: a refusal (WRONGTYPE) or an error leaves the key
        as it was. The store lost the script (SCRIPT FLUSH, a restart) and the key there: sent again with EVAL."""
        self.forget([key], keep_written=True)
        written = await self._write_big(key, value, empty_is_free, loaded=True)
        if written is None:
            written = await self._write_big(key, value, empty_is_free, loaded=False)
        if isinstance(written, AIError):
            self.forget([key])
            raise written
        if self._cache is not None:
            self._cache.note_written(self.db, [key])
            self._cache.remember_tensors(self.db, [key], [value])

    async def _write_big(self, key: bytes, value: bytes | TensorValue, empty_is_free: bool,
                         loaded: bool) -> AIError | bool | None:
        """One ``big_tensor_write``: True written, the refusal or error, or None when the script was lost and the
        key held something, or the store refused the script's EVALSHA as it was queued (nothing written)."""
        try:
            replies = await self._send_big(key, value, empty_is_free, loaded)
        except AIError:
            self._max_bulk = 0  # (a limit lowered meanwhile closes the connection: the next big write reads it)
            await self._check_bulk(len(value))
            raise
        queued_errors = [reply for reply in replies[1:-1] if isinstance(reply, AIError)]
        result = replies[-1]
        if queued_errors:  # (nothing ran: EXEC discarded the transaction)
            return None if loaded and _no_script(queued_errors[0]) else queued_errors[0]
        if isinstance(result, AIError) or not isinstance(result, list) or len(result) != 2:
            return result if isinstance(result, AIError) else AIError(msgs.TRANSACTION_ABORTED_MSG)
        checked, stored = result
        if stored == b"OK":  # (after a lost script only when the key was missing: anyone may write it)
            return True
        if isinstance(checked, AIError):
            return None if _no_script(checked) and loaded else checked
        return stored if isinstance(stored, AIError) else AIError(msgs.TRANSACTION_ABORTED_MSG)

    async def _send_big(self, key: bytes, value: bytes | TensorValue, empty_is_free: bool,
                        loaded: bool) -> list[Any]:
        """The replies of a ``big_tensor_write``. A ``TensorValue`` goes to its key's node with its header and
        data written one after the other (``pack_parted``), never joined; should that node no longer serve the
        key (MOVED, ASK, TRYAGAIN: nothing was run), it is joined and goes the general way, which follows them."""
        if isinstance(value, TensorValue):
            link = self._router.key_link(key)
            if link is not None:
                commands = big_tensor_write(key, b"", empty_is_free, loaded)
                replies = await link.submit_packed(len(commands), pack_parted(commands, BIG_VALUE_AT,
                                                                              (value.head, value.data)))
                raise_if_unavailable(*replies)
                if not any(is_redirect(reply) or is_retry_later(reply) for reply in replies):
                    return replies
                self._router.request_refresh()
            value = value.joined()
        return await self.pipeline(big_tensor_write(key, value, empty_is_free, loaded))

    async def _check_bulk(self, size: int) -> None:
        """Refuse a value over the store's proto-max-bulk-len before sending it: the store would answer a protocol
        error and close the shared connection, failing every command in flight on it. The limit is read once
        (CONFIG GET; Redis's default where CONFIG is refused), and again after a big write lost the connection
        (``_set_big``), so a limit lowered later is found by the write it stops."""
        if not self._max_bulk:
            self._max_bulk = await self._read_max_bulk()
        if size > self._max_bulk:
            raise AIError(msgs.OVER_STORE_BULK_MSG.format(size=size, limit=self._max_bulk))

    async def _read_max_bulk(self) -> int:
        (reply,) = await self.pipeline([(b"CONFIG", b"GET", b"proto-max-bulk-len")])
        if isinstance(reply, list) and len(reply) == 2 and isinstance(reply[1], bytes) and reply[1].isdigit():
            return int(reply[1])
        return STORE_BULK_DEFAULT

    def stamped_copy(self, key: bytes) -> bytes | TensorValue | None:
        """The stamped tensor this server last wrote or read at ``key``, if it still holds a copy; whether the
        store still holds it is the caller's to check (its first ``STAMPED_PREFIX`` bytes)."""
        return self._cache.stamped_copy(self.db, key) if self._cache is not None else None

    async def still_stored(self, key: bytes, copy: bytes | TensorValue) -> bool:
        """Whether the store holds the very value ``copy`` (``stamped_copy``'s) at ``key``: its stamp says so."""
        return self._cache is not None and await self._cache.still_stored(self.db, key, copy)

    def remember_tensor(self, key: bytes, value: Any) -> None:
        """Keep a copy of the tensor just read at ``key`` (only a stamped one is kept: ``stamped_copy``)."""
        if self._cache is not None:
            self._cache.remember_tensors(self.db, [key], [value])

    def _raise_refused(self, keys: Sequence[bytes], replies: list[Any]) -> None:
        """The first refusal among a write's replies (WRONGTYPE, STALEMODEL …), its keys dropped from the cache."""
        for reply in replies:
            if isinstance(reply, AIError):
                self.forget(keys)
                raise reply

    async def _write_apart(self, keys: Sequence[bytes], encoded: list[bytes], empty_is_free: bool,
                           model: tuple[bytes, str], counters: Sequence[ScriptCall], apart: Apart) -> list[Any]:
        """A write whose model (with its counters) or some cached input lies in another slot than its outputs
        (``apart``: the router's plan, slot_writes.checks_apart's). While enough other such writes wait
        (``JOIN_WHEN_WAITING``) it joins the loop iteration's send (server/store/shared_checks.py): its outputs'
        write, and the checks apart shared with the other runs that check the same; else it sends the same calls
        alone, in one pipeline call, which costs less than a send shared by one. The replies: the write's, then
        its checks'."""
        model_apart, here, there = apart
        write = set_tensors_call(keys, encoded, empty_is_free, () if model_apart else [model], here,
                                 () if model_apart else counters)
        checked, counted = (model, counters) if model_apart else (None, ())
        shared = self._shared
        shared.writes_waiting += 1
        try:
            if shared.writes_waiting <= JOIN_WHEN_WAITING:  # (this write counted)
                return await self.run_scripts(alone(write, checked, counted, there))
            replies, failure = await shared.join(write, checked, counted, there)
        finally:
            shared.writes_waiting -= 1
        if failure is not None:
            raise failure
        return replies

    def inputs_from_cache(self, inputs: Sequence[bytes], outputs: Sequence[bytes]) -> bool:
        """Whether a run takes its inputs from the coherent cache (its output write checks each: in their script
        when in their slot, else by a check on the input's own shard). An input outside the first output's slot
        only while fewer than ``JOIN_WHEN_WAITING`` writes with checks apart wait (always on a single store,
        where none is apart) — not under load, where reading it is a round trip in which concurrent runs
        gather: taking it from the cache there makes more, smaller loop iterations, costing more CPU a request
        though fewer instructions, while one client would gain a round trip (docs/bench-log.md)."""
        if not self.caching:
            return False
        if self._shared.writes_waiting < JOIN_WHEN_WAITING or not outputs:
            return True
        return self._router.in_slot_of(inputs, outputs[0])

    async def write_atomic(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Run ``commands`` as one MULTI/EXEC transaction in one round trip; return EXEC's replies."""
        if not commands:
            return []
        if len(commands) == 1:  # one command is atomic by itself: skip MULTI/EXEC's two extra commands
            reply = (await self.pipeline(commands))[0]
            if isinstance(reply, AIError):
                raise reply
            return [reply]
        replies = await self.pipeline([(b"MULTI",), *commands, (b"EXEC",)])
        result = replies[-1]
        if isinstance(result, AIError):
            raise result
        queued_errors = [r for r in replies[1:-1] if isinstance(r, AIError)]
        if result is None or queued_errors:
            raise queued_errors[0] if queued_errors else AIError(msgs.TRANSACTION_ABORTED_MSG)
        return list(result)


STORE_BULK_DEFAULT: Final = 512 * 1024 * 1024  # Redis's and Valkey's proto-max-bulk-len
BIG_FROM: Final = 64 * 1024
"""A tensor at least this big is written by ``Keyspace._set_big``; smaller ones cost less in one script."""


def _big(value: Arg) -> TypeGuard[bytes | TensorValue]:
    return (isinstance(value, bytes) or isinstance(value, TensorValue)) and len(value) >= BIG_FROM


def _no_script(reply: AIError) -> bool:
    return reply.message.startswith("NOSCRIPT")


async def load_scripts(link: Pipelined) -> None:
    """SCRIPT LOAD every check-and-write script, so the first EVALSHA finds it (a refusal is not fatal:
    run_script falls back to EVAL)."""
    await link.pipeline([[b"SCRIPT", b"LOAD", script.source] for script in SCRIPTS])


def status_text(reply: Any) -> str:
    """A simple-string reply (hiredis gives bytes) as text."""
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
