"""How a write of tensors is made, as the store's router plans it (``Router.write_plan``): on a single store one
call; on a cluster one per slot (``tensor_writes``), which carries which check, cached input and AI.INFO counter,
a slot with checks and no tensor getting a call that only checks, and a run's checks on other shards set apart
(``checks_apart``). And the other answers the keyspace asks of its router instead of branching on the kind of
store: a derived key's hash tag, and whether inputs share the outputs' slot. Pure planning: no store is asked."""

from __future__ import annotations

from typing import Any

from server.store.atomic import SET_TENSORS, record_run_call, stats_key
from server.store.cache import TrackedCache
from server.store.cluster_keys import SlotTags, key_slot
from server.store.cluster_link import ClusterLink, OneNode, RedisLink, Router
from server.store.cluster_state import ClusterState
from server.store.keyspace import JOIN_WHEN_WAITING, Keyspace
from server.store.slot_writes import checks_apart, tensor_writes
from server.store.upstream import StoreAddress


class _NoLink:
    """Never sent on: the planning under test sends nothing."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def pipeline(self, commands: list[list[bytes]]) -> Any:
        raise AssertionError("nothing is sent while planning")


def _one_node() -> OneNode:
    return OneNode(RedisLink(StoreAddress(), 0))  # (never connected: nothing is sent)


def _one_node_link(db: int) -> ClusterLink:
    """A single store's link to database ``db``, as the coherent cache asks for one (never connected)."""
    return ClusterLink(OneNode(RedisLink(StoreAddress(), db)))


TAGS = SlotTags()
MODEL, INPUT, OUT_A, OUT_B = b"model3", b"in0", b"{t}a", b"{t}b"
DIGEST = "d" * 40


def test_slots_of_the_keys_differ() -> None:
    assert len({key_slot(k) for k in (MODEL, INPUT, OUT_A)}) == 3
    assert key_slot(OUT_A) == key_slot(OUT_B)


def test_outputs_in_one_slot_take_one_call_and_each_other_slot_one_check() -> None:
    counters = record_run_call(stats_key(MODEL), 1, 10, 1, 0)
    calls, inside = tensor_writes(TAGS, [OUT_A, OUT_B], [b"x", b"y"], True, [(MODEL, DIGEST)], [(INPUT, b"v")],
                                  [counters])
    assert inside
    assert calls == [
        (SET_TENSORS, [OUT_A, OUT_B], [b"1", b"", b"", b"", b"x", b"y"]),
        (SET_TENSORS, [MODEL, stats_key(MODEL)], [b"1", b".", b"", b".", DIGEST.encode(), b"1", b"10",
                                                           b"1", b"0"]),
        (SET_TENSORS, [INPUT], [b"1", b"", b".", b"", b"v"]),
    ]


def test_what_shares_the_outputs_slot_rides_in_their_call() -> None:
    model, cached = b"{t}m", b"{t}x"
    counters = record_run_call(stats_key(model), 1, 10, 1, 0)
    calls, inside = tensor_writes(TAGS, [OUT_A], [b"x"], True, [(model, DIGEST)], [(cached, b"v"), (INPUT, b"w")],
                                  [counters])
    assert inside and len(calls) == 2
    _script, script_keys, argv = calls[0]
    assert script_keys == [OUT_A, model, cached, stats_key(model)]
    assert argv[:4] == [b"1", b".", b".", b"."]
    assert calls[1] == (SET_TENSORS, [INPUT], [b"1", b"", b".", b"", b"w"])


def test_counters_of_a_slot_with_no_call_are_left_to_the_caller() -> None:
    counters = record_run_call(stats_key(b"elsewhere"), 1, 10, 1, 0)
    calls, inside = tensor_writes(TAGS, [OUT_A], [b"x"], True, [(MODEL, DIGEST)], [], [counters])
    assert not inside
    assert key_slot(b"elsewhere") not in {key_slot(MODEL), key_slot(OUT_A)}
    assert calls == [(SET_TENSORS, [OUT_A], [b"1", b"", b"", b"", b"x"]),
                     (SET_TENSORS, [MODEL], [b"1", b".", b"", b"", DIGEST.encode()])]


