"""A real Redis Cluster on loopback for the tests: valkey-server nodes (the embedded store's binary), created
with the CLI's ``--cluster create``; each node is a process this helper started and stops by its pid."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from server.store.cluster_keys import key_slot
from server.store.process import find_store_binary
from tests.support import wait_for_port, wait_until


@dataclass
class ClusterNode:
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=10)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@dataclass
class LocalCluster:
    nodes: list[ClusterNode] = field(default_factory=list)

    @property
    def seed_url(self) -> str:
        return self.nodes[0].url

    def primaries(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.proc.poll() is None and _role(n) == "master"]

    def node_of_slot(self, slot: int) -> ClusterNode:
        """The live primary that serves ``slot`` now (as the cluster itself says)."""
        for node in self.primaries():
            if node.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) is not None and _serves(node, slot):
                return node
        raise LookupError(f"no primary serves slot {slot}")

    def flush(self) -> None:
        """FLUSHALL on every live primary: an empty cluster for the next test."""
        for node in self.primaries():
            node.client().flushall()

    def wait_healthy(self, timeout: float = 30.0) -> None:
        if not wait_until(lambda: all(_state_ok(n) for n in self.nodes if n.proc.poll() is None), timeout):
            raise TimeoutError("the cluster did not reach cluster_state:ok")


def _role(node: ClusterNode) -> str:
    try:
        return str(node.client().execute_command("ROLE")[0].decode())
    except redis.RedisError:
        return "down"


def _serves(node: ClusterNode, slot: int) -> bool:
    for start, end, *_ in node.client().execute_command("CLUSTER", "SLOTS"):
        if start <= slot <= end:
            own = node.client().execute_command("CLUSTER", "MYID")
            return any(isinstance(n, list) and len(n) > 2 and n[2] == own for n in _replicas_of(node, start))
    return False


def _replicas_of(node: ClusterNode, start: int) -> list[list[object]]:
    for entry in node.client().execute_command("CLUSTER", "SLOTS"):
        if entry[0] == start:
            return [entry[2]]
    return []


def _state_ok(node: ClusterNode) -> bool:
    try:
        info = node.client().execute_command("CLUSTER", "INFO")
    except redis.RedisError:
        return False
    return "cluster_state:ok" in (info.decode() if isinstance(info, bytes) else str(info))


def _start_node(workdir: Path, port: int, full_coverage: bool = True) -> ClusterNode:
    binary = find_store_binary("")
    node_dir = workdir / str(port)
    node_dir.mkdir()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
         "--cluster-config-file", str(node_dir / "nodes.conf"), "--cluster-node-timeout", "1000",
         "--save", "", "--appendonly", "no", "--dir", str(node_dir), "--protected-mode", "no",
         "--cluster-require-full-coverage", "yes" if full_coverage else "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port)
    return ClusterNode(port, proc)


def _cluster_port() -> int:
    """A free port under 55536 whose cluster-bus port (+10000) is free too."""
    for _ in range(200):
        port = random.randrange(20000, 45000)
        if _free(port) and _free(port + 10000):
            return port
    raise OSError("no free port pair for a cluster node")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cli_binary() -> str:
    server = Path(find_store_binary(""))
    for name in ("valkey-cli", "redis-cli"):
        candidate = server.with_name(name)
        if candidate.exists():
            return str(candidate)
    found = shutil.which("valkey-cli") or shutil.which("redis-cli")
    if found is None:
        raise FileNotFoundError("no valkey-cli or redis-cli for --cluster create")
    return found


@contextmanager
def local_cluster(primaries: int = 3, replicas: int = 1, full_coverage: bool = True) -> Iterator[LocalCluster]:
    """``primaries`` primaries, each with ``replicas`` replicas, all slots covered, cluster_state:ok.
    ``full_coverage=False``: the other shards keep serving while one primary is down (a test that stops one)."""
    workdir = Path(tempfile.mkdtemp(prefix="redisai-cluster-"))
    cluster = LocalCluster()
    try:
        for _ in range(primaries * (1 + replicas)):
            cluster.nodes.append(_start_node(workdir, _cluster_port(), full_coverage))
        subprocess.run([_cli_binary(), "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in cluster.nodes),
                        "--cluster-replicas", str(replicas), "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        cluster.wait_healthy()
        _wait_replicas_synced(cluster, primaries * replicas)
        yield cluster
    finally:
        for node in cluster.nodes:
            node.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_replicas_synced(cluster: LocalCluster, expected: int, timeout: float = 30.0) -> None:
    def linked() -> int:
        return sum(1 for n in cluster.nodes
                   if _role(n) == "slave" and n.client().info("replication").get("master_link_status") == "up")

    if not wait_until(lambda: linked() >= expected, timeout):
        raise TimeoutError("the replicas did not sync with their primaries")


def owner(cluster: LocalCluster, key: bytes | str) -> ClusterNode:
    return cluster.node_of_slot(key_slot(key.encode() if isinstance(key, str) else key))


def keys_on_three_shards(cluster: LocalCluster, prefix: str) -> list[str]:
    """Three key names whose slots are served by three different primaries."""
    found: dict[int, str] = {}
    for number in range(1000):
        name = f"{prefix}{number}"
        found.setdefault(owner(cluster, name).port, name)
        if len(found) == 3:
            return list(found.values())
    raise LookupError("no keys on three shards")


def served_by(cluster: LocalCluster, key: str | bytes, node: ClusterNode) -> bool:
    """Whether ``node`` serves ``key``'s slot now — False, not an error, while no primary claims the slot
    (a slot just handed over: each node's view changes on its own), so it can be polled with ``wait_until``."""
    try:
        return owner(cluster, key).port == node.port
    except LookupError:
        return False


def assign_slot(cluster: LocalCluster, slot: int, node: ClusterNode) -> None:
    """Hand an (empty) ``slot`` to ``node``, on every primary, behind the servers' backs. ``node`` first gets the
    cluster's greatest config epoch (and again after): otherwise a replica of the old owner that has not heard
    yet claims the slot for its master by gossip with a greater epoch than ``node``'s, every node — ``node``
    too — hands it back, and the handover never settles (seen in CI-like runs: the wait for the new owner ran
    out). ``node`` is told first, so that no node it gossips with sees it disown a slot it then claims."""
    node_id = node.client().execute_command("CLUSTER", "MYID")
    node.client().execute_command("CLUSTER", "BUMPEPOCH")
    others = [primary for primary in cluster.primaries() if primary.port != node.port]
    for primary in [node, *others]:
        primary.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", node_id)
    node.client().execute_command("CLUSTER", "BUMPEPOCH")


def writes_tensor(conn: redis.Redis, key: str, value: int) -> bool:
    """Whether AI.TENSORSET of one INT64 ``value`` at ``key`` succeeds now (an error reply or no connection:
    not yet) — what the fault tests poll until a slot is served again."""
    try:
        return bool(conn.execute_command("AI.TENSORSET", key, "INT64", 1, "VALUES", value) == b"OK")
    except redis.RedisError:
        return False
