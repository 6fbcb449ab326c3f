"""How a write of tensors is made: one SET_TENSORS call on a single store; over a Redis Cluster one per slot,
each atomic on its shard (server/store/atomic.py), with the checks, cached inputs and AI.INFO counters of that
slot, and a run's checks that lie on other shards than its outputs set apart.

Pure planning, nothing sent. The store's router answers with one of these (server/store/cluster_link.py
``Router.write_plan``: ``one_write``; server/store/cluster_state.py: ``slot_write_plan``), and
``Keyspace.set_tensors`` (server/store/keyspace.py) sends what it returns.
Usage: ``calls, counted, apart = slot_write_plan(tags, keys, values, True, (model, digest), [], inputs,
counters)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from server.store.atomic import ScriptCall, set_tensors_call
from server.store.cluster_keys import SlotTags

Apart = tuple[bool, Sequence[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]
"""``checks_apart``'s plan: whether the model is apart; the cached inputs in the outputs' slot; those apart."""

WritePlan = tuple[list[ScriptCall], bool, Apart | None]
"""A write's script calls and whether the AI.INFO counters are made inside them (else the caller sends them
beside); or, for a run whose model or a cached input lies on another shard than its outputs, no calls and what
lies apart (the write is then made with its checks apart: server/store/shared_checks.py)."""


def one_write(keys: Sequence[bytes], values: list[bytes], empty_is_free: bool, model: tuple[bytes, str] | None,
              guards: Sequence[tuple[bytes, str]], inputs: Sequence[tuple[bytes, bytes]],
              counters: Sequence[ScriptCall]) -> WritePlan:
    """A single store's write: one SET_TENSORS holding the tensors, the ``model`` and ``guards`` (key, digest)
    checks, the cached ``inputs`` and the ``counters``; nothing apart."""
    checked = [model, *guards] if model is not None else guards
    return [set_tensors_call(keys, values, empty_is_free, checked, inputs, counters)], True, None


def slot_write_plan(tags: SlotTags, keys: Sequence[bytes], values: list[bytes], empty_is_free: bool,
                    model: tuple[bytes, str] | None, guards: Sequence[tuple[bytes, str]],
                    inputs: Sequence[tuple[bytes, bytes]], counters: Sequence[ScriptCall]) -> WritePlan:
    """A cluster's write. A run's (a ``model``, no ``guards``) whose outputs share a slot: with its model or a
    cached input in another slot, set apart (``checks_apart``); with neither, one call holding everything (no
    grouping). Any other write: split by slot (``tensor_writes``)."""
    if model is not None and not guards:
        apart = checks_apart(tags, keys, model, inputs, counters)
        if apart is not None:
            if apart[0] or apart[2]:
                return [], False, apart
            return [set_tensors_call(keys, values, empty_is_free, [model], inputs, counters)], True, None
    checked = [model, *guards] if model is not None else guards
    calls, counted = tensor_writes(tags, keys, values, empty_is_free, checked, inputs, counters)
    return calls, counted, None


def tensor_writes(tags: SlotTags, keys: Sequence[bytes], values: list[bytes], empty_is_free: bool,
                  checked: Sequence[tuple[bytes, str]], inputs: Sequence[tuple[bytes, bytes]] = (),
                  counters: Sequence[ScriptCall] = ()) -> tuple[list[ScriptCall], bool]:
    """One SET_TENSORS call per slot of the keys, each atomic on its shard. The (key, digest) pairs ``checked``
    and the cached ``inputs`` ride with the keys of their slot; checks in a slot with no output are made on
    their own shard in the same round trip (a SET_TENSORS with no tensor). The AI.INFO ``counters`` (RECORD_RUN
    calls) go into the call of their slot when there is one (a model's counters live in its slot: with its
    digest check, when its outputs are elsewhere). The calls, and whether the counters are in them (else the
    caller sends them)."""
    slot = _one_slot(tags, keys, checked, inputs)
    if slot is not None:  # one slot (AI.TENSORSET, a run's keys tagged alike): one call, no grouping lists
        inside = _counted_in(tags, counters, slot)
        return [set_tensors_call(keys, values, empty_is_free, checked, inputs, counters if inside else ())], inside
    key_slots = [tags.slot(key) for key in keys]
    checked_in = [tags.slot(pair[0]) for pair in checked]
    inputs_in = [tags.slot(pair[0]) for pair in inputs]
    counters_in = [tags.slot(call[1][0]) for call in counters]
    return _per_slot_writes(keys, values, key_slots, checked, checked_in, inputs, inputs_in, counters,
                            counters_in, empty_is_free)


def checks_apart(tags: SlotTags, keys: Sequence[bytes], model: tuple[bytes, str],
                 inputs: Sequence[tuple[bytes, bytes]], counters: Sequence[ScriptCall]) -> Apart | None:
    """For a run's write whose outputs share one slot and whose counters (at most one RECORD_RUN call) are in
    its model's slot: whether the model is in another slot, the cached inputs in the outputs' slot (checked by
    their write) and those apart — with a model apart or an input apart, the write that joins other runs'
    (server/store/shared_checks.py); with neither, one call holds everything (no grouping). None otherwise
    (outputs that spread): ``tensor_writes`` splits it by slot. Index loops, and no list built when no input is
    apart: every run over a cluster asks."""
    if len(counters) > 1 or not keys:
        return None
    slot = tags.slot(keys[0])
    for i in range(1, len(keys)):
        if tags.slot(keys[i]) != slot:
            return None
    model_slot = tags.slot(model[0])
    if counters and tags.slot(counters[0][1][0]) != model_slot:
        return None
    first_apart = 0
    while first_apart < len(inputs) and tags.slot(inputs[first_apart][0]) == slot:
        first_apart += 1
    if first_apart == len(inputs):
        return model_slot != slot, inputs, []
    here = list(inputs[:first_apart])
    there = [inputs[first_apart]]
    for i in range(first_apart + 1, len(inputs)):
        (here if tags.slot(inputs[i][0]) == slot else there).append(inputs[i])
    return model_slot != slot, here, there


# one slot's part of a write: its tensor keys and values, the (key, digest) checks, cached inputs and AI.INFO
# counters there
_SlotWrite = tuple[list[bytes], list[bytes], list[tuple[bytes, str]], list[tuple[bytes, bytes]], list[ScriptCall]]


def _per_slot_writes(keys: Sequence[bytes], values: list[bytes], key_slots: list[int],
                     checked: Sequence[tuple[bytes, str]], checked_in: list[int],
                     inputs: Sequence[tuple[bytes, bytes]], inputs_in: list[int],
                     counters: Sequence[ScriptCall], counters_in: list[int],
                     empty_is_free: bool) -> tuple[list[ScriptCall], bool]:
    """One SET_TENSORS per slot (each item given its slot): its keys, with the checks and cached inputs of that
    slot; a slot with checks and no key gets a SET_TENSORS with no tensor, which only checks, on the shard that
    holds them, alongside the outputs' writes on the others (docs/deployment.md, "Redis Cluster": what a
    STALEMODEL there means for those writes). The counters go into their slots' calls when every one has a
    call (whether they did is returned); the counters are added whatever the checks find, as beside them."""
    groups: dict[int, _SlotWrite] = {}
    for i in range(len(keys)):  # index loops: compiled, where zip(..., strict=True) is a call with a keyword
        group = _slot_write(groups, key_slots[i])
        group[0].append(keys[i])
        group[1].append(values[i])
    for i in range(len(checked)):
        _slot_write(groups, checked_in[i])[2].append(checked[i])
    for i in range(len(inputs)):
        _slot_write(groups, inputs_in[i])[3].append(inputs[i])
    inside = True
    for slot in counters_in:
        inside = inside and slot in groups
    if inside:
        for i in range(len(counters)):
            groups[counters_in[i]][4].append(counters[i])
    calls = [set_tensors_call(group[0], group[1], empty_is_free, group[2], group[3], group[4])
             for group in groups.values()]
    return calls, inside


def _slot_write(groups: dict[int, _SlotWrite], slot: int) -> _SlotWrite:
    group = groups.get(slot)
    if group is None:
        group = groups[slot] = ([], [], [], [], [])
    return group


def _one_slot(tags: SlotTags, keys: Sequence[bytes], checked: Sequence[tuple[bytes, str]],
              inputs: Sequence[tuple[bytes, bytes]]) -> int | None:
    """The slot that every key, checked key and cached input is in; None when they spread (or there is no
    key). Index loops that stop at the first other slot: the one-slot write of every AI.TENSORSET builds no
    list of slots (~3k instructions a write, where they were built and compared)."""
    if not keys:
        return None
    slot = tags.slot(keys[0])
    for i in range(1, len(keys)):
        if tags.slot(keys[i]) != slot:
            return None
    for i in range(len(checked)):
        if tags.slot(checked[i][0]) != slot:
            return None
    for i in range(len(inputs)):
        if tags.slot(inputs[i][0]) != slot:
            return None
    return slot


def _counted_in(tags: SlotTags, counters: Sequence[ScriptCall], slot: int) -> bool:
    """Whether every AI.INFO counter (a RECORD_RUN call: its first key) is in ``slot``."""
    for i in range(len(counters)):
        if tags.slot(counters[i][1][0]) != slot:
            return False
    return True