def test_outputs_over_several_slots_get_a_call_each() -> None:
    calls, inside = tensor_writes(TAGS, [OUT_A, INPUT], [b"x", b"y"], True, [(MODEL, DIGEST)])
    assert inside
    assert [call[1] for call in calls] == [[OUT_A], [INPUT], [MODEL]]


def test_one_store_takes_everything_in_one_call() -> None:
    counters = [record_run_call(stats_key(MODEL), 1, 10, 1, 0)]
    calls, inside, apart = _one_node().write_plan([OUT_A, INPUT], [b"x", b"y"], True, (MODEL, DIGEST),
                                                  [(b"g", DIGEST)], [(b"k", b"v")], counters)
    assert inside and apart is None and len(calls) == 1
    assert calls[0][1] == [OUT_A, INPUT, MODEL, b"g", b"k", stats_key(MODEL)]


def test_keys_in_one_slot_take_one_call_with_their_counters_only_when_those_share_it() -> None:
    model, cached = b"{t}m", b"{t}x"
    here = record_run_call(stats_key(model), 1, 10, 1, 0)
    calls, inside = tensor_writes(TAGS, [OUT_A, OUT_B], [b"x", b"y"], True, [(model, DIGEST)], [(cached, b"v")],
                                  [here])
    assert inside
    assert calls == [(SET_TENSORS, [OUT_A, OUT_B, model, cached, stats_key(model)],
                      [b"1", b".", b".", b".", b"x", b"y", DIGEST.encode(), b"v", b"1", b"10", b"1", b"0"])]
    elsewhere = record_run_call(stats_key(MODEL), 1, 10, 1, 0)
    calls, inside = tensor_writes(TAGS, [OUT_A], [b"x"], False, [], [], [here, elsewhere])
    assert not inside  # the caller sends both counters beside the write
    assert calls == [(SET_TENSORS, [OUT_A], [b"0", b"", b"", b"", b"x"])]


def test_a_key_in_another_slot_anywhere_splits_the_write() -> None:
    for checked, inputs in (([(MODEL, DIGEST)], []), ([], [(INPUT, b"v")])):
        calls, _inside = tensor_writes(TAGS, [OUT_A, OUT_B], [b"x", b"y"], True, checked, inputs)
        assert [call[1] for call in calls] == [[OUT_A, OUT_B], [MODEL if checked else INPUT]]
    calls, _inside = tensor_writes(TAGS, [OUT_A, INPUT], [b"x", b"y"], True, [])
    assert [call[1] for call in calls] == [[OUT_A], [INPUT]]


def test_checks_apart_says_what_of_a_run_lies_outside_its_outputs_slot() -> None:
    """Everything in one slot: no join, one call; a model or an input apart: the write that joins, the inputs
    split (in order) between its slot's call and checks of their own; outputs that spread, or counters outside
    the model's slot: the general split."""
    tags = SlotTags()
    near, also_near = (b"{t}x", b"v"), (b"{t}y", b"w")
    far = (INPUT, b"u")
    assert key_slot(MODEL) != key_slot(OUT_A) and key_slot(INPUT) != key_slot(OUT_A)
    counts = [record_run_call(b"{t}m", 1, 5, 1, 0)]
    model_counts = [record_run_call(stats_key(MODEL), 1, 5, 1, 0)]
    assert checks_apart(tags, [OUT_A], (b"{t}m", DIGEST), [near], counts) == (False, [near], [])
    assert checks_apart(tags, [OUT_A], (MODEL, DIGEST), [near], model_counts) == (True, [near], [])
    assert checks_apart(tags, [OUT_A, OUT_B], (b"{t}m", DIGEST), [near, far, also_near], counts) == (
        False, [near, also_near], [far])
    assert checks_apart(tags, [OUT_A], (b"{t}m", DIGEST), [far, near], counts) == (False, [near], [far])
    assert checks_apart(tags, [OUT_A, INPUT], (b"{t}m", DIGEST), [near], counts) is None
    assert checks_apart(tags, [OUT_A], (b"{t}m", DIGEST), [near], model_counts) is None


