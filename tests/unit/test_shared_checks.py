"""How runs join (server/store/shared_checks.py): one send a loop iteration with every run's write and one check
per model, digest and counters key (the counts summed) and per cached input key and value; each run's own future
settled with its own replies (a cancelled one skipped, each error its own copy); a shard that cannot answer fails
the runs that wrote or checked there only; a send that raises, or a Task cancelled, reaches every run waiting.
Then ``Keyspace.set_tensors`` on a cluster: a run alone sends its checks with its write, runs with others
waiting join. The store's side is tests/integration/test_cluster_shared_checks.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from backends.errors import AIError
from server.store.atomic import SET_TENSORS, ScriptCall, record_run_call, set_tensors_call
from server.store.cluster_keys import SLOTS, key_slot
from server.store.cluster_state import ClusterState
from server.store.cluster_topology import Topology
from server.store.keyspace import JOIN_WHEN_WAITING, Keyspace
from server.store.shared_checks import SharedChecks
from server.store.upstream import StoreAddress

STATS = b"m"  # the counters of model m are fields of its own hash
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


def _write(name: bytes = b"out") -> ScriptCall:
    return set_tensors_call([name], [b"v"])


def test_runs_of_one_iteration_send_one_call_with_their_writes_and_one_check_each() -> None:
    """Checks of one model, digest and counters key are one (their counts summed); of one input key and value,
    one; the writes follow the checks; each run gets its write's reply, then its checks'."""
    async def scenario() -> tuple[_Store, list[Any]]:
        store = _Store()
        checks = SharedChecks(store.send)
        futures = [checks.join(_write(b"o1"), (b"m", "d1"), _counts(1, 25, 2, 0), [(b"i", b"x")]),
                   checks.join(_write(b"o2"), (b"m", "d1"), _counts(1, 130, 2, 0), [(b"i", b"x")]),
                   checks.join(_write(b"o3"), (b"m", "d2"), _counts(1, 7, 1, 0), [(b"i", b"y")]),
                   checks.join(_write(b"o4"), (b"m", "d1"), [], []),
                   checks.join(_write(b"o5"), None, [], [(b"i", b"x"), (b"j", b"x")])]
        return store, [await future for future in futures]

    store, outcomes = asyncio.run(scenario())
    assert len(store.batches) == 1
    calls = store.batches[0]
    assert [call[0] for call in calls] == [SET_TENSORS] * 11
    assert calls[0][1] == [b"m", STATS] and calls[0][2] == [b"1", b".", b"", b".", b"d1", b"2", b"155", b"4", b"0"]
    assert calls[1][1] == [b"i"] and calls[1][2] == [b"1", b"", b".", b"", b"x"]  # an input: its value compared
    assert calls[2][1] == [b"m", STATS] and calls[2][2][-5:] == [b"d2", b"1", b"7", b"1", b"0"]
    assert calls[3][1] == [b"i"] and calls[3][2][-1] == b"y"
    assert calls[4][1] == [b"m"] and calls[4][2] == [b"1", b".", b"", b"", b"d1"]  # a redo: no counts
    assert calls[5][1] == [b"j"]
    assert [call[1] for call in calls[6:]] == [[b"o1"], [b"o2"], [b"o3"], [b"o4"], [b"o5"]]
    assert outcomes == [(["reply 6", "reply 0", "reply 1"], None), (["reply 7", "reply 0", "reply 1"], None),
                        (["reply 8", "reply 2", "reply 3"], None), (["reply 9", "reply 4"], None),
                        (["reply 10", "reply 1", "reply 5"], None)]


def test_each_iteration_sends_its_own_call() -> None:
    async def scenario() -> _Store:
        store = _Store()
        checks = SharedChecks(store.send)
        await checks.join(_write(), (b"m", "d"), _counts(1, 1, 1, 0), [])
        await checks.join(_write(), (b"m", "d"), _counts(1, 1, 1, 0), [])
        return store

    assert [len(batch) for batch in asyncio.run(scenario()).batches] == [2, 2]


def test_a_cancelled_run_leaves_the_others_their_reply() -> None:
    async def scenario() -> list[Any]:
        checks = SharedChecks(_Store().send)
        first = checks.join(_write(), (b"m", "d"), _counts(1, 1, 1, 0), [])
        second = checks.join(_write(), (b"m", "d"), _counts(1, 1, 1, 0), [])
        first.cancel()
        return [await second, first.cancelled()]

    assert asyncio.run(scenario()) == [(["reply 2", "reply 0"], None), True]


def test_a_send_that_raises_reaches_every_run_to_raise() -> None:
    unavailable = AIError("LOADING Redis is loading the dataset in memory")

    async def scenario() -> list[Any]:
        checks = SharedChecks(_Store(raises=unavailable).send)
        futures = [checks.join(_write(), (b"m", "d"), _counts(1, 1, 1, 0), []), checks.join(_write(), None, [],
                                                                                           [(b"i", b"x")])]
        return [await future for future in futures]

    outcomes = asyncio.run(scenario())
    assert [failure.args for _, failure in outcomes if failure is not None] == [unavailable.args] * 2
    assert outcomes[0][1] is not outcomes[1][1]  # each its own copy, as for a reply


@pytest.mark.parametrize("numbers", [(1, 0, 0, 1), (3, 1234567, 96, 0)])
def test_counts_are_summed_exactly(numbers: tuple[int, int, int, int]) -> None:
    async def scenario() -> list[bytes]:
        store = _Store()
        checks = SharedChecks(store.send)
        await asyncio.gather(*(checks.join(_write(), (b"m", "d"), _counts(*numbers), []) for _ in range(7)))
        return store.batches[0][0][2][-4:]

    assert asyncio.run(scenario()) == [str(7 * n).encode() for n in numbers]


def test_a_shard_that_cannot_answer_fails_the_runs_that_wrote_or_checked_there_only() -> None:
    async def scenario() -> list[Any]:
        checks = SharedChecks(_Store(down=b"sick").send)
        futures = [checks.join(_write(), (b"sick", "d"), [], []), checks.join(_write(), (b"well", "d"), [], []),
                   checks.join(_write(), None, [], [(b"sick", b"x")]), checks.join(_write(b"sick"), None, [], [])]
        return [await future for future in futures]

    outcomes = asyncio.run(scenario())
    assert [failure and failure.args for _, failure in outcomes] == [LOADING.args, None, LOADING.args, LOADING.args]
    assert outcomes[1] == (["reply 4", "reply 1"], None)


def test_each_run_gets_its_own_copy_of_a_shared_error() -> None:
    stale = AIError("STALEMODEL the model changed")

    async def scenario() -> list[Any]:
        async def send(calls: Sequence[ScriptCall]) -> list[Any]:
            return [stale if call[1] == [b"m"] else 1 for call in calls]

        checks = SharedChecks(send)
        futures = [checks.join(_write(), (b"m", "d"), [], []) for _ in range(2)]
        return [(await future)[0][1] for future in futures]

    first, second = asyncio.run(scenario())
    assert first.message == second.message == stale.message
    assert first is not second and first is not stale


def test_a_cancelled_send_answers_every_run_waiting() -> None:
    class _Hung:
        async def send(self, calls: Sequence[ScriptCall]) -> list[Any]:
            await asyncio.Event().wait()
            return []

    async def scenario() -> list[Any]:
        checks = SharedChecks(_Hung().send)
        futures = [checks.join(_write(), (b"m", "d"), [], []), checks.join(_write(), None, [], [(b"i", b"x")])]
        await asyncio.sleep(0)  # the Task is sending
        for task in list(checks._sending):
            task.cancel()
        return [await future for future in futures]

    outcomes = asyncio.run(scenario())
    assert [replies for replies, _ in outcomes] == [[], []]
    assert all(isinstance(failure, AIError) and "were cancelled" in failure.message for _, failure in outcomes)


def test_a_round_whose_task_was_cancelled_before_it_ran_keeps_no_later_run_waiting() -> None:
    """The Task cancelled before its first step (e.g. at shutdown): its run gets an error, and a later join
    makes a round of its own, which is sent (the cancelled round used to stay current, taking joins that no
    Task would send)."""
    async def scenario() -> tuple[Any, Any, list[list[ScriptCall]]]:
        store = _Store()
        checks = SharedChecks(store.send)
        first = checks.join(_write(), (b"m", "d"), [], [])
        for task in list(checks._sending):
            task.cancel()
        cancelled = await first
        later = await asyncio.wait_for(checks.join(_write(), (b"m", "d"), [], []), 5)
        return cancelled, later, store.batches

    cancelled, later, batches = asyncio.run(scenario())
    assert isinstance(cancelled[1], AIError) and "were cancelled" in cancelled[1].message
    assert later == (["reply 1", "reply 0"], None)
    assert len(batches) == 1


class _Shards:
    """A store link over a cluster whose one primary serves every slot: it answers each EVALSHA with 1, or
    LOADING when it names the model ``down``; each call takes a loop iteration, like a round trip."""

    def __init__(self, down: bytes) -> None:
        self.down = down
        self.sent: list[list[list[bytes]]] = []
        self.router = ClusterState(StoreAddress())  # (never started: its map is set here)
        self.router.topology = Topology((StoreAddress(),), tuple([0] * SLOTS))

    async def pipeline(self, commands: list[list[bytes]]) -> list[Any]:
        self.sent.append(commands)
        await asyncio.sleep(0)
        return [LOADING if self.down in argv else 1 for argv in commands]


MODEL_A, MODEL_B, OUT, MODEL_T, INPUT = b"model3", b"in0", b"{t}out", b"{t}m", b"in1"


def test_writes_alone_and_together_over_a_cluster() -> None:
    """The first two writes (no more than JOIN_WHEN_WAITING waiting, this one counted) send their checks with
    their outputs' write, in one call each (split by slot); three more made while they wait join one send: their
    writes, a check of each model apart and one of the cached input apart. Model A's shard cannot answer: A's
    runs raise, the others do not."""
    assert len({key_slot(MODEL_A), key_slot(MODEL_B), key_slot(OUT), key_slot(INPUT)}) == 4
    assert key_slot(MODEL_T) == key_slot(OUT)
    link = _Shards(down=MODEL_A)
    keyspace = Keyspace(link, 0)

    async def write(model: bytes, inputs: list[tuple[bytes, bytes]]) -> Any:
        counters = [record_run_call(keyspace.stats_key(model), 1, 5, 1, 0)]
        try:
            await keyspace.set_tensors([OUT], [b"v"], also=counters, model=(model, "d"), inputs=inputs)
        except AIError as exc:
            return exc.message
        return "OK"

    async def scenario() -> list[Any]:
        return list(await asyncio.gather(write(MODEL_T, [(INPUT, b"x")]), write(MODEL_A, []), write(MODEL_A, []),
                                         write(MODEL_B, []), write(MODEL_T, [(INPUT, b"x")])))

    assert JOIN_WHEN_WAITING == 2
    assert asyncio.run(scenario()) == ["OK"] + [LOADING.message] * 2 + ["OK", "OK"]
    calls = [len(commands) for commands in link.sent]
    assert calls == [2, 2, 6]  # write + check twice; then 3 checks (model A, model B, the input) and 3 writes
    alone = link.sent[0]  # the model in the outputs' slot rides in their write; the input is checked on its own
    assert [argv[3] for argv in alone] == [OUT, INPUT] and MODEL_T in alone[0] and b"x" in alone[1]
    joined = link.sent[2]
    assert [argv[3] for argv in joined] == [MODEL_A, MODEL_B, INPUT, OUT, OUT, OUT]
    assert MODEL_T in joined[5]  # the model in the outputs' slot is checked by their write


class _Nodes:
    """Three nodes by a key's first letter: ``a`` and ``b`` answer at once (each reply naming its node and its
    place in that node's part), ``h`` hangs until released, ``f`` cannot be reached (its send raises)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.parts: list[list[ScriptCall]] = []

    NODES = {letter: object() for letter in (b"a", b"b", b"h", b"f")}  # one object a node, as a map's addresses

    def node_of(self, key: bytes) -> object:
        return self.NODES[key[:1]]

    async def send(self, calls: Sequence[ScriptCall]) -> list[Any]:
        self.parts.append(list(calls))
        names = {call[1][0][:1] for call in calls}
        assert len(names) == 1, "one node's calls a send"
        name = names.pop()
        if name == b"h":
            await self.release.wait()
        elif name == b"f":
            raise AIError("ERR backing store unavailable: f: [Errno 111] Connection refused")
        return [f"{name!r} {i}" for i in range(len(calls))]


