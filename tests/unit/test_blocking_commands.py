"""Which relayed commands may block, and which block with no timeout (server/store/node_connections.py): the cluster's
watchdog leaves the first to its node probe, graceful shutdown does not wait for the second."""

from __future__ import annotations

import pytest

from server.store.node_connections import blocks_for_ever, may_block


@pytest.mark.parametrize(("argv", "blocks", "for_ever"), [
    ([b"BLPOP", b"a", b"b", b"0"], True, True),
    ([b"BLPOP", b"a", b"1.5"], True, False),
    ([b"BRPOPLPUSH", b"a", b"b", b"0"], True, True),
    ([b"BLMOVE", b"a", b"b", b"LEFT", b"RIGHT", b"2"], True, False),
    ([b"BLMPOP", b"0", b"1", b"a", b"LEFT"], True, True),
    ([b"BZMPOP", b"3", b"1", b"a", b"MIN"], True, False),
    ([b"WAIT", b"1", b"0"], True, True),
    ([b"WAITAOF", b"1", b"0", b"100"], True, False),
    ([b"XREAD", b"COUNT", b"2", b"BLOCK", b"0", b"STREAMS", b"s", b"$"], True, True),
    ([b"XREAD", b"STREAMS", b"block", b"0"], False, False),  # a stream named "block"
    ([b"XREADGROUP", b"GROUP", b"block", b"0", b"BLOCK", b"100", b"STREAMS", b"s", b">"], True, False),
    ([b"XREADGROUP", b"GROUP", b"g", b"block", b"STREAMS", b"s", b">"], False, False),  # a consumer "block"
    ([b"GET", b"k"], False, False),
])
def test_blocking_commands_and_their_timeouts(argv: list[bytes], blocks: bool, for_ever: bool) -> None:
    assert may_block(argv) is blocks
    assert (blocks and blocks_for_ever(argv, argv[0].lower())) is for_ever
