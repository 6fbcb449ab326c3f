"""``redisai-server --healthcheck``: ask a running server whether it is ready; the exit status says.

Usage: ``redisai-server --healthcheck [config file] [--port 6379] [--metrics-port 9121] ...`` (the Dockerfile's
HEALTHCHECK and docker-compose.yml's healthchecks). The settings are resolved as the server's are (config file <
``REDISAI_*`` environment < command line), so a container's environment describes the server beside it.

* With ``--metrics-port``: ``GET /readyz`` (server/ops/health.py): the store answers and every backend the
  stored models need loads. 200 → exit 0; anything else → exit 1, the reason printed.
* Without it: over RESP on ``--port`` (TLS when the port serves TLS, AUTH with ``--requirepass`` when one is
  set; the unix socket when there is no TCP listener): PING, then DBSIZE, which only the store can answer, so
  a store that is down, loading or refusing us fails the check while PING alone would still say PONG.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from typing import Any

from server.config import Config

PROBE_TIMEOUT_S = 2.5  # under the 3 s of the Docker healthcheck's timeout
ANY_ADDRESS = {"0.0.0.0": "127.0.0.1", "::": "::1", "*": "127.0.0.1", "": "127.0.0.1"}


def local_host(config: Config) -> str:
    """Where to reach the server from beside it: its first bind address, a wildcard one as loopback."""
    first = config.bind_addresses[0] if config.bind_addresses else ""
    first = first.lstrip("-")  # redis-server's optional-address prefix
    return ANY_ADDRESS.get(first, first)


def http_problem(config: Config) -> str:
    """'' when ``/readyz`` answers 200; else what it answered or why it could not be asked."""
    host = local_host(config)
    url = f"http://{f'[{host}]' if ':' in host else host}:{config.metrics_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as response:
            return "" if response.status == 200 else f"{url} answered {response.status}"
    except urllib.error.HTTPError as exc:
        return exc.read().decode(errors="replace").strip() or f"{url} answered {exc.code}"
    except OSError as exc:
        return f"cannot reach {url}: {exc}"


def _resp_client(config: Config) -> Any:
    import redis  # the probe's own process; the server never imports redis-py

    options: dict[str, Any] = {"password": config.requirepass or None, "socket_timeout": PROBE_TIMEOUT_S,
                               "socket_connect_timeout": PROBE_TIMEOUT_S, "protocol": 2}
    if not config.bind_addresses and config.unixsocket:
        return redis.Redis(unix_socket_path=config.unixsocket, **options)
    tls = config.tls_enabled and config.tls_port == 0  # with a tls-port, --port stays plain
    if tls:  # our own server on loopback: its certificate may be self-signed
        options.update(ssl=True, ssl_cert_reqs="none", ssl_check_hostname=False)
    return redis.Redis(host=local_host(config), port=config.port, **options)


def resp_problem(config: Config) -> str:
    """'' when PING and a store round trip (DBSIZE) both answer; else why not."""
    import redis

    client = _resp_client(config)
    try:
        client.ping()
        client.dbsize()
        return ""
    except redis.RedisError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()


def healthcheck(config: Config) -> int:
    """Exit status 0 (ready, ``ready`` printed) or 1 (``not ready: <reason>`` on stderr)."""
    problem = http_problem(config) if config.metrics_port else resp_problem(config)
    if problem:
        reason = problem.removeprefix("not ready: ")
        print(f"not ready: {reason}", file=sys.stderr)
        return 1
    print("ready")
    return 0
