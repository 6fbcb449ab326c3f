"""A real Redis Cluster on loopback for the tests: valkey-server nodes (the embedded store's binary), created
with the CLI's ``--cluster create``; each node is a process this helper started and stops by its pid. A TLS
cluster (``tls=``) runs Debian's redis-server instead: the embedded store's valkey is built without TLS."""

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
from tests.support import RunningServer, wait_for_port, wait_until


@dataclass
class ClusterNode:
    port: int
    proc: subprocess.Popen[bytes]
    password: str = ""  # the default user's (``requirepass``), when the cluster has one
    tls_ca: str = ""  # the CA that signed the node's certificate, when it speaks TLS only

    @property
    def url(self) -> str:
        login = f":{self.password}@" if self.password else ""
        return f"{'rediss' if self.tls_ca else 'redis'}://{login}127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        if self.tls_ca:
            return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10, password=self.password or None,
                               ssl=True, ssl_ca_certs=self.tls_ca)  # the certificate names 127.0.0.1
        return redis.Redis(port=self.port, socket_timeout=10, password=self.password or None)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@dataclass(frozen=True)
class TlsFiles:
    """A test CA and a certificate it signed for 127.0.0.1 (PEM files)."""

    ca: Path
    cert: Path
    key: Path

    def node_options(self, port: int) -> tuple[str, ...]:
        """A node that speaks TLS only, on ``port``, to clients and to the other nodes."""
        return ("--port", "0", "--tls-port", str(port), "--tls-cluster", "yes", "--tls-replication", "yes",
                "--tls-cert-file", str(self.cert), "--tls-key-file", str(self.key),
                "--tls-ca-cert-file", str(self.ca), "--tls-auth-clients", "no")


def make_tls_files(directory: Path) -> TlsFiles:
    """A CA and a 127.0.0.1 certificate, made with the ``openssl`` command (valid two days)."""
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    cert, key, request, extensions = (directory / name for name in ("node.crt", "node.key", "node.csr", "san.cnf"))
    extensions.write_text("subjectAltName=IP:127.0.0.1\n")
    for command in (
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2",
             "-subj", "/CN=redisai-test-ca"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1"],
            ["x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
             "-days", "2", "-extfile", extensions]):
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True, timeout=60)
    return TlsFiles(ca, cert, key)


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


def _start_node(workdir: Path, port: int, full_coverage: bool, options: tuple[str, ...], binary: str) -> ClusterNode:
    node_dir = workdir / str(port)
    node_dir.mkdir()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
         "--cluster-config-file", str(node_dir / "nodes.conf"), "--cluster-node-timeout", "1000",
         "--save", "", "--appendonly", "no", "--dir", str(node_dir), "--protected-mode", "no",
         "--cluster-require-full-coverage", "yes" if full_coverage else "no", *options],
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
def local_cluster(primaries: int = 3, replicas: int = 1, full_coverage: bool = True, password: str = "",
                  node_options: tuple[str, ...] = (), tls: TlsFiles | None = None) -> Iterator[LocalCluster]:
    """``primaries`` primaries, each with ``replicas`` replicas, all slots covered, cluster_state:ok.
    ``full_coverage=False``: the other shards keep serving while one primary is down (a test that stops one).
    ``password``: every node's ``requirepass`` (and ``masterauth``); ``node_options``: more options for each
    node (an ACL ``--user``, …); ``tls``: nodes that speak TLS only (redis-server)."""
    workdir = Path(tempfile.mkdtemp(prefix="redisai-cluster-"))
    cluster = LocalCluster()
    login = ("--requirepass", password, "--masterauth", password) if password else ()
    binary = (shutil.which("redis-server") or "redis-server") if tls else find_store_binary("")
    cli = (shutil.which("redis-cli") or "redis-cli") if tls else _cli_binary()
    try:
        for _ in range(primaries * (1 + replicas)):
            port = _cluster_port()
            options = (*login, *node_options, *(tls.node_options(port) if tls else ()))
            node = _start_node(workdir, port, full_coverage, options, binary)
            node.password = password
            node.tls_ca = str(tls.ca) if tls else ""
            cluster.nodes.append(node)
        subprocess.run([cli, *(("-a", password, "--no-auth-warning") if password else ()),
                        *(("--tls", "--cacert", str(tls.ca)) if tls else ()),
                        "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in cluster.nodes),
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


def lose_pushes(server: RunningServer) -> None:
    """Every invalidation push to ``server`` is lost from now on: its cached metadata goes stale (what a push
    still on its way looks like, made to last)."""
    for link in server.server.ctx.store.cache.tracking_links():
        link._on_invalidate = lambda keys: None
