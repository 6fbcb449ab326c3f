"""The coherent model-metadata cache on a Redis Cluster: the one-node cache (server/store/cache.py), with one
tracking connection per primary instead of one per database.

Usage: ``ClusterCache(cluster, link, budget_bytes)`` is the cluster store's ``cache``; the keyspace uses it as
it uses a ``TrackedCache`` (``read_many``, ``forget``, ``invalidate_for`` …; db is always 0).

Each key's entries live in the ``DatabaseCache`` of the primary that serves its slot, filled over that node's
RESP3 ``CLIENT TRACKING ON`` connection, so that node's invalidation pushes drop them, exactly as on one node.
Entries are dropped besides:

* when that node's tracking connection drops, or does not answer within ``--cluster-node-timeout-ms`` (the
  cluster's watchdog aborts it: server/store/cluster_watch.py);
* all of them when the slot map changes (slots moved, MOVED, a failover): a node that lost a slot no longer
  tells us of its keys' changes; the connections of nodes that are no longer primaries are closed;
* by every write this server sends (``invalidate_for`` over every node's entries; ``forget``, an AI write's,
  over those of the node serving each key now).

A read that a node answers with a redirect (MOVED/ASK: the map changed under us) or CLUSTERDOWN is made again
through the cluster link, which follows it, and the map is read again.

As on one node, that is not enough across servers (another server's write may be acknowledged before its push
reaches us), so only what a run's output write checks is cached: model metadata, whose digest is checked on the
model's own shard in the same round trip as the outputs (server/store/keyspace.py ``_tensor_writes``), and a
run's inputs, compared by the outputs' write script when they share its slot, else by a check on their own
shard in that round trip (those only while the server is not under load: ``Keyspace.inputs_from_cache``).
STALEMODEL / STALEINPUT makes the run be done again with the store's values before the client gets OK
(docs/deployment.md). A push marks a node's metadata entries unconfirmed rather than dropping them, as on one
node (server/store/cache.py: every run writes its model's counters into the model's hash).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Final

from backends import errors as msgs
from backends.errors import AIError
from server.store.cache import DatabaseCache, TrackedCache, TrackingRefused
from server.store.cluster_keys import SLOTS
from server.store.cluster_link import ClusterLink
from server.store.cluster_state import ClusterState, is_redirect
from server.store.cluster_watch import Watched
from server.store.upstream import StoreAddress

UNROUTED: Final = -1  # the node index of a read whose slot no primary serves now: it goes through the cluster link
UNKNOWN: Final = -2  # a slot's node number not looked up since the map last changed


class ClusterCache(TrackedCache):
    """One ``DatabaseCache`` per primary, by a small number per node (see the module docstring)."""

    def __init__(self, cluster: ClusterState, link: ClusterLink, budget: int) -> None:
        super().__init__(cluster.seed, budget)
        self._cluster = cluster
        self._link = link
        self._numbers: dict[tuple[str, int], int] = {}
        self._nodes: dict[int, StoreAddress] = {}
        self._slot_numbers = [UNKNOWN] * SLOTS  # each slot's node number, looked up once per map
        cluster.on_change(self._map_changed)
        cluster.watch_too(self._tracking_links)

    def _db(self, db: int) -> DatabaseCache:
        """The cache of node number ``db`` (the base class's per-database slot, used per node here)."""
        found = self._dbs.get(db)
        if found is None:
            found = self._dbs[db] = DatabaseCache(self._nodes[db], 0, self._budget)
        return found

    def _number(self, key: bytes) -> int:
        """The number of the primary serving ``key`` now (UNROUTED when none does); remembered per slot until the
        map changes (several lookups a request: the reads, the write's forget and note)."""
        slot = self._cluster.tags.slot(key)
        number = self._slot_numbers[slot]
        if number == UNKNOWN:
            number = self._slot_numbers[slot] = self._look_up(slot)
        return number

    def _look_up(self, slot: int) -> int:
        try:
            address = self._cluster.primary_for(slot)
        except AIError:
            return UNROUTED
        where = (address.host, address.port)
        number = self._numbers.get(where)
        if number is None:
            number = self._numbers[where] = len(self._numbers)
            self._nodes[number] = address
        return number

    def held(self, db: int, commands: Sequence[tuple[bytes, ...]], hits: list[bool] | None = None,
             checked: bool = False) -> list[Any] | None:
        """Every reply from the caches of the nodes that serve their keys, when each holds its part, up to date
        (the keyspace's ``read_through`` asks this first: no coroutine; a run whose inputs share its outputs'
        slot and whose model is on another shard, a stored graph's models); else None, and nothing counted.
        ``checked``: as ``TrackedCache.read_many``'s (unconfirmed metadata entries serve a run)."""
        if not commands:
            return None
        numbers = [self._number(command[1]) for command in commands]
        number = numbers[0]
        for i in range(1, len(numbers)):
            if numbers[i] != number:
                return self._held_across(commands, numbers, hits, checked)
        if number == UNROUTED:
            return None
        return TrackedCache.held(self, number, commands, hits, checked)

    def _held_across(self, commands: Sequence[tuple[bytes, ...]], numbers: list[int],
                     hits: list[bool] | None, checked: bool) -> list[Any] | None:
        """``held`` for commands whose keys several nodes serve (``numbers``): each from its node's cache."""
        caches: list[DatabaseCache] = []
        for i in range(len(commands)):
            cache = self._dbs.get(numbers[i]) if numbers[i] != UNROUTED else None
            if cache is None or not cache.holds(commands[i], checked):
                return None
            if cache not in caches and not self._trusted_for(cache, checked):
                return None  # (a node's connection polled once, however many of its keys are asked)
            caches.append(cache)
        replies = [caches[i].lookup(commands[i], checked)[1] for i in range(len(commands))]
        if hits is not None:
            hits.extend([True] * len(commands))
        return replies

    async def read_many(self, db: int, commands: Sequence[tuple[bytes, ...]],
                        hits: list[bool] | None = None, checked: bool = False) -> list[Any]:
        """Each command from its key's node's cache (a miss over that node's tracking connection), the nodes
        in parallel; redirected or unrouted reads through the cluster link. ``hits``: whether each reply came
        from the cache (a read made again through the link did not). ``checked``: as ``TrackedCache``'s."""
        try:
            replies, found = await self._read_all(commands, checked)
        except TrackingRefused:
            raise
        except AIError:
            self._cluster.request_refresh()  # a node's tracking connection lost: a replica may be taking over
            raise
        again = [i for i, reply in enumerate(replies) if _moved_on(reply)]
        if again:
            self._cluster.request_refresh()
            answers = await self._link.pipeline([list(commands[i]) for i in again])
            for index, answer in zip(again, answers, strict=True):
                replies[index] = answer
                found[index] = False
        if hits is not None:
            hits[:] = found
        return replies

    async def _read_all(self, commands: Sequence[tuple[bytes, ...]], checked: bool) -> tuple[list[Any], list[bool]]:
        """The replies, and whether each came from the cache; one key (AI.TENSORGET, a model's metadata) goes
        straight to its node's cache, with no grouping."""
        if len(commands) == 1:
            number = self._number(commands[0][1])
            if number != UNROUTED:
                hits: list[bool] = []
                return await TrackedCache.read_many(self, number, commands, hits, checked), hits
        groups: dict[int, list[int]] = {}
        for index, command in enumerate(commands):
            groups.setdefault(self._number(command[1]), []).append(index)
        found = [False] * len(commands)
        return await self._read_groups(commands, groups, found, self._slot_numbers, checked), found

    async def _read_groups(self, commands: Sequence[tuple[bytes, ...]], groups: dict[int, list[int]],
                           found: list[bool], grouped_under: list[int], checked: bool) -> list[Any]:
        """Every node's group; one whose entries are all held is read at once (no Task), the others in
        parallel. ``grouped_under``: the slot memo the groups' node numbers came from (a new map makes a new
        one): a group reached after the map changed is read through the cluster link (``_read_group``)."""
        if len(groups) == 1 and UNROUTED not in groups:
            hits: list[bool] = []
            answers = await TrackedCache.read_many(self, next(iter(groups)), commands, hits, checked)
            found[:] = hits
            return answers
        replies: list[Any] = [None] * len(commands)
        held = [number for number, indices in groups.items() if self._holds(number, commands, indices, checked)]
        waits = [number for number in groups if number not in held]
        parts = [await self._read_group(number, commands, groups[number], found, grouped_under, checked)
                 for number in held]
        if len(waits) == 1:
            parts.append(await self._read_group(waits[0], commands, groups[waits[0]], found, grouped_under, checked))
        elif waits:
            parts += await asyncio.gather(*(self._read_group(number, commands, groups[number], found, grouped_under,
                                                             checked) for number in waits))
        for number, part in zip([*held, *waits], parts, strict=True):
            for position, index in enumerate(groups[number]):
                replies[index] = part[position]
        return replies

    def _holds(self, number: int, commands: Sequence[tuple[bytes, ...]], indices: list[int], checked: bool) -> bool:
        cache = self._dbs.get(number) if number != UNROUTED else None
        return cache is not None and all(cache.holds(commands[i], checked) for i in indices)

    async def _read_group(self, number: int, commands: Sequence[tuple[bytes, ...]], indices: list[int],
                          found: list[bool], grouped_under: list[int], checked: bool) -> list[Any]:
        """One node's part of a read. Through the cluster link when its node number is not the current map's
        (an earlier group's read waited across a map change): that node's cache may hold an entry filled after
        the change, which no write of ours forgets there (``forget`` drops the serving node's only)."""
        mine = [commands[i] for i in indices]
        if number == UNROUTED or grouped_under is not self._slot_numbers:
            return await self._link.pipeline([list(command) for command in mine])
        hits: list[bool] = []
        answers = await TrackedCache.read_many(self, number, mine, hits, checked)
        for position, index in enumerate(indices):
            found[index] = hits[position]
        return answers

    def _existing(self, key: bytes) -> DatabaseCache | None:
        number = self._number(key)
        return self._dbs.get(number) if number != UNROUTED else None

    def _cache_for(self, db: int, key: bytes) -> DatabaseCache | None:
        """None: on a cluster the tensors we write or TENSORGET reads are not kept as stamped copies (yet); a
        run's inputs are cached when read, as GET replies, and checked by their stamp all the same."""
        return None

    def known_tensors(self, db: int, keys: Sequence[bytes]) -> bool:
        for key in keys:
            cache = self._existing(key)
            if cache is None or key not in cache.written:
                return False
        return True

    def note_written(self, db: int, keys: Sequence[bytes]) -> None:
        if self.enabled:
            for key in keys:
                number = self._number(key)
                if number != UNROUTED:
                    self._db(number).note_written_key(key)

    def forget(self, db: int, keys: Sequence[bytes], keep_written: bool = False) -> None:
        """``keys`` out of the entries of the node that serves each now, the only ones looked up for it: a new
        slot map empties every node's entries (``_map_changed``), so an entry filled with another node under an
        earlier map — a read answered after the change — is never read (a read whose groups were made under the
        earlier map goes on through the cluster link: ``_read_group``), and is gone at the next change."""
        for key in keys:
            cache = self._existing(key)
            if cache is not None:
                cache.forget(key, keep_written)

    def _map_changed(self) -> None:
        """A new slot map: nothing cached can be trusted to hear of its key's changes any more."""
        self.clear()
        self._slot_numbers = [UNKNOWN] * SLOTS
        primaries = {(address.host, address.port) for address in self._cluster.topology.primaries}
        for where, number in list(self._numbers.items()):
            if where not in primaries:
                cache = self._dbs.pop(number, None)
                if cache is not None:
                    cache.link.close()

    def _tracking_links(self) -> Iterable[tuple[StoreAddress, Watched]]:
        return [(self._nodes[number], cache.link) for number, cache in self._dbs.items()]


def _moved_on(reply: Any) -> bool:
    """A read the node would not answer for its slot (MOVED/ASK, CLUSTERDOWN): the cluster link's to follow."""
    return is_redirect(reply) or (isinstance(reply, AIError) and reply.message.startswith(msgs.CLUSTERDOWN_PREFIX))