def test_a_cluster_plans_a_run_apart_in_one_call_or_by_slot() -> None:
    """A cluster's router: a run whose model or an input lies in another slot than its outputs: no call, the plan
    apart; a run all in one slot: one call holding everything; a write with guards (a stored graph's), or whose
    outputs spread: split by slot."""
    cluster = ClusterState(StoreAddress())  # (never started: planning asks no node)
    counters = [record_run_call(stats_key(MODEL), 1, 5, 1, 0)]
    assert cluster.write_plan([OUT_A], [b"x"], True, (MODEL, DIGEST), [], [], counters) == (
        [], False, (True, [], []))
    near, far = (b"{t}x", b"v"), (INPUT, b"u")
    assert cluster.write_plan([OUT_A], [b"x"], True, (b"{t}m", DIGEST), [], [near, far], []) == (
        [], False, (False, [near], [far]))
    together = [record_run_call(stats_key(b"{t}m"), 1, 5, 1, 0)]
    calls, inside, apart = cluster.write_plan([OUT_A, OUT_B], [b"x", b"y"], True, (b"{t}m", DIGEST), [], [near],
                                              together)
    assert inside and apart is None
    assert calls == [(SET_TENSORS, [OUT_A, OUT_B, b"{t}m", b"{t}x", stats_key(b"{t}m")],
                      [b"1", b".", b".", b".", b"x", b"y", DIGEST.encode(), b"v", b"1", b"5", b"1", b"0"])]
    calls, inside, apart = cluster.write_plan([OUT_A], [b"x"], True, (b"{t}m", DIGEST), [(MODEL, DIGEST)], [],
                                              together)
    assert inside and apart is None and [call[1] for call in calls] == [[OUT_A, b"{t}m", stats_key(b"{t}m")],
                                                                         [MODEL]]
    calls, inside, apart = cluster.write_plan([OUT_A, INPUT], [b"x", b"y"], True, (MODEL, DIGEST), [], [],
                                              counters)
    assert inside and apart is None and [call[1] for call in calls] == [[OUT_A], [INPUT], [MODEL, MODEL]]


def test_an_older_counters_key_loses_its_tag_only_on_a_cluster() -> None:
    """An older release's counters key shares its object's slot on a cluster by a hash tag before its name; a
    single store's keys all share one slot, so there is no tag to take away."""
    one, cluster = _one_node(), ClusterState(StoreAddress())
    assert one.untagged(b"{t}m") == b"{t}m"
    tagged = b"{" + cluster.tags.of(cluster.tags.slot(MODEL)) + b"}" + MODEL  # the key, less its prefix
    assert key_slot(tagged) == key_slot(MODEL)
    assert cluster.untagged(tagged) == MODEL and cluster.untagged(MODEL) == MODEL


def test_a_cluster_under_load_reads_inputs_outside_the_outputs_slot() -> None:
    """Inputs in the outputs' slot always come from the cache; one elsewhere only while fewer than
    JOIN_WHEN_WAITING writes with checks apart wait (under load its read gathers concurrent runs)."""
    keyspace = Keyspace(_NoLink(ClusterState(StoreAddress())), 0, TrackedCache(_one_node_link, 1 << 20))  # on
    near, far = [b"{t}x"], [INPUT]
    shared = keyspace._shared
    assert keyspace.inputs_from_cache(near, [OUT_A]) and keyspace.inputs_from_cache(far, [OUT_A])
    shared.writes_waiting = JOIN_WHEN_WAITING
    assert keyspace.inputs_from_cache(near, [OUT_A, OUT_B])
    assert not keyspace.inputs_from_cache([*near, *far], [OUT_A])
    one = Keyspace(_NoLink(_one_node()), 0, TrackedCache(_one_node_link, 1 << 20))
    assert one.inputs_from_cache(far, [OUT_A])
    one._shared.writes_waiting = JOIN_WHEN_WAITING  # (never on a single store, whose runs have nothing apart)
    assert one.inputs_from_cache(far, [OUT_A])  # every key in its one slot
