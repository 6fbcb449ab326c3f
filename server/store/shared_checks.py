"""One send a loop iteration for the runs whose checks lie on other shards than their outputs: their outputs'
writes, and one check per model (and per cached input) that all of them share.

On a cluster, a run's write checks that the store still holds the model the run used (its digest) and the input
values it took from our cache, and adds the run's AI.INFO counters, which live in the model's slot
(server/store/keyspace.py, ``Keyspace.stats_key``). What is in the outputs' slot rides in the outputs' own
script; what is not is a script of its own on its shard (a SET_TENSORS with no tensor: server/store/atomic.py).
Fifty clients of one model sent fifty checks: one script a run on the model's shard (the shard every server's
runs of a hot model land on) and, for us, a write split by slot and sent the spread way. Now the runs of one loop
iteration *join*: each adds its outputs' write, the model's check (same model, digest and counters key: one
check, the counters summed) and its inputs' checks (same key and value: one check); one Task a loop iteration
sends them all in one call, and settles each run's one future with its own replies — its write's, and a copy of
each check's it joined. A client that goes away cancels only its own wait; a shard that cannot answer fails the
runs that wrote or checked there only.

Usage: ``shared = SharedChecks(send)`` (``send``: script calls to their replies, error replies as values,
nothing raised for them); ``future = shared.join(write, model, counters, inputs)`` (``write``: the outputs'
SET_TENSORS call; ``model``: (key, digest) to check apart, or None; ``counters``: its RECORD_RUN call, or none;
``inputs``: (key, value) pairs to check apart), then ``replies, failure = await future``; a run alone sends
``alone(write, model, counters, inputs)`` itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from backends import errors as msgs
from backends.errors import AIError, unavailable
from server.store.atomic import ScriptCall, record_run_call, set_tensors_call

SendScripts = Callable[[Sequence[ScriptCall]], Awaitable[list[Any]]]
Outcome = tuple[list[Any], BaseException | None]
"""What a joined run gets: its write's reply then its checks' (an AIError value for an error reply, e.g.
STALEMODEL, each run's own copy), and what to raise instead, if anything (a shard of its write or of one of its
checks cannot answer now, or sending failed), as its own send would have."""
Identity = tuple[bytes, str, bytes] | tuple[bytes, bytes]  # a model's (key, digest, counters key); an input's
CANCELLED: Final = "the write and its checks were cancelled"


class _Check:
    """The runs of one loop iteration that check one model (their counters summed) or one cached input value."""

    __slots__ = ("counter_key", "digest", "key", "numbers", "value")

    def __init__(self, key: bytes, digest: str, counter_key: bytes, value: bytes | None = None) -> None:
        self.key = key
        self.digest = digest
        self.counter_key = counter_key  # b"": the runs add no counts (a run done again after STALEMODEL)
        self.value = value  # an input's: the value the runs took from the cache (then no digest, no counts)
        self.numbers = [0, 0, 0, 0]  # calls, duration µs, samples, errors: RECORD_RUN's

    def call(self) -> ScriptCall:
        if self.value is not None:
            return input_check((self.key, self.value))
        numbers = self.numbers
        counters = [record_run_call(self.counter_key, numbers[0], numbers[1], numbers[2], numbers[3])]
        return model_check((self.key, self.digest), counters if self.counter_key else ())


class _Write:
    """One run's outputs' write, the checks it joined, and its future."""

    __slots__ = ("call", "checks", "future")

    def __init__(self, call: ScriptCall, checks: list[int], future: asyncio.Future[Outcome]) -> None:
        self.call = call
        self.checks = checks  # indices into the round's checks
        self.future = future

    def settle(self, replies: list[Any], failure: BaseException | None) -> None:
        if not self.future.done():  # (a run cancelled meanwhile; or settled already)
            self.future.set_result((replies, failure))


class _Round:
    """The writes and checks joined in one loop iteration; the Task that sends them."""

    __slots__ = ("checks", "found", "writes")

    def __init__(self) -> None:
        self.found: dict[Identity, int] = {}  # a check's index in ``checks``
        self.checks: list[_Check] = []
        self.writes: list[_Write] = []

    def check(self, identity: Identity, key: bytes, digest: str, counter_key: bytes, value: bytes | None) -> int:
        """The index of this round's check of ``identity``, added if new."""
        index = self.found.get(identity)
        if index is None:
            index = self.found[identity] = len(self.checks)
            self.checks.append(_Check(key, digest, counter_key, value))
        return index

    def abandon(self) -> None:
        """The Task ended: any run still waiting (the Task cancelled, e.g. at shutdown, before or while it sent)
        gets an error rather than waiting for ever."""
        for write in self.writes:
            if not write.future.done():  # (the error made only then: it cost ~7k instructions a run made each time)
                write.settle([], AIError(msgs.UPSTREAM_DOWN_MSG.format(detail=CANCELLED)))


