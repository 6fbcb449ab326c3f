"""Slots and key finding for a Redis Cluster, against values Redis itself gives (CLUSTER KEYSLOT)."""

from __future__ import annotations

import binascii
import random

import pytest

from backends.errors import AIError
from server.protocol.slot import ReplySlot
from server.store.cluster_fanout import FanOut, fan_out_name
from server.store.cluster_keys import MEMO_KEY_BYTES, MEMO_KEYS, CrossSlot, KeyFinder, SlotTags, common_slot, key_slot
from server.store.cluster_link import ClusterLink, clusterdown_named
from server.store.cluster_state import ClusterState
from server.store.cluster_topology import parse_slots
from server.store.node_connections import may_block
from server.store.upstream import StoreAddress


def test_key_slots_match_redis() -> None:
    # CLUSTER KEYSLOT on a real node: a=15495, b=3300, foo=12182, {user1000}.following = slot of user1000
    assert key_slot(b"a") == 15495 and key_slot(b"b") == 3300 and key_slot(b"foo") == 12182
    assert key_slot(b"{user1000}.following") == key_slot(b"user1000") == key_slot(b"{user1000}.followers")
    assert key_slot(b"foo{}{bar}") == key_slot(b"foo{}{bar}")  # an empty tag: the whole key
    assert key_slot(b"foo{}{bar}") != key_slot(b"bar")
    assert key_slot(b"foo{{bar}}zap") == key_slot(b"{bar")


def test_key_slot_reads_the_hash_tag_as_redis_cluster_does() -> None:
    """Random keys full of braces against the specification's own wording (the first ``{``, the first ``}``
    after it, a non-empty tag in between), written the obvious way."""
    rng = random.Random(7)
    for _ in range(20_000):
        key = bytes(rng.choice(b"{}ab\x00\xff") for _ in range(rng.randrange(0, 9)))
        start = key.find(b"{")
        end = key.find(b"}", start + 1) if start >= 0 else -1
        hashed = key[start + 1 : end] if start >= 0 and end > start + 1 else key
        assert key_slot(key) == binascii.crc_hqx(hashed, 0) % 16384, key


def test_key_slot_sums_the_crc_of_every_byte_value() -> None:
    """Keys of any bytes and length (no hash tag: the whole key is summed), and the check value of the
    CRC16-XMODEM specification, which Redis Cluster's own test uses."""
    assert key_slot(b"123456789") == 0x31C3 % 16384
    rng = random.Random(11)
    for size in range(0, 300, 7):
        key = bytes(rng.randrange(256) for _ in range(size)).replace(b"{", b"(")
        assert key_slot(key) == binascii.crc_hqx(key, 0) % 16384, key


def test_common_slot_refuses_keys_of_several_slots() -> None:
    assert common_slot([]) is None and common_slot([b"{t}a", b"{t}b"]) == key_slot(b"t")
    with pytest.raises(CrossSlot, match="CROSSSLOT Keys in request don't hash to the same slot"):
        common_slot([b"a", b"b"])


def test_slot_tags_map_to_their_slot_without_braces() -> None:
    tags = SlotTags()
    for slot in (0, 1, 5460, 16383):
        tag = tags.of(slot)
        assert b"{" not in tag and b"}" not in tag and key_slot(b"{" + tag + b"}x") == slot


def _spec(begin: list[object], find: list[object]) -> list[object]:
    return [b"flags", [b"RW"], b"begin_search", begin, b"find_keys", find]


def test_key_specs_index_keyword_range_and_keynum() -> None:
    reply = [
        [b"get", 2, [], 1, 1, 1, [], [], [_spec([b"type", b"index", b"spec", [b"index", 1]],
                                              [b"type", b"range", b"spec", [b"lastkey", 0, b"keystep", 1, b"limit", 0]])], []],
        [b"mset", -3, [], 1, -1, 2, [], [], [_spec([b"type", b"index", b"spec", [b"index", 1]],
                                               [b"type", b"range", b"spec", [b"lastkey", -1, b"keystep", 2, b"limit", 0]])], []],
        [b"eval", -3, [], 0, 0, 0, [], [], [_spec([b"type", b"index", b"spec", [b"index", 2]],
                                              [b"type", b"keynum", b"spec", [b"keynumidx", 0, b"firstkey", 1, b"keystep", 1]])], []],
        [b"xread", -4, [], 0, 0, 0, [], [], [_spec([b"type", b"keyword", b"spec", [b"keyword", b"STREAMS", b"startfrom", 1]],
                                               [b"type", b"range", b"spec", [b"lastkey", -1, b"keystep", 1, b"limit", 2]])], []],
        [b"rename", 3, [], 1, 2, 1, [], [], [], []],  # a store without key specs: first/last/step
    ]
    finder = KeyFinder.from_command_reply(reply)
    assert finder.keys([b"GET", b"k"]) == [b"k"]
    assert finder.keys([b"MSET", b"a", b"1", b"b", b"2"]) == [b"a", b"b"]
    assert finder.keys([b"EVAL", b"return 1", b"2", b"x", b"y", b"arg"]) == [b"x", b"y"]
    assert finder.keys([b"XREAD", b"COUNT", b"2", b"streams", b"s1", b"s2", b"0", b"0"]) == [b"s1", b"s2"]
    assert finder.keys([b"RENAME", b"a", b"b"]) == [b"a", b"b"]
    assert finder.keys([b"PING"]) == [] and finder.slot([b"PING"]) is None
    with pytest.raises(CrossSlot):
        finder.slot([b"MSET", b"a", b"1", b"b", b"2"])


