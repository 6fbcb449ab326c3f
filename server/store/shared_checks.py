"""One model check a loop iteration for all the runs of that model whose outputs are on another shard.

On a cluster, a run's write checks that the store still holds the model the run used (its digest) and adds the
run's AI.INFO counters, which live in the model's slot (server/store/keyspace.py, ``Keyspace.stats_key``). When
the outputs' slot is the model's, that check rides in the outputs' own script. When it is not, the check is a
script of its own on the model's shard (a SET_TENSORS with no tensor: server/store/atomic.py). Fifty clients of
one model sent fifty of them: one more node batch a request for us, and one script a run on the model's shard,
the shard every server's runs of a hot model land on. Now the runs of one loop iteration join one call: the
same model and digest, their counters summed. Each run keeps its own future (a client that goes away cancels
only its own wait) and its own outcome: a shard that cannot answer fails the runs of its models only. One Task
a loop iteration sends the calls, beside the runs' output writes.

Usage: ``checks = SharedChecks(send)`` (``send``: script calls to their replies, error replies as values,
nothing raised for them); ``future = checks.join(model_key, digest, counters)`` (``counters``: the run's
RECORD_RUN call for that model, or none), then ``reply, raised = await future``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from backends import errors as msgs
from backends.errors import AIError, unavailable
from server.store.atomic import ScriptCall, record_run_call, set_tensors_call

SendScripts = Callable[[Sequence[ScriptCall]], Awaitable[list[Any]]]
Outcome = tuple[Any, bool]
"""What a joined run gets: the check's reply (an AIError value for an error reply, e.g. STALEMODEL), and
whether to raise it (the store cannot answer now, or sending failed), as its own send would have."""


class _Check:
    """The runs of one loop iteration that check one model: their summed counters and their futures."""

    __slots__ = ("counter_key", "digest", "futures", "key", "numbers")

    def __init__(self, key: bytes, digest: str, counter_key: bytes) -> None:
        self.key = key
        self.digest = digest
        self.counter_key = counter_key  # b"": the runs add no counts (a run done again after STALEMODEL)
        self.numbers = [0, 0, 0, 0]  # calls, duration µs, samples, errors: RECORD_RUN's
        self.futures: list[asyncio.Future[Outcome]] = []

    def call(self) -> ScriptCall:
        numbers = self.numbers
        counters = [record_run_call(self.counter_key, numbers[0], numbers[1], numbers[2], numbers[3])]
        return set_tensors_call([], [], True, [(self.key, self.digest)], (), counters if self.counter_key else ())

    def settle(self, outcome: Outcome) -> None:
        for future in self.futures:
            if not future.done():  # (a run cancelled meanwhile; or settled already)
                future.set_result(outcome)


class _Round:
    """The checks joined in one loop iteration, and the Task that sends them."""

    __slots__ = ("checks",)

    def __init__(self) -> None:
        self.checks: dict[tuple[bytes, str, bytes], _Check] = {}

    def abandon(self, _task: object) -> None:
        """The Task ended: any run still waiting (the Task cancelled, e.g. at shutdown, before or while it sent)
        gets an error rather than waiting for ever."""
        gone = (AIError(msgs.UPSTREAM_DOWN_MSG.format(detail="the model check was cancelled")), True)
        for check in self.checks.values():
            check.settle(gone)


class SharedChecks:
    """The model checks joined in this loop iteration (see the module docstring)."""

    def __init__(self, send: SendScripts) -> None:
        self._send = send
        self._round = _Round()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sending: set[asyncio.Task[None]] = set()  # (the loop keeps only a weak reference to a Task)
        self.writes_waiting = 0  # writes of runs whose model is apart that wait for their replies (Keyspace's)

    def join(self, key: bytes, digest: str, counters: Sequence[ScriptCall]) -> asyncio.Future[Outcome]:
        """The future of the check of ``key`` at ``digest``, adding ``counters`` (at most one RECORD_RUN call, for
        ``key``'s counters), made with the other runs of this loop iteration that check the same."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()  # (once a loop: it costs a getpid() syscall a call)
        counter_key = counters[0][1][0] if counters else b""
        identity = (key, digest, counter_key)
        current = self._round
        check = current.checks.get(identity)
        if check is None:
            check = current.checks[identity] = _Check(key, digest, counter_key)
            if len(current.checks) == 1:  # a new round: its Task's first step runs after this iteration's joins
                self._start(loop, current)
        if counters:
            _add_counts(check.numbers, counters[0][2])
        future: asyncio.Future[Outcome] = loop.create_future()
        check.futures.append(future)
        return future

    def _start(self, loop: asyncio.AbstractEventLoop, current: _Round) -> None:
        sending = loop.create_task(self._deliver(current))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)
        sending.add_done_callback(current.abandon)

    async def _deliver(self, current: _Round) -> None:
        if self._round is current:
            self._round = _Round()  # joins from here on make a round of their own
        checks = list(current.checks.values())
        try:
            replies = await self._send([check.call() for check in checks])
        except Exception as exc:  # (sending failed as a whole: each run raises it, as its own send would have)
            for check in checks:
                check.settle((exc, True))
            return
        for i in range(len(checks)):
            reply = replies[i]
            checks[i].settle((reply, unavailable(reply)))  # one shard down fails its own models' runs only


def _add_counts(totals: list[int], numbers: list[bytes]) -> None:
    """Add RECORD_RUN's four decimal ARGV numbers into ``totals``: a digit loop, compiled (``int()`` of bytes
    costs ~1k instructions a number)."""
    for i in range(4):
        text = numbers[i]
        value = 0
        for j in range(len(text)):
            value = value * 10 + text[j] - 48
        totals[i] += value