class SharedChecks:
    """The writes and checks joined in this loop iteration (see the module docstring)."""

    def __init__(self, send: SendScripts) -> None:
        self._send = send
        self._round = _Round()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sending: set[asyncio.Task[None]] = set()  # (the loop keeps only a weak reference to a Task)
        self.writes_waiting = 0  # writes with checks apart that wait for their replies (Keyspace's)

    def join(self, write: ScriptCall, model: tuple[bytes, str] | None, counters: Sequence[ScriptCall],
             inputs: Sequence[tuple[bytes, bytes]]) -> asyncio.Future[Outcome]:
        """The future of ``write`` sent with this loop iteration's others, beside the check of ``model`` (adding
        ``counters``: at most one RECORD_RUN call, for the model's counters) and of each of ``inputs``, each made
        once for every run of this iteration that checks the same."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()  # (once a loop: it costs a getpid() syscall a call)
        current = self._round
        checks: list[int] = []
        if model is not None:
            counter_key = counters[0][1][0] if counters else b""
            index = current.check((model[0], model[1], counter_key), model[0], model[1], counter_key, None)
            if counters:
                _add_counts(current.checks[index].numbers, counters[0][2])
            checks.append(index)
        for i in range(len(inputs)):
            key, value = inputs[i]
            checks.append(current.check((key, value), key, "", b"", value))
        future: asyncio.Future[Outcome] = loop.create_future()
        current.writes.append(_Write(write, checks, future))
        if len(current.writes) == 1:  # a new round: its Task's first step runs after this iteration's joins
            self._start(loop, current)
        return future

    def _start(self, loop: asyncio.AbstractEventLoop, current: _Round) -> None:
        sending = loop.create_task(self._deliver(current))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)
        sending.add_done_callback(lambda _task: self._ended(current))

    def _ended(self, current: _Round) -> None:
        """A round's Task ended, however: were it cancelled before its first step, the round would still take
        joins that no Task sends; and its runs still waiting get an error (``_Round.abandon``)."""
        if self._round is current:
            self._round = _Round()
        current.abandon()

    async def _deliver(self, current: _Round) -> None:
        if self._round is current:
            self._round = _Round()  # joins from here on make a round of their own
        checks, writes = current.checks, current.writes
        calls = [check.call() for check in checks]
        for write in writes:
            calls.append(write.call)
        try:
            replies = await self._send(calls)
        except Exception as exc:  # (sending failed as a whole: each run raises it, as its own send would have)
            for write in writes:  # (an AIError: each run its own copy, as for a reply)
                write.settle([], AIError(exc.message) if isinstance(exc, AIError) else exc)
            return
        first = len(checks)
        for j in range(len(writes)):
            write = writes[j]
            own = [replies[first + j]]
            for index in write.checks:
                own.append(replies[index])
            replies_of_run, failure = _owned(own)
            write.settle(replies_of_run, failure)


def alone(write: ScriptCall, model: tuple[bytes, str] | None, counters: Sequence[ScriptCall],
          inputs: Sequence[tuple[bytes, bytes]]) -> list[ScriptCall]:
    """What ``join`` would share, for a run that sends it alone: its write, then its checks, in one list."""
    calls = [write]
    if model is not None:
        calls.append(model_check(model, counters))
    for i in range(len(inputs)):
        calls.append(input_check(inputs[i]))
    return calls


def model_check(model: tuple[bytes, str], counters: Sequence[ScriptCall]) -> ScriptCall:
    """A SET_TENSORS of no tensor checking ``model``'s digest on its shard, adding ``counters`` there."""
    return set_tensors_call([], [], True, [model], (), counters)


def input_check(pair: tuple[bytes, bytes]) -> ScriptCall:
    """A SET_TENSORS of no tensor comparing a cached input's (key, value) on its shard."""
    return set_tensors_call([], [], True, (), (pair,), ())


def _owned(replies: list[Any]) -> tuple[list[Any], BaseException | None]:
    """A run's replies with each error its own copy (one object raised by every run of a check would grow its
    traceback with each raise), and the first that means a shard cannot answer now, to raise."""
    failure = None
    for i in range(len(replies)):
        reply = replies[i]
        if isinstance(reply, AIError):
            reply = replies[i] = AIError(reply.message)
            if failure is None and unavailable(reply):
                failure = reply
    return replies, failure


def _add_counts(totals: list[int], numbers: list[bytes]) -> None:
    """Add RECORD_RUN's four decimal ARGV numbers into ``totals``: a digit loop, compiled (``int()`` of bytes
    costs ~1k instructions a number)."""
    for i in range(4):
        text = numbers[i]
        value = 0
        for j in range(len(text)):
            value = value * 10 + text[j] - 48
        totals[i] += value
