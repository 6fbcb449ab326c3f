"""How runs join a model's check (server/store/shared_checks.py): one call a loop iteration per model, digest and
counters key, the counts summed; each run's own future settled (a cancelled one skipped); a shard that cannot
answer fails its own model's runs only; a send that raises, or a Task cancelled, reaches every run waiting.
Then ``Keyspace.set_tensors`` on a cluster: a run alone sends its check with its write, runs with others
waiting join. The store's side is tests/integration/test_cluster_shared_checks.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from backends.errors import AIError
from server.store.atomic import SET_TENSORS, ScriptCall, record_run_call
from server.store.cluster_keys import SlotTags, key_slot
from server.store.keyspace import JOIN_WHEN_WAITING, Keyspace
from server.store.shared_checks import SharedChecks

STATS = b"__redisai_stats__:{x}m"
LOADING = AIError("LOADING Redis is loading the dataset in memory")


class _Store:
    """Answers each call with a reply of its own, or raises; records what it was sent, batch by batch."""

    def __init__(self, raises: Exception | None = None, down: bytes = b"") -> None:
        self.batches: list[list[ScriptCall]] = []
        self.raises = raises
        self.down = down  # the model whose shard answers LOADING

    async def send(self, calls: Sequence[ScriptCall]) -> list[Any]:
        self.batches.append(list(calls))
        if self.raises is not None:
            raise self.raises
        return [LOADING if self.down in call[1] else f"reply {i}" for i, call in enumerate(calls)]


def _counts(*numbers: int) -> list[ScriptCall]:
    return [record_run_call(STATS, *numbers)]


def test_runs_of_one_iteration_send_one_call_per_model_digest_and_counters() -> None:
    async def scenario() -> tuple[_Store, list[Any]]:
        store = _Store()
        checks = SharedChecks(store.send)
        futures = [checks.join(b"m", "d1", _counts(1, 25, 2, 0)), checks.join(b"m", "d1", _counts(1, 130, 2, 0)),
                   checks.join(b"m", "d2", _counts(1, 7, 1, 0)), checks.join(b"m", "d1", [])]
        return store, [await future for future in futures]

    store, outcomes = asyncio.run(scenario())
    assert len(store.batches) == 1
    calls = store.batches[0]
    assert [call[0] for call in calls] == [SET_TENSORS] * 3
    assert calls[0][1] == [b"m", STATS] and calls[0][2] == [b"1", b".", b"", b".", b"d1", b"2", b"155", b"4", b"0"]
    assert calls[1][1] == [b"m", STATS] and calls[1][2][-5:] == [b"d2", b"1", b"7", b"1", b"0"]
    assert calls[2][1] == [b"m"] and calls[2][2] == [b"1", b".", b"", b"", b"d1"]  # a redo: no counts
    assert outcomes == [("reply 0", False), ("reply 0", False), ("reply 1", False), ("reply 2", False)]


def test_each_iteration_sends_its_own_call() -> None:
    async def scenario() -> _Store:
        store = _Store()
        checks = SharedChecks(store.send)
        await checks.join(b"m", "d", _counts(1, 1, 1, 0))
        await checks.join(b"m", "d", _counts(1, 1, 1, 0))
        return store

    assert [len(batch) for batch in asyncio.run(scenario()).batches] == [1, 1]


def test_a_cancelled_run_leaves_the_others_their_reply() -> None:
    async def scenario() -> list[Any]:
        checks = SharedChecks(_Store().send)
        first, second = checks.join(b"m", "d", _counts(1, 1, 1, 0)), checks.join(b"m", "d", _counts(1, 1, 1, 0))
        first.cancel()
        return [await second, first.cancelled()]

    assert asyncio.run(scenario()) == [("reply 0", False), True]


def test_a_send_that_raises_reaches_every_run_to_raise() -> None:
    unavailable = AIError("LOADING Redis is loading the dataset in memory")

    async def scenario() -> list[Any]:
        checks = SharedChecks(_Store(raises=unavailable).send)
        futures = [checks.join(b"m", "d", _counts(1, 1, 1, 0)), checks.join(b"n", "d", [])]
        return [await future for future in futures]

    assert asyncio.run(scenario()) == [(unavailable, True), (unavailable, True)]


@pytest.mark.parametrize("numbers", [(1, 0, 0, 1), (3, 1234567, 96, 0)])
def test_counts_are_summed_exactly(numbers: tuple[int, int, int, int]) -> None:
    async def scenario() -> list[bytes]:
        store = _Store()
        checks = SharedChecks(store.send)
        await asyncio.gather(*(checks.join(b"m", "d", _counts(*numbers)) for _ in range(7)))
        return store.batches[0][0][2][-4:]

    assert asyncio.run(scenario()) == [str(7 * n).encode() for n in numbers]


def test_a_shard_that_cannot_answer_fails_the_runs_of_its_own_model_only() -> None:
    async def scenario() -> list[Any]:
        checks = SharedChecks(_Store(down=b"sick").send)
        futures = [checks.join(b"sick", "d", []), checks.join(b"well", "d", [])]
        return [await future for future in futures]

    assert asyncio.run(scenario()) == [(LOADING, True), ("reply 1", False)]


def test_a_cancelled_send_answers_every_run_waiting() -> None:
    class _Hung:
        async def send(self, calls: Sequence[ScriptCall]) -> list[Any]:
            await asyncio.Event().wait()
            return []

    async def scenario() -> list[Any]:
        checks = SharedChecks(_Hung().send)
        futures = [checks.join(b"m", "d", []), checks.join(b"n", "d", [])]
        await asyncio.sleep(0)  # the Task is sending
        for task in list(checks._sending):
            task.cancel()
        return [await future for future in futures]

    outcomes = asyncio.run(scenario())
    assert [raised for _, raised in outcomes] == [True, True]
    assert all("the model check was cancelled" in error.message for error, _ in outcomes)


class _Shards:
    """A store link that answers each EVALSHA with 1, or LOADING when it names the model ``down``; each call
    takes a loop iteration, like a round trip."""

    def __init__(self, down: bytes) -> None:
        self.down = down
        self.sent: list[list[list[bytes]]] = []

    async def pipeline(self, commands: list[list[bytes]]) -> list[Any]:
        self.sent.append(commands)
        await asyncio.sleep(0)
        return [LOADING if self.down in argv else 1 for argv in commands]

    def shards(self) -> list[Any]:
        return [self]


MODEL_A, MODEL_B, OUT = b"model3", b"in0", b"{t}out"


def test_writes_alone_and_together_over_a_cluster() -> None:
    """The first two writes (fewer than JOIN_WHEN_WAITING waiting) send their check with their outputs' write,
    in one call each; two more made while they wait join checks of their own models, sent in one call; model
    A's shard cannot answer: A's runs raise, B's does not."""
    assert len({key_slot(MODEL_A), key_slot(MODEL_B), key_slot(OUT)}) == 3
    link = _Shards(down=MODEL_A)
    keyspace = Keyspace(link, 0, None, SlotTags())

    async def write(model: bytes) -> Any:
        counters = [record_run_call(keyspace.stats_key(model), 1, 5, 1, 0)]
        try:
            await keyspace.set_tensors([OUT], [b"v"], also=counters, model=(model, "d"))
        except AIError as exc:
            return exc.message
        return "OK"

    async def scenario() -> list[Any]:
        return list(await asyncio.gather(write(MODEL_A), write(MODEL_A), write(MODEL_A), write(MODEL_B)))

    assert JOIN_WHEN_WAITING == 2
    assert asyncio.run(scenario()) == [LOADING.message] * 3 + ["OK"]
    calls = [len(commands) for commands in link.sent]
    assert calls == [2, 2, 1, 1, 2]  # write + check twice; then the two writes; then both joined checks in one
