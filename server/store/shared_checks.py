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
sends them all, one call a node, and settles each run's one future with its own replies — its write's, and a
copy of each check's it joined. A client that goes away cancels only its own wait; a shard that cannot answer
fails the runs that wrote or checked there only. A run is answered once the nodes it wrote or checked on have:
a node that hangs until the watchdog gives up on it, answers MOVED (a map refresh first) or TRYAGAIN (a pause),
or must be connected first, holds only the runs that touched it, not every run that joined the same loop
iteration.

Usage: ``shared = SharedChecks(send, node_of)`` (``send``: script calls to their replies, error replies as
values, nothing raised for them; ``node_of``: the node a command on a key goes to, the same object for one
node's keys); ``future = shared.join(write, model, counters, inputs)`` (``write``: the outputs' SET_TENSORS
call; ``model``: (key, digest) to check apart, or None; ``counters``: its RECORD_RUN call, or none; ``inputs``:
(key, check value) pairs to check apart), then ``replies, failure = await future``; a run alone sends
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
NodeOf = Callable[[bytes], object]  # the node a command on a key goes to (None: the one node, or none serves it)
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
        self.value = value  # an input's: the check value of what the runs took from the cache (no digest, no counts)
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
    """The writes and checks joined in one loop iteration (``SharedChecks._deliver`` sends them, in a Task)."""

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

    def __init__(self, send: SendScripts, node_of: NodeOf | None = None) -> None:
        self._send = send
        self._node_of = node_of
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
        parts = self._parts(calls) if len(writes) > 1 else None  # (one run waits for all its nodes anyway)
        if parts is None:  # one node, or one run: one send, every run answered from it
            await self._send_part(_Answers(checks, writes, calls, None), 0, calls, None)
            return
        answers = _Answers(checks, writes, calls, parts)
        loop = asyncio.get_running_loop()
        others = [loop.create_task(self._send_part(answers, number, [calls[i] for i in parts[number]],
                                                   parts[number])) for number in range(1, len(parts))]
        try:  # the first part here, the others in Tasks of their own (not asyncio.gather: it runs interpreted)
            await self._send_part(answers, 0, [calls[i] for i in parts[0]], parts[0])
            for task in others:
                await task
        finally:
            for task in others:
                task.cancel()  # (this round's Task cancelled, e.g. at shutdown; a Task done ignores it)

    def _parts(self, calls: list[ScriptCall]) -> list[list[int]] | None:
        """The calls' indices by the node each goes to (in order within a node), or None when all go to one."""
        node_of = self._node_of
        if node_of is None:
            return None
        nodes: list[object] = []
        parts: list[list[int]] = []
        for i in range(len(calls)):
            keys = calls[i][1]
            node = node_of(keys[0]) if keys else None
            j = 0
            while j < len(nodes) and nodes[j] is not node:
                j += 1
            if j == len(nodes):
                nodes.append(node)
                parts.append([])
            parts[j].append(i)
        return parts if len(parts) > 1 else None

    async def _send_part(self, answers: _Answers, number: int, calls: list[ScriptCall],
                         part: list[int] | None) -> None:
        """Part ``number``'s calls (``part``: their indices in the round; None: the whole round), then every run
        whose parts are all in is answered."""
        try:
            replies = await self._send(calls)
        except Exception as exc:  # (sending failed as a whole: its runs raise it, as their own send would have)
            answers.failed(number, part, exc)
            return
        answers.answered(number, part, replies)


class _Answers:
    """A round's replies as its parts come in, and which runs wait for which parts: a run is settled once each
    part holding its write or one of its checks has come in (with the first failure among them, if any)."""

    __slots__ = ("failures", "first", "replies", "runs_of_part", "waiting", "writes")

    def __init__(self, checks: list[_Check], writes: list[_Write], calls: list[ScriptCall],
                 parts: list[list[int]] | None) -> None:
        self.writes = writes
        self.first = len(checks)  # the writes' calls follow the checks'
        self.replies: list[Any] = [None] * len(calls)
        self.failures: list[BaseException | None] | None = None  # one a call, once a part failed
        self.waiting = [1] * len(writes)  # each run's parts not in yet
        self.runs_of_part: list[list[int]] = []  # the runs each part holds a call of (none kept for one part)
        if parts is not None:
            self._index(parts)

    def _index(self, parts: list[list[int]]) -> None:
        part_of = [0] * len(self.replies)
        for number in range(len(parts)):
            self.runs_of_part.append([])
            for index in parts[number]:
                part_of[index] = number
        for j in range(len(self.writes)):
            mine = [part_of[self.first + j]]
            for index in self.writes[j].checks:
                number = part_of[index]
                if number not in mine:
                    mine.append(number)
            self.waiting[j] = len(mine)
            for number in mine:
                self.runs_of_part[number].append(j)

    def answered(self, number: int, part: list[int] | None, replies: list[Any]) -> None:
        """Part ``number`` (``part``: its calls' indices; None: the whole round) answered ``replies``."""
        if part is None:
            self.replies = replies
        else:
            for position in range(len(part)):
                self.replies[part[position]] = replies[position]
        self._part_in(number, part)

    def failed(self, number: int, part: list[int] | None, exc: BaseException) -> None:
        failures = self.failures
        if failures is None:
            failures = self.failures = [None] * len(self.replies)
        for index in part if part is not None else range(len(failures)):
            failures[index] = exc
        self._part_in(number, part)

    def _part_in(self, number: int, part: list[int] | None) -> None:
        """Each run that waited for this part and for nothing else is settled."""
        runs = self.runs_of_part[number] if part is not None else range(len(self.writes))
        for j in runs:
            self.waiting[j] -= 1
            if self.waiting[j] == 0:
                self._settle(j)

    def _settle(self, j: int) -> None:
        write = self.writes[j]
        failures = self.failures
        if failures is not None:
            exc = failures[self.first + j]
            for index in write.checks:
                exc = exc or failures[index]
            if exc is not None:  # (an AIError: each run its own copy, as for a reply)
                write.settle([], AIError(exc.message) if isinstance(exc, AIError) else exc)
                return
        own = [self.replies[self.first + j]]
        for index in write.checks:
            own.append(self.replies[index])
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
    """A SET_TENSORS of no tensor comparing a cached input's (key, check value) on its shard."""
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