def test_cluster_slots_reply_gives_each_range_its_primary() -> None:
    seed = StoreAddress(host="127.0.0.1", port=7000, password="pw")
    reply = [[0, 5460, [b"127.0.0.1", 7000, b"id0"]], [5461, 16383, [b"127.0.0.1", 7001, b"id1"], [b"127.0.0.1", 7004]]]
    topology = parse_slots(reply, seed)
    first, second = topology.primary_of(0), topology.primary_of(16383)
    assert first is not None and second is not None
    assert (first.port, second.port, second.password) == (7000, 7001, "pw") and topology.covered()


def test_a_cluster_slots_endpoint_null_or_unknown_is_the_seeds_host() -> None:
    """CLUSTER SLOTS names a primary's endpoint null (``cluster-preferred-endpoint-type unknown-endpoint``) or
    ``?``: the node is reached at the host of the node asked (the name "None" it used to be), else the seed's."""
    seed = StoreAddress(host="10.0.0.5", port=7000)
    reply = [[0, 5460, [None, 7000, b"id0"]], [5461, 16383, [b"?", 7001, b"id1"]]]
    asked = parse_slots(reply, seed, StoreAddress(host="10.0.0.9", port=7001))
    assert [(a.host, a.port) for a in asked.primaries] == [("10.0.0.9", 7000), ("10.0.0.9", 7001)]
    assert [a.host for a in parse_slots(reply, seed).primaries] == ["10.0.0.5", "10.0.0.5"]


def test_a_tryagain_after_asking_is_retried_after_asking_again() -> None:
    """A command sent to an importing node after ASKING that answers TRYAGAIN (a multi-key command during the
    migration) goes again to that node after ASKING: without it the node would answer MOVED."""
    link = ClusterLink(ClusterState(StoreAddress()))
    node = StoreAddress(port=7001)
    again, moved, later = link._redirected([(node, [([0], True), ([1], False)])],
                                           [AIError("TRYAGAIN Multiple keys request during rehashing of slot"),
                                            AIError("TRYAGAIN Multiple keys request during rehashing of slot")],
                                           final=False)
    assert again == [(node, [([0], True), ([1], False)])] and later and not moved


def test_blocking_commands_are_known_by_name_and_xread_by_its_block_option() -> None:
    """What the hung-node watchdog lets wait (NodeSession.oldest_pending): BLPOP and the like, WAIT, XREAD /
    XREADGROUP with BLOCK among their options — not a stream key named "block" after STREAMS."""
    assert may_block([b"BLPOP", b"k", b"0"]) and may_block([b"wait", b"1", b"0"])
    assert may_block([b"XREAD", b"COUNT", b"1", b"BLOCK", b"0", b"STREAMS", b"s", b"$"])
    assert not may_block([b"XREAD", b"STREAMS", b"block", b"0"])
    assert not may_block([b"GET", b"block"]) and not may_block([b"LPOP", b"k"])


def test_slot_tags_remember_short_keys_slots_and_start_over_when_full() -> None:
    """``SlotTags.slot`` answers as ``key_slot`` does, for keys new and remembered; it holds at most MEMO_KEYS
    keys, none longer than MEMO_KEY_BYTES; ``common`` is ``common_slot`` by it."""
    tags = SlotTags()
    rng = random.Random(3)
    keys = [bytes(rng.choice(b"{}ab") for _ in range(rng.randrange(0, 12))) for _ in range(3 * MEMO_KEYS)]
    for key in keys + keys[::-1]:
        assert tags.slot(key) == key_slot(key), key
    assert 0 < len(tags._slots) <= MEMO_KEYS
    long_key = b"k" * (MEMO_KEY_BYTES + 1)
    assert tags.slot(long_key) == key_slot(long_key) and long_key not in tags._slots
    assert tags.common([b"{t}a", b"{t}b"]) == key_slot(b"t") and tags.common([]) is None
    with pytest.raises(CrossSlot):
        tags.common([b"a", b"b"])


def test_a_nodes_clusterdown_is_completed_with_the_slot_and_the_node() -> None:
    node = StoreAddress("127.0.0.1", 7001)
    down = "CLUSTERDOWN The cluster is down"
    assert clusterdown_named(down, [b"k"], node) == f"{down} (slot {key_slot(b'k')}, asked 127.0.0.1:7001)"
    assert clusterdown_named(down, [], node) == f"{down} (asked 127.0.0.1:7001)"  # a keyless command
    assert clusterdown_named(down, [b"a", b"b"], node) == f"{down} (asked 127.0.0.1:7001)"  # no one slot
    completed = "CLUSTERDOWN Hash slot not served (slot 5 has no primary in the cluster's map)"
    assert clusterdown_named(completed, [b"k"], node) == completed


def test_script_and_function_changes_fan_out_and_script_exists_needs_every_primary() -> None:
    assert fan_out_name(b"script", [b"SCRIPT", b"load", b"return 1"]) == b"script load"
    assert fan_out_name(b"function", [b"function", b"DELETE", b"lib"]) == b"function delete"
    assert fan_out_name(b"flushall", [b"FLUSHALL"]) == b"flushall"
    assert fan_out_name(b"script", [b"SCRIPT", b"KILL"]) is None and fan_out_name(b"script", [b"SCRIPT"]) is None
    assert fan_out_name(b"get", [b"GET", b"k"]) is None
    client_slot = ReplySlot()
    fan = FanOut(client_slot, b"script exists", 2)
    fan.part(1).fill(b"*3\r\n:1\r\n:1\r\n:0\r\n")
    assert not client_slot.done  # the combined answer waits for every primary
    fan.part(0).fill(b"*3\r\n:1\r\n:0\r\n:0\r\n")
    assert client_slot.done and client_slot.output() == b"*3\r\n:1\r\n:0\r\n:0\r\n"