def test_a_round_over_several_nodes_answers_each_run_once_its_own_nodes_answered() -> None:
    """A round's calls go to their nodes apart: a run whose write and checks are on nodes that answered is
    settled while another run of the same round waits on a node that hangs; a node that cannot be reached fails
    only the runs that wrote or checked there; the hung node's runs are answered once it answers."""
    async def scenario() -> tuple[list[Any], list[bool], list[Any], _Nodes]:
        nodes = _Nodes()
        checks = SharedChecks(nodes.send, nodes.node_of)
        futures = [checks.join(_write(b"a1"), (b"hm", "d"), [], []),  # its model's check on the hung node
                   checks.join(_write(b"a2"), (b"bm", "d"), [], [(b"bi", b"v")]),  # a and b only
                   checks.join(_write(b"h3"), None, [], [(b"bi", b"v")]),  # its write on the hung node
                   checks.join(_write(b"a4"), None, [], [(b"fi", b"v")])]  # an input on the unreachable node
        for _ in range(5):
            await asyncio.sleep(0)
        early = [future.result() if future.done() else None for future in futures]
        done = [future.done() for future in futures]
        nodes.release.set()
        return early, done, [await future for future in futures], nodes

    early, done, final, nodes = asyncio.run(scenario())
    assert done == [False, True, False, True]
    assert early[1] == (["b'a' 1", "b'b' 0", "b'b' 1"], None)  # its write (a's second call), then its checks
    assert early[3][0] == [] and isinstance(early[3][1], AIError) and "Connection refused" in early[3][1].message
    assert final[0] == (["b'a' 0", "b'h' 0"], None)
    assert final[2] == (["b'h' 1", "b'b' 1"], None)
    assert sorted(len(part) for part in nodes.parts) == [1, 2, 2, 3]  # f; h: a check, a write; b: two checks; a
