"""How a write of tensors is split over a cluster's slots (``Keyspace._tensor_writes``): which script call
carries which check, cached input and AI.INFO counter; a slot with checks and no tensor gets a call that only
checks. Pure planning: no store is asked."""

from __future__ import annotations

from typing import Any

from server.store.atomic import SET_TENSORS, record_run_call
from server.store.cluster_keys import SlotTags, key_slot
from server.store.keyspace import Keyspace


class _NoLink:
    """Never called: the planning under test sends nothing."""

    def pipeline(self, commands: list[list[bytes]]) -> Any:
        raise AssertionError("nothing is sent while planning")

    def shards(self) -> list[Any]:
        return [self]


def _cluster_keyspace() -> Keyspace:
    return Keyspace(_NoLink(), 0, None, SlotTags())


MODEL, INPUT, OUT_A, OUT_B = b"model3", b"in0", b"{t}a", b"{t}b"
DIGEST = "d" * 40


def test_slots_of_the_keys_differ() -> None:
    assert len({key_slot(k) for k in (MODEL, INPUT, OUT_A)}) == 3
    assert key_slot(OUT_A) == key_slot(OUT_B)


def test_outputs_in_one_slot_take_one_call_and_each_other_slot_one_check() -> None:
    keyspace = _cluster_keyspace()
    counters = record_run_call(keyspace.stats_key(MODEL), 1, 10, 1, 0)
    calls, inside = keyspace._tensor_writes([OUT_A, OUT_B], [b"x", b"y"], True, [(MODEL, DIGEST)],
                                            [(INPUT, b"v")], [counters])
    assert inside
    assert calls == [
        (SET_TENSORS, [OUT_A, OUT_B], [b"1", b"", b"", b"", b"x", b"y"]),
        (SET_TENSORS, [MODEL, keyspace.stats_key(MODEL)], [b"1", b".", b"", b".", DIGEST.encode(), b"1", b"10",
                                                           b"1", b"0"]),
        (SET_TENSORS, [INPUT], [b"1", b"", b".", b"", b"v"]),
    ]


def test_what_shares_the_outputs_slot_rides_in_their_call() -> None:
    keyspace = _cluster_keyspace()
    model, cached = b"{t}m", b"{t}x"
    counters = record_run_call(keyspace.stats_key(model), 1, 10, 1, 0)
    calls, inside = keyspace._tensor_writes([OUT_A], [b"x"], True, [(model, DIGEST)], [(cached, b"v"),
                                            (INPUT, b"w")], [counters])
    assert inside and len(calls) == 2
    _script, script_keys, argv = calls[0]
    assert script_keys == [OUT_A, model, cached, keyspace.stats_key(model)]
    assert argv[:4] == [b"1", b".", b".", b"."]
    assert calls[1] == (SET_TENSORS, [INPUT], [b"1", b"", b".", b"", b"w"])


def test_counters_of_a_slot_with_no_call_are_left_to_the_caller() -> None:
    keyspace = _cluster_keyspace()
    counters = record_run_call(keyspace.stats_key(b"elsewhere"), 1, 10, 1, 0)
    calls, inside = keyspace._tensor_writes([OUT_A], [b"x"], True, [(MODEL, DIGEST)], [], [counters])
    assert not inside
    assert key_slot(b"elsewhere") not in {key_slot(MODEL), key_slot(OUT_A)}
    assert calls == [(SET_TENSORS, [OUT_A], [b"1", b"", b"", b"", b"x"]),
                     (SET_TENSORS, [MODEL], [b"1", b".", b"", b"", DIGEST.encode()])]


def test_outputs_over_several_slots_get_a_call_each() -> None:
    keyspace = _cluster_keyspace()
    calls, inside = keyspace._tensor_writes([OUT_A, INPUT], [b"x", b"y"], True, [(MODEL, DIGEST)])
    assert inside
    assert [call[1] for call in calls] == [[OUT_A], [INPUT], [MODEL]]


def test_one_store_takes_everything_in_one_call() -> None:
    keyspace = Keyspace(_NoLink(), 0)
    calls, inside = keyspace._tensor_writes([OUT_A, INPUT], [b"x", b"y"], True, [(MODEL, DIGEST)], [(b"k", b"v")])
    assert inside and len(calls) == 1
    assert calls[0][1] == [OUT_A, INPUT, MODEL, b"k"]


def test_keys_in_one_slot_take_one_call_with_their_counters_only_when_those_share_it() -> None:
    keyspace = _cluster_keyspace()
    model, cached = b"{t}m", b"{t}x"
    here = record_run_call(keyspace.stats_key(model), 1, 10, 1, 0)
    calls, inside = keyspace._tensor_writes([OUT_A, OUT_B], [b"x", b"y"], True, [(model, DIGEST)],
                                            [(cached, b"v")], [here])
    assert inside
    assert calls == [(SET_TENSORS, [OUT_A, OUT_B, model, cached, keyspace.stats_key(model)],
                      [b"1", b".", b".", b".", b"x", b"y", DIGEST.encode(), b"v", b"1", b"10", b"1", b"0"])]
    elsewhere = record_run_call(keyspace.stats_key(MODEL), 1, 10, 1, 0)
    calls, inside = keyspace._tensor_writes([OUT_A], [b"x"], False, [], [], [here, elsewhere])
    assert not inside  # the caller sends both counters beside the write
    assert calls == [(SET_TENSORS, [OUT_A], [b"0", b"", b"", b"", b"x"])]


def test_a_key_in_another_slot_anywhere_splits_the_write() -> None:
    keyspace = _cluster_keyspace()
    for checked, inputs in (([(MODEL, DIGEST)], []), ([], [(INPUT, b"v")])):
        calls, _inside = keyspace._tensor_writes([OUT_A, OUT_B], [b"x", b"y"], True, checked, inputs)
        assert [call[1] for call in calls] == [[OUT_A, OUT_B], [MODEL if checked else INPUT]]
    calls, _inside = keyspace._tensor_writes([OUT_A, INPUT], [b"x", b"y"], True, [])
    assert [call[1] for call in calls] == [[OUT_A], [INPUT]]
