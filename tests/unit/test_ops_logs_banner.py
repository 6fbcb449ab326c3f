"""Pure pieces of the operations work: the log formats, the log/metrics options, the banner's parts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from server.config import ConfigError, load_config, requested_action
from server.ops.banner import StoreVersion, cuda_text, parse_store_version, redact_url
from server.ops.logs import VERBOSE, JsonFormatter, TextFormatter


def _record(msg: str, level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("redisai.test", level, __file__, 1, msg, (), None)
    for name, value in extra.items():
        setattr(record, name, value)
    return record


def test_text_format_appends_fields_quoting_what_needs_it() -> None:
    line = TextFormatter().format(_record("model stored", fields={"key": b"my model", "size": 12, "device": "CPU"}))
    assert line.endswith(' redisai.test: model stored key="my model" size=12 device=CPU')
    assert TextFormatter().format(_record("plain")).endswith("redisai.test: plain")
    assert "json_only" not in TextFormatter().format(_record("banner", json_fields={"json_only": 1}))


def test_json_format_is_one_object_with_the_fields_as_keys() -> None:
    logging.addLevelName(VERBOSE, "VERBOSE")
    entry = json.loads(JsonFormatter().format(_record("client connected", VERBOSE, fields={"id": 3, "addr": "x"},
                                                      json_fields={"listeners": ["a:1", b"b:2"]})))
    assert entry["msg"] == "client connected" and entry["level"] == "verbose" and entry["logger"] == "redisai.test"
    assert (entry["id"], entry["addr"], entry["listeners"]) == (3, "x", ["a:1", "b:2"])
    assert {"ts", "pid"} <= set(entry) and entry["ts"].endswith("+00:00")


def test_log_and_metrics_options_from_file_environment_and_command_line(tmp_path: Path) -> None:
    conf = tmp_path / "server.conf"
    conf.write_text(f"log-format json\nlogfile {tmp_path / 'x.log'}\nmetrics-key-label no\n")
    config = load_config([str(conf)], environ={})
    assert (config.log_format, config.logfile, config.metrics_key_label) == ("json", str(tmp_path / "x.log"), False)
    assert config.config_file == str(conf)
    config = load_config([str(conf), "--log-format", "text"], environ={"REDISAI_METRICS_KEY_LABEL": "yes"})
    assert (config.log_format, config.metrics_key_label) == ("text", True)
    for bad in (["--log-format", "xml"], ["--metrics-key-label", "maybe"]):
        with pytest.raises(ConfigError):
            load_config(bad, environ={})
    assert requested_action(["--version"]) == "version" and requested_action(["--healthcheck"]) == "healthcheck"
    assert requested_action(["--port", "1"]) == "serve"


def test_store_versions_from_info_server() -> None:
    valkey = parse_store_version("# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n")
    assert valkey == StoreVersion("valkey", "8.1.8", "7.2.4")
    assert valkey.describe() == "valkey 8.1.8 (redis_version 7.2.4)"
    redis = parse_store_version("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n")
    assert redis == StoreVersion("redis", "7.0.15", "7.0.15") and redis.describe() == "redis 7.0.15"
    assert parse_store_version("") == StoreVersion() and StoreVersion().describe() == "unknown"


def test_store_urls_are_redacted_for_the_log() -> None:
    assert redact_url("redis://:secret@db:6380/2") == "redis://:***@db:6380/2"
    assert redact_url("rediss://app:p%40ss@db:6380") == "rediss://app:***@db:6380"
    assert redact_url("redis://db:6379/0") == "redis://db:6379/0"
    assert redact_url("unix:///run/redis.sock?db=1&password=x") == "unix:///run/redis.sock?db=1&password=***"


def test_cuda_yes_or_no_and_why() -> None:
    assert cuda_text([], "2.13.0+cpu") == "no (no NVIDIA GPU driver)"
    assert cuda_text(["NVIDIA H200"], "2.13.0") == "yes (GPU:0 NVIDIA H200)"
    assert cuda_text(["NVIDIA H200"], "2.13.0+cpu").startswith("no (torch 2.13.0+cpu is a CPU-only build")
