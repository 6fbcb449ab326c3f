"""The keyspace's link to a Redis Cluster: one ``pipeline`` call spread over the shards that own its keys.

Each command goes to the primary of its keys' slot (a MULTI … EXEC block as one unit, by the slot of the
commands inside it); the commands for one node leave in that node's pipelined link, and the nodes are asked
in parallel, one round trip each. Replies come back in the caller's order. MOVED is followed after a topology
refresh, ASK with ASKING, TRYAGAIN after a short pause — each at most ``MAX_REDIRECTS`` times — and a node
that cannot be reached answers its commands with the error naming it, and makes the map be read again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

from backends import errors as msgs
from backends.errors import AIError
from server.store.cluster_keys import CrossSlot, common_slot, key_slot
from server.store.cluster_state import ClusterState, is_redirect, is_retry_later, redirect_target
from server.store.keyspace import StoreLink
from server.store.upstream import StoreAddress

MAX_REDIRECTS: Final = 5
TRYAGAIN_PAUSE_S: Final = 0.02
SPREAD: Final = -1  # not a slot: commands for several slots (or a key error), sent the general way

Unit = list[int]  # indices into the caller's commands that must run together on one node


class ClusterLink:
    """A StoreLink over every shard (see the module docstring)."""

    def __init__(self, cluster: ClusterState) -> None:
        self._cluster = cluster

    def shards(self) -> Sequence[StoreLink]:
        """One link per primary, for what must visit every shard (SCAN)."""
        return [self._cluster.link(address) for address in self._cluster.topology.primaries]

    async def pipeline(self, commands: list[list[bytes]]) -> list[Any]:
        slots = [self._slot(argv) for argv in commands]
        common = _common(slots)
        if common != SPREAD:
            replies = await self._one_node(commands, common)
            if replies is not None:
                return replies
        replies = [None] * len(commands)
        pending = self._route(slots, _units(commands), replies)
        await self._follow(commands, pending, replies)
        return replies

    def _slot(self, argv: list[bytes]) -> int | AIError | None:
        try:
            if len(argv) > 3 and argv[0] == b"EVALSHA":  # our scripts: the keys follow their count (no key-spec lookup)
                if argv[2] == b"1":
                    return key_slot(argv[3])
                count = int(argv[2]) if argv[2].isdigit() else -1
                if 0 <= count <= len(argv) - 3:
                    return common_slot(argv[3 : 3 + count])
            return self._cluster.keys.slot(argv)
        except CrossSlot as exc:
            return exc

    async def _one_node(self, commands: list[list[bytes]], slot: int | AIError | None) -> list[Any] | None:
        """The common case — every command for one slot (or keyless), the node connected — with no routing
        tables; None: not sent (the slot unserved, or the node not connected yet): go the general way. A
        redirect or error reply continues there from this send."""
        try:
            address = self._cluster.primary_for(slot if isinstance(slot, int) else None)
        except AIError:
            return None
        link = self._cluster.link(address)
        if not link.connected:
            return None
        try:
            replies = await link.submit(commands)
        except AIError as exc:
            self._cluster.request_refresh()
            return [exc] * len(commands)
        if any(isinstance(reply, AIError) for reply in replies):
            sent = {address: [(unit, False) for unit in _units(commands)]}
            self._deliver(address, commands, sent[address], list(replies), replies)
            await self._follow(commands, sent, replies, sent=True)
        return replies

    async def _follow(self, commands: list[list[bytes]], pending: dict[StoreAddress, list[tuple[Unit, bool]]],
                      replies: list[Any], sent: bool = False) -> None:
        """Send ``pending`` (unless already ``sent``), then follow MOVED / ASK / TRYAGAIN a few times."""
        for attempt in range(MAX_REDIRECTS + 1):
            if not pending:
                break
            if not sent:
                await self._send_all(commands, pending, replies)
                if not any(isinstance(reply, AIError) for reply in replies):
                    return
            sent = False
            pending, moved, later = self._redirected(pending, replies, final=attempt == MAX_REDIRECTS)
            if moved:
                await self._cluster.refreshed()
            elif later:
                await asyncio.sleep(TRYAGAIN_PAUSE_S)

    def _route(self, slots: list[int | AIError | None], units: list[Unit],
               replies: list[Any]) -> dict[StoreAddress, list[tuple[Unit, bool]]]:
        by_node: dict[StoreAddress, list[tuple[Unit, bool]]] = {}
        for unit in units:
            try:
                address = self._cluster.primary_for(_unit_slot([slots[i] for i in unit]))
            except AIError as exc:
                for i in unit:
                    replies[i] = exc
                continue
            by_node.setdefault(address, []).append((unit, False))
        return by_node

    async def _send_all(self, commands: list[list[bytes]], pending: dict[StoreAddress, list[tuple[Unit, bool]]],
                        replies: list[Any]) -> None:
        """Every node's batch is queued first (on a live link: at once, no Task), then each is awaited: the
        round trips overlap, and the loop writes all of them in the same iteration."""
        in_flight = []
        live = []  # (not a comprehension over in_flight: a starred target builds a tuple and a list per item)
        for address, units in pending.items():
            batch = _batch(commands, units)
            link = self._cluster.link(address)
            future = link.submit(batch) if link.connected else None
            if future is not None:
                live.append(future)
            in_flight.append((address, units, batch, future))
        if len(live) > 1:
            await _all_done(live)  # one wake-up for all of them, not one per node
        for address, units, batch, future in in_flight:
            try:
                answers = await (future if future is not None else self._cluster.link(address).pipeline(batch))
            except AIError as exc:
                self._cluster.request_refresh()  # a node that fails may have been replaced by its replica
                answers = [exc] * len(batch)
            self._deliver(address, commands, units, answers, replies)

    def _deliver(self, address: StoreAddress, commands: list[list[bytes]], units: list[tuple[Unit, bool]],
                 answers: list[Any], replies: list[Any]) -> None:
        position = 0
        for unit, asking in units:
            position += asking
            for i in unit:
                answer = answers[position]
                replies[i] = self._named(answer, commands[i], address) if isinstance(answer, AIError) else answer
                position += 1

    def _named(self, reply: AIError, argv: list[bytes], address: StoreAddress) -> AIError:
        """The node's bare ``CLUSTERDOWN Hash slot not served``, with the slot and the node named; any
        CLUSTERDOWN makes the map be read again (the node lost slots or quorum)."""
        if not reply.message.startswith(msgs.CLUSTERDOWN_PREFIX):
            return reply
        self._cluster.request_refresh()
        if reply.message == msgs.NODE_UNSERVED_MSG:
            slot = common_slot(self._cluster.keys.keys(argv))
            return AIError(msgs.NODE_UNSERVED_FMT.format(slot=slot, node=f"{address.host}:{address.port}"))
        return reply

    def _redirected(self, sent: dict[StoreAddress, list[tuple[Unit, bool]]], replies: list[Any],
                    final: bool) -> tuple[dict[StoreAddress, list[tuple[Unit, bool]]], bool, bool]:
        """The units to send again, and where (MOVED/ASK: to the node named, TRYAGAIN: to the same one); and
        whether a MOVED came (read the map first) or a TRYAGAIN (wait a little)."""
        again: dict[StoreAddress, list[tuple[Unit, bool]]] = {}
        moved = later = False
        for address, units in sent.items():
            for unit, _asking in units:
                redirect = next((replies[i] for i in unit if is_redirect(replies[i])), None)
                if redirect is not None and not final:
                    kind, where, asking = redirect_target(redirect.message, address)
                    moved = moved or kind == "MOVED"
                    if where is not None:
                        again.setdefault(self._cluster.address(where), []).append((unit, asking))
                elif any(is_retry_later(replies[i]) for i in unit) and not final:
                    later = True
                    again.setdefault(address, []).append((unit, False))
        return again, moved, later


def _common(slots: list[int | AIError | None]) -> int | None:
    """The one slot of ``slots`` (None: all keyless); SPREAD when there are several, or one is an error (no
    exception raised: a run over three shards comes here every time)."""
    found: int | None = None
    for slot in slots:
        if isinstance(slot, AIError) or (slot is not None and found is not None and slot != found):
            return SPREAD
        if slot is not None:
            found = slot
    return found


def _unit_slot(slots: list[int | AIError | None]) -> int | None:
    """The one slot of a unit's commands (None: all keyless); their CROSSSLOT, or a new one across them."""
    common = _common(slots)
    if common != SPREAD:
        return common
    raise next((slot for slot in slots if isinstance(slot, AIError)), CrossSlot())


