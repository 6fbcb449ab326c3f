"""docker-compose.yml and the Dockerfile, checked without a Docker engine: the YAML's services, ports,
builds and commands (with compose's ``${VAR:-default}`` interpolation), the Dockerfile's torch install line
run by pip against a local index, and the exact server command lines of the compose file run against a real
redis-server; the healthcheck command lines of both run against real server processes (ready, then a store
gone, then TLS and a password from the environment)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.cluster_support import LocalCluster
from tests.support import free_port, redis_server_process, server_process, wait_for_port

ROOT = Path(__file__).resolve().parents[2]


SERVER_SERVICES = ("redisai", "redisai-second", "redisai-cluster-1", "redisai-cluster-2")
# A bound on a server start, not a speed check: the suite runs beside two other servers starting on 2 cores.
START_TIMEOUT_S = 60
_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's variable interpolation: ``${VAR}``, ``${VAR:-default}`` (empty or unset: the default)."""
    return _VARIABLE.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


def _published(service: dict[str, Any], env: Mapping[str, str]) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of each published port, after interpolation."""
    ports = [interpolate(str(port), env).rsplit(":", 2) for port in service["ports"]]
    return [(address, int(host), int(container)) for address, host, container in ports]


def _dockerfile_arg(name: str) -> str:
    found = re.search(rf"^ARG {name}=(.*)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert found, f"the Dockerfile has no ARG {name}=..."
    return found.group(1).strip('"')


def test_compose_services_ports_and_commands() -> None:
    services = _compose()["services"]
    redis_service, server, replica = services["redis"], services["redisai"], services["redisai-second"]
    assert redis_service["image"].startswith("redis:")
    assert "--appendonly" in redis_service["command"] and "yes" in redis_service["command"]
    assert any(volume.endswith(":/data") for volume in redis_service["volumes"])
    assert [port[1:] for port in _published(server, {})] == [(6379, 6379), (9100, 9100)]
    assert [port[1:] for port in _published(replica, {})] == [(6380, 6379), (9101, 9100)]
    assert replica["profiles"] == ["second-server"]
    for service in (server, replica):
        command = service["command"]
        assert command[command.index("--redis-url") + 1] == "redis://redis:6379/0"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert all(key.startswith("REDISAI_") for key in service["environment"])


def test_dockerfile_is_slim_non_root_with_a_readiness_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    assert "torch==2.13.0" in text
    assert "\nUSER redisai" in text and "useradd" in text
    assert _dockerfile_healthcheck() == ["redisai-server", "--healthcheck"]
    assert 'ENTRYPOINT ["redisai-server"]' in text


def test_dockerfile_compiles_the_hot_path_unless_told_not_to() -> None:
    """The image's package is rebuilt with mypyc's modules (setup.py copied in, the mypy the project pins),
    and ``--build-arg COMPILE=0`` skips it."""
    text = (ROOT / "Dockerfile").read_text()
    assert _dockerfile_arg("COMPILE") == "1" and 'if [ "${COMPILE}" = 1 ]' in text
    assert "COPY pyproject.toml README.md setup.py ./" in text
    assert "REDISAI_COMPILE=1 pip install --no-build-isolation --no-deps --force-reinstall ." in text
    pinned = re.search(r'"(mypy==[0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned is not None and f'"{pinned.group(1)}"' in text


def test_ports_are_published_on_loopback_unless_an_address_is_given() -> None:
    services = _compose()["services"]
    for name in SERVER_SERVICES:
        assert {address for address, _, _ in _published(services[name], {})} == {"127.0.0.1"}, name
        wide = {"REDISAI_PUBLISH_ADDRESS": "0.0.0.0", "REDISAI_REQUIREPASS": "s3cret"}
        assert {address for address, _, _ in _published(services[name], wide)} == {"0.0.0.0"}, name
        assert interpolate(services[name]["environment"]["REDISAI_REQUIREPASS"], wide) == "s3cret"
        assert interpolate(services[name]["environment"]["REDISAI_REQUIREPASS"], {}) == ""  # empty: no AUTH
    assert "REDISAI_PUBLISH_ADDRESS=0.0.0.0 REDISAI_REQUIREPASS=" in (ROOT / "docker-compose.yml").read_text()


def test_the_metrics_port_is_published() -> None:
    services = _compose()["services"]
    for name in ("redisai", "redisai-second"):
        metrics = int(services[name]["environment"]["REDISAI_METRICS_PORT"])
        assert metrics in [container for _, _, container in _published(services[name], {})], name
    assert re.search(r"^EXPOSE .*\b9100\b", (ROOT / "Dockerfile").read_text(), re.MULTILINE)


def test_every_server_service_builds_or_reuses_one_image() -> None:
    """``image:`` alone fails when the image was never built (``docker compose --profile second-server up`` on a
    fresh machine); each server service builds the same context under the same tag, with the torch index."""
    services = _compose()["services"]
    builds = [services[name]["build"] for name in SERVER_SERVICES]
    assert all(build == builds[0] for build in builds) and builds[0]["context"] == "."
    assert {services[name]["image"] for name in SERVER_SERVICES} == {"redisai-server:latest"}
    assert interpolate(builds[0]["args"]["TORCH_INDEX_URL"], {}) == _dockerfile_arg("TORCH_INDEX_URL")
    assert interpolate(builds[0]["args"]["TORCH_INDEX_URL"], {"TORCH_INDEX_URL": "https://mirror/simple"}) == \
        "https://mirror/simple"


def _torch_install_line() -> str:
    """The Dockerfile's torch install: the first command of the RUN line that installs torch."""
    run = next(line for line in (ROOT / "Dockerfile").read_text().splitlines()
               if line.startswith("RUN ") and "torch==" in line)
    return run.removeprefix("RUN ").split("&&")[0].strip()


