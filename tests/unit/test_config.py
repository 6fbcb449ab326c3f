"""Settings: defaults < config file < environment < command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import Config, ConfigError, load_config
from server.store.upstream import parse_store_url


def test_defaults() -> None:
    config = load_config([], environ={})
    assert config == Config()
    assert (config.bind, config.port, config.redis_url) == ("127.0.0.1", 6379, "")


def test_precedence(tmp_path: Path) -> None:
    conf = tmp_path / "server.conf"
    conf.write_text("port 7000\nthreads-per-queue 3\nlog-level debug\nbind \"127.0.0.1 ::1\"\n")
    config = load_config([str(conf)], environ={"REDISAI_THREADS_PER_QUEUE": "4"})
    assert (config.port, config.threads_per_queue, config.log_level) == (7000, 4, "debug")
    assert config.bind_addresses == ["127.0.0.1", "::1"]
    config = load_config([str(conf), "--threads-per-queue", "5"], environ={"REDISAI_THREADS_PER_QUEUE": "4"})
    assert config.threads_per_queue == 5


@pytest.mark.parametrize(
    "argv",
    [["--port", "70000"], ["--threads-per-queue", "0"], ["--log-level", "loud"], ["--redis-url", "http://x"],
     ["--tls-cert-file", "cert.pem"]],
)
def test_rejects_bad_values(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        load_config(argv, environ={})


def test_unknown_option_in_file(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("no-such-option 1\n")
    with pytest.raises(ConfigError, match="unknown option"):
        load_config([str(conf)], environ={})


def test_store_urls() -> None:
    assert parse_store_url("redis://127.0.0.1:6380/2").db == 2
    address = parse_store_url("rediss://user:p%40ss@host:6390?db=3")
    assert (address.host, address.port, address.use_tls, address.username, address.password, address.db) == (
        "host", 6390, True, "user", "p@ss", 3)
    unix = parse_store_url("unix:///tmp/redis.sock?db=1")
    assert (unix.path, unix.db) == ("/tmp/redis.sock", 1)