def _all_done(futures: list[asyncio.Future[list[Any]]]) -> asyncio.Future[None]:
    """A future done once every one of ``futures`` is (their results stay theirs to read)."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = [len(futures)]

    def one_done(_future: asyncio.Future[list[Any]]) -> None:
        left[0] -= 1
        if not left[0] and not done.done():
            done.set_result(None)

    for future in futures:
        future.add_done_callback(one_done)
    return done


def _batch(commands: list[list[bytes]], units: list[tuple[Unit, bool]]) -> list[list[bytes]]:
    batch: list[list[bytes]] = []
    for unit, asking in units:
        if asking:
            batch.append([b"ASKING"])
        for i in unit:
            batch.append(commands[i])
    return batch


def _units(commands: Sequence[Sequence[bytes]]) -> list[Unit]:
    """Each command alone, except MULTI … EXEC/DISCARD, which stays together."""
    units: list[Unit] = []
    block: Unit | None = None
    for i, argv in enumerate(commands):
        name = argv[0].upper() if argv else b""
        if block is not None:
            block.append(i)
            if name in (b"EXEC", b"DISCARD"):
                units.append(block)
                block = None
        elif name == b"MULTI":
            block = [i]
        else:
            units.append([i])
    if block is not None:
        units.append(block)
    return units