def test_dockerfile_installs_the_cpu_torch_from_its_build_argument() -> None:
    assert _dockerfile_arg("TORCH_INDEX_URL") == "https://download.pytorch.org/whl/cpu"
    assert shlex.split(_torch_install_line()) == ["pip", "install", "--index-url", "${TORCH_INDEX_URL}",
                                                  "torch==2.13.0"]


def _tiny_wheel(folder: Path, name: str, version: str) -> Path:
    """A wheel with metadata only: enough for pip to resolve and choose it from an index."""
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return wheel


def test_the_torch_line_takes_torch_from_the_index_given(tmp_path: Path) -> None:
    """The Dockerfile's torch line, run by pip (dry run) with TORCH_INDEX_URL pointing at a local index that
    holds a ``torch 2.13.0+cpu``: pip resolves torch from that index, and from nowhere else."""
    project = tmp_path / "simple" / "torch"
    project.mkdir(parents=True)
    wheel = _tiny_wheel(tmp_path, "torch", "2.13.0+cpu")
    (project / "index.html").write_text(f'<html><body><a href="{wheel.as_uri()}">{wheel.name}</a></body></html>')
    report = tmp_path / "report.json"
    machine = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}  # no local wheels
    env = {**machine, "TORCH_INDEX_URL": (tmp_path / "simple").as_uri(), "PIP_CONFIG_FILE": os.devnull,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = f"{_torch_install_line()} --dry-run --no-deps --ignore-installed --report {report}"
    subprocess.run(["bash", "-c", command], env=env, check=True, timeout=120, capture_output=True)
    chosen = json.loads(report.read_text())["install"]
    assert [(item["metadata"]["name"], item["metadata"]["version"]) for item in chosen] == [("torch", "2.13.0+cpu")]
    assert chosen[0]["download_info"]["url"] == wheel.as_uri()


def test_docs_say_how_to_get_the_cpu_torch() -> None:
    line = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert line in (ROOT / "docs" / "deployment.md").read_text()
    assert line in (ROOT / "README.md").read_text()


def _dockerfile_healthcheck() -> list[str]:
    """The exec form of the Dockerfile's HEALTHCHECK CMD."""
    line = next(line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("HEALTHCHECK"))
    command: list[str] = json.loads(line.split(" CMD ", 1)[1])
    return command


def _dockerfile_env() -> dict[str, str]:
    """The image's ENV REDISAI_* settings (what every container's server and healthcheck start with)."""
    env: dict[str, str] = {}
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("ENV ") and "REDISAI_" in line:
            env.update(word.partition("=")[::2] for word in line[4:].split() if word.startswith("REDISAI_"))
    return env


def _run_healthcheck(command: list[str], env: dict[str, str], port: int) -> subprocess.CompletedProcess[str]:
    """A healthcheck's exec form run here: ``redisai-server`` as ``python -m server``, the container's port made
    the local one."""
    assert command[0] == "redisai-server"
    args = [str(arg) for arg in command[1:]]
    if "--port" in args:
        args[args.index("--port") + 1] = str(port)
    return subprocess.run([sys.executable, "-m", "server", *args], env={**os.environ, **env, "REDISAI_PORT": str(port)},
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


@contextmanager
def _compose_server(service: dict[str, Any], redis_url: str, port: int, *, env: Mapping[str, str] | None = None,
                    metrics_port: int = 0) -> Iterator[int]:
    """The service's exact command line and environment (interpolated with ``env``, as compose would), with
    only the Redis host and the published ports made local."""
    args = [str(arg) for arg in service["command"]]
    if redis_url:
        args[args.index("--redis-url") + 1] = args[args.index("--redis-url") + 1].replace("redis://redis:6379", redis_url)
    args[args.index("--port") + 1] = str(port)
    args[args.index("--bind") + 1] = "127.0.0.1"  # tests listen on loopback only
    settings = {key: interpolate(str(value), env or {}) for key, value in service["environment"].items()}
    if "REDISAI_METRICS_PORT" in settings:
        settings["REDISAI_METRICS_PORT"] = str(metrics_port)
    proc = subprocess.Popen([sys.executable, "-m", "server", *args], env={**os.environ, **settings},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=START_TIMEOUT_S)
        yield port
    finally:
        proc.terminate()
        assert proc.wait(20) == 0


def test_compose_command_lines_against_a_real_redis(real_redis_url: str) -> None:
    services = _compose()["services"]
    direct = redis.Redis.from_url(real_redis_url)
    direct.flushall()
    metrics = free_port()
    with _compose_server(services["redisai"], real_redis_url, free_port(), metrics_port=metrics) as first, \
            _compose_server(services["redisai-second"], real_redis_url, free_port(), metrics_port=free_port()) as second:
        one, two = redis.Redis(port=first, protocol=2), redis.Redis(port=second, protocol=2)
        assert one.execute_command("AI.TENSORSET", "shared", "FLOAT", 2, "VALUES", 1, 2) == b"OK"
        assert two.execute_command("AI.TENSORGET", "shared", "VALUES") == [b"1", b"2"]
        assert direct.exists("shared") == 1
        one.set("plain", "value")
        assert two.get("plain") == b"value"
        wait_for_port(metrics, timeout=START_TIMEOUT_S)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as response:
            assert response.status == 200 and b"redisai_" in response.read()


def test_compose_password_from_the_environment(real_redis_url: str) -> None:
    """``REDISAI_REQUIREPASS=... docker compose up``: the server asks for it (the wide-open form)."""
    service = _compose()["services"]["redisai"]
    with _compose_server(service, real_redis_url, free_port(), env={"REDISAI_REQUIREPASS": "s3cret"}) as port:
        with pytest.raises(redis.AuthenticationError, match="Authentication required"):
            redis.Redis(port=port, protocol=2).execute_command("GET", "x")
        assert redis.Redis(port=port, protocol=2, password="s3cret").ping() is True


def test_compose_cluster_profile_nodes_and_servers() -> None:
    services = _compose()["services"]
    nodes = [services[f"redis-c{i}"] for i in (1, 2, 3)]
    for node in nodes:
        assert node["profiles"] == ["cluster"]
        assert node["command"][node["command"].index("--cluster-enabled") + 1] == "yes"
    shell, flag, script = services["cluster-init"]["command"]
    assert (shell, flag) == ("sh", "-c")
    create = script.split("||")[1].split()
    assert create[:3] == ["redis-cli", "--cluster", "create"] and "--cluster-yes" in create
    assert [arg for arg in create if arg.startswith("redis-c") and arg.endswith(":6379")] == ["redis-c1:6379", "redis-c2:6379", "redis-c3:6379"]
    servers = [services["redisai-cluster-1"], services["redisai-cluster-2"]]
    assert [[port[1:] for port in _published(s, {})] for s in servers] == [[(6390, 6379)], [(6391, 6379)]]
    for server in servers:
        assert server["depends_on"]["cluster-init"]["condition"] == "service_completed_successfully"


def test_compose_cluster_init_leaves_a_cluster_made_already(redis_cluster: LocalCluster) -> None:
    """A second `docker compose --profile cluster up` runs cluster-init again on nodes that are one cluster
    already (their nodes.conf is kept): it must succeed without creating anything, or the servers, which wait
    for it to complete successfully, would never start. Its shell line, on the local cluster's nodes."""
    _shell, _flag, script = _compose()["services"]["cluster-init"]["command"]
    for i, node in enumerate(redis_cluster.primaries(), 1):
        script = script.replace(f"redis-c{i}:6379", f"127.0.0.1:{node.port}")
    before = redis_cluster.primaries()[0].client().execute_command("CLUSTER", "MYID")
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Performing hash slots allocation" not in out.stdout  # the create part did not run
    assert redis_cluster.primaries()[0].client().execute_command("CLUSTER", "MYID") == before


def test_compose_cluster_servers_against_a_real_cluster(redis_cluster: LocalCluster) -> None:
    """The cluster profile's server command lines, with the node names made the local cluster's nodes."""
    redis_cluster.flush()
    services = _compose()["services"]
    local = {f"redis-c{i}:6379": f"127.0.0.1:{node.port}" for i, node in enumerate(redis_cluster.primaries(), 1)}
    started = []
    for name in ("redisai-cluster-1", "redisai-cluster-2"):
        service = dict(services[name])
        command = [str(arg) for arg in service["command"]]
        for node_name, address in local.items():
            command = [arg.replace(node_name, address) for arg in command]
        service["command"] = command
        started.append(_compose_server(service, "", free_port()))
    with started[0] as first, started[1] as second:
        one, two = redis.Redis(port=first, protocol=2), redis.Redis(port=second, protocol=2)
        for key in ("a", "b", "c"):  # three shards
            assert one.execute_command("AI.TENSORSET", key, "FLOAT", 1, "VALUES", 7) == b"OK"
            assert two.execute_command("AI.TENSORGET", key, "VALUES") == [b"7"]
        assert sum(node.client().dbsize() for node in redis_cluster.primaries()) == 3


def test_compose_healthchecks_are_readiness_with_the_servers_port() -> None:
    services = _compose()["services"]
    for name in ("redisai", "redisai-second", "redisai-cluster-1", "redisai-cluster-2"):
        service = services[name]
        test, command = service["healthcheck"]["test"], [str(arg) for arg in service["command"]]
        assert test[:3] == ["CMD", "redisai-server", "--healthcheck"], name
        for option in ("--port", "--metrics-port", "--requirepass"):  # what the probe must know of the server
            if option in command:
                assert test[test.index(option) + 1] == command[command.index(option) + 1], (name, option)
        assert service["healthcheck"]["timeout"] == "3s"


def test_compose_healthcheck_against_a_real_store_that_goes_away() -> None:
    """The compose server's command line, its healthcheck command line beside it: ready, then not once its
    store is gone (PING alone would still say PONG); over RESP, and over /readyz with a metrics port."""
    service = _compose()["services"]["redisai"]
    test = [str(arg) for arg in service["healthcheck"]["test"][1:]]
    env = {**_dockerfile_env(), **{key: interpolate(str(value), {}) for key, value in service["environment"].items()},
           "REDISAI_METRICS_PORT": "0"}
    metrics = free_port()
    with redis_server_process() as url:
        with _compose_server(service, url, free_port()) as plain, \
                _compose_server(service, url, free_port(), metrics_port=metrics) as observed:
            wait_for_port(metrics, timeout=START_TIMEOUT_S)
            for port, extra in ((plain, {}), (observed, {"REDISAI_METRICS_PORT": str(metrics)})):
                ready = _run_healthcheck(test, {**env, **extra}, port)
                assert (ready.returncode, ready.stdout) == (0, "ready\n"), ready.stderr
            redis.Redis.from_url(url).shutdown(nosave=True)
            assert redis.Redis(port=plain, protocol=2).ping() is True
            over_resp = _run_healthcheck(test, env, plain)
            assert over_resp.returncode == 1 and over_resp.stderr.startswith("not ready: "), over_resp.stderr
            assert "backing store unavailable" in over_resp.stderr
            over_http = _run_healthcheck(test, {**env, "REDISAI_METRICS_PORT": str(metrics)}, observed)
            assert over_http.returncode == 1, over_http.stderr
            assert over_http.stderr.startswith("not ready: the store is unavailable"), over_http.stderr


def test_dockerfile_healthcheck_with_tls_and_a_password_from_the_environment(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-days",
                    "1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    port = free_port()
    env = {**_dockerfile_env(), "REDISAI_BIND": "127.0.0.1", "REDISAI_PORT": str(port),  # loopback in tests
           "REDISAI_REQUIREPASS": "s3cret", "REDISAI_TLS_CERT_FILE": str(cert), "REDISAI_TLS_KEY_FILE": str(key)}
    with server_process(env=env):
        wait_for_port(port, timeout=START_TIMEOUT_S)
        ready = _run_healthcheck(_dockerfile_healthcheck(), env, port)
        assert (ready.returncode, ready.stdout) == (0, "ready\n"), ready.stderr
        wrong = _run_healthcheck(_dockerfile_healthcheck(), {**env, "REDISAI_REQUIREPASS": "wrong"}, port)
        assert wrong.returncode == 1 and "invalid username-password pair" in wrong.stderr.lower(), wrong.stderr
        plain = _run_healthcheck(_dockerfile_healthcheck(), {**env, "REDISAI_TLS_CERT_FILE": "",
                                                             "REDISAI_TLS_KEY_FILE": ""}, port)
        assert plain.returncode == 1, plain.stderr  # the port speaks TLS: a plain probe is refused


def test_make_venv_takes_torch_from_the_index_given() -> None:
    """``make venv TORCH_INDEX_URL=...`` (the README's set-up on an ordinary machine), shown by ``make -n``."""
    index = "https://download.pytorch.org/whl/cpu"
    shown = subprocess.run(["make", "-n", "-B", "venv", f"TORCH_INDEX_URL={index}"], cwd=ROOT, check=True,
                           capture_output=True, text=True, timeout=60).stdout
    assert f"pip install --quiet --index-url {index} torch==2.13.0" in shown
    plain = subprocess.run(["make", "-n", "-B", "venv"], cwd=ROOT, check=True, capture_output=True, text=True,
                           timeout=60).stdout
    assert "--index-url" not in plain and "torch==2.13.0" in plain


def test_the_build_context_holds_only_what_the_dockerfile_copies() -> None:
    """.dockerignore: .venv, .clients, build/ and the tests stay out of `docker compose up --build`'s context."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"
    let_in = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied: set[str] = set()
    for found in re.finditer(r"^COPY (.+) \S+$", (ROOT / "Dockerfile").read_text(), re.MULTILINE):
        copied.update(found.group(1).split())
    assert copied <= let_in and not {".venv", ".clients", "build", "tests"} & let_in, (copied, let_in)
    assert "**/*.so" in lines


def test_every_cluster_node_keeps_its_data_in_a_volume() -> None:
    compose = _compose()
    for name in ("redis-c1", "redis-c2", "redis-c3"):
        volumes = compose["services"][name]["volumes"]
        assert len(volumes) == 1 and volumes[0] == f"{name}-data:/data", (name, volumes)
        assert f"{name}-data" in compose["volumes"]
