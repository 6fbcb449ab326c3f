"""The hung-node watchdog's rule for blocking commands (server/store/cluster_watch.py), with stand-in
connections: a blocked connection's own wait is never timed out; its node is probed once a check, and the
blocked connections of a node given up on (by a command of another connection, or a failed probe) go with it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from server.store.cluster_watch import HungNodeWatch
from server.store.upstream import StoreAddress

NODE_A, NODE_B = StoreAddress(host="127.0.0.1", port=7000), StoreAddress(host="127.0.0.1", port=7001)


@dataclass
class StandIn:
    """A connection whose oldest command is ``oldest`` (None: none, or a blocking one when ``blocked``)."""

    oldest: object | None = None
    blocked: bool = False
    aborted: list[str] = field(default_factory=list)

    def oldest_pending(self) -> object | None:
        return self.oldest

    def waits_blocked(self) -> bool:
        return self.blocked

    def abort(self, detail: str) -> None:
        self.aborted.append(detail)


def _watch(probed: list[StoreAddress], hung: list[StoreAddress]) -> HungNodeWatch:
    return HungNodeWatch(1, hung.append, probed.append)  # 1 ms: a command seen twice is over the timeout


def test_a_blocked_connection_is_never_timed_out_but_its_node_is_probed_once_a_check() -> None:
    probed: list[StoreAddress] = []
    watch = _watch(probed, [])
    first, second, idle = StandIn(blocked=True), StandIn(blocked=True), StandIn()
    for _ in range(3):
        watch.check([(NODE_A, first), (NODE_A, second), (NODE_B, idle)])
    assert probed == [NODE_A] * 3  # one probe a node a check, none for a node nothing blocks on
    assert first.aborted == second.aborted == []


def test_the_blocked_connections_of_a_node_given_up_on_go_with_it() -> None:
    probed: list[StoreAddress] = []
    hung: list[StoreAddress] = []
    watch = _watch(probed, hung)
    link, blocked, elsewhere = StandIn(oldest=object()), StandIn(blocked=True), StandIn(blocked=True)
    watch.check([(NODE_A, link), (NODE_A, blocked), (NODE_B, elsewhere)])
    assert not blocked.aborted
    time.sleep(0.002)
    watch.check([(NODE_A, blocked), (NODE_A, link), (NODE_B, elsewhere)])  # (order does not matter)
    assert len(link.aborted) == 1 and hung == [NODE_A]
    assert blocked.aborted == link.aborted and "127.0.0.1:7000: no answer within 1 ms" in blocked.aborted[0]
    assert elsewhere.aborted == [] and probed[-1] == NODE_B


def test_a_failed_probe_gives_the_node_up_at_the_next_check() -> None:
    probed: list[StoreAddress] = []
    watch = _watch(probed, [])
    blocked, elsewhere = StandIn(blocked=True), StandIn(blocked=True)
    watch.check([(NODE_A, blocked), (NODE_B, elsewhere)])
    watch.unanswered(NODE_A)
    watch.check([(NODE_A, blocked), (NODE_B, elsewhere)])
    assert len(blocked.aborted) == 1 and "127.0.0.1:7000" in blocked.aborted[0] and elsewhere.aborted == []
    watch.check([(NODE_B, elsewhere)])  # forgotten once acted on
    assert elsewhere.aborted == []
