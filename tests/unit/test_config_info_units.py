"""Pure pieces of AI.CONFIG / INFO: the load-time options, the AI.CONFIG parser, commandstats merging."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.errors import AIError
from backends.registry import BackendRegistry, default_backends_path
from server.ai.state import AIState
from server.commands.config import ConfigRequest, parse_config
from server.commands.info_ai import merge_commandstats, queue_field_name
from server.config import Config, ConfigError, load_config


def test_observability_options_from_flags_env_and_file(tmp_path: Path) -> None:
    conf = tmp_path / "server.conf"
    conf.write_text("metrics-port 9300\nbackend-memory-limit 1\nbackends-path /from/file\n")
    config = load_config([str(conf)], environ={"REDISAI_METRICS_PORT": "9200"})
    assert (config.metrics_port, config.backend_memory_limit, config.backends_path) == (9200, 1, "/from/file")
    config = load_config(["--metrics-port", "9100", "--backend-memory-limit", "64", "--backends-path", "/b"],
                         environ={"REDISAI_METRICS_PORT": "9200"})
    assert (config.metrics_port, config.backend_memory_limit, config.backends_path) == (9100, 64, "/b")
    assert Config().metrics_port == 0  # off by default


@pytest.mark.parametrize("argv", [["--metrics-port", "70000"], ["--backend-memory-limit", "-1"]])
def test_bad_observability_options(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        load_config(argv, environ={})


def test_settings_from_config() -> None:
    settings = AIState.from_config(Config(backend_memory_limit=5)).settings
    assert settings.backends_path == default_backends_path() and settings.backends_path.endswith("backends")
    assert settings.backend_memory_limit == 5
    assert AIState.from_config(Config(backends_path="/x")).settings.backends_path == "/x"


def test_parse_config() -> None:
    assert parse_config([b"AI.CONFIG", b"loadbackend", b"onnx", b"p.so"]) == ConfigRequest("LOADBACKEND", "ONNX",
                                                                                          b"p.so")
    assert parse_config([b"AI.CONFIG", b"BackendsPath", b"/p", b"x"]) == ConfigRequest("BACKENDSPATH", path=b"/p")
    assert parse_config([b"AI.CONFIG", b"MODEL_CHUNK_SIZE", b"7"]) == ConfigRequest("MODEL_CHUNK_SIZE", chunk_size=7)
    assert parse_config([b"AI.CONFIG", b"get", b"model_chunk_size"]) == ConfigRequest("GET", "MODEL_CHUNK_SIZE")
    with pytest.raises(AIError, match="unsupported backend"):
        parse_config([b"AI.CONFIG", b"LOADBACKEND", b"PYTORCH", b"p"])


def test_registry_reports_available_without_loading() -> None:
    registry = BackendRegistry()
    assert set(registry.available()) == {"TORCH", "ONNX"} and registry.loaded() == {}


def test_merge_commandstats() -> None:
    ours = ["cmdstat_ai.info:calls=1,usec=2,usec_per_call=2.00,failed_calls=0\r\n"]
    store = "# Commandstats\r\ncmdstat_get:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
    merged = merge_commandstats(store, ours)
    assert merged.startswith("# Commandstats\r\ncmdstat_ai.info:") and merged.endswith("failed_calls=0\r\n")
    assert merged.count("# Commandstats") == 1
    assert merge_commandstats("", ours) == "# Commandstats\r\n" + ours[0]
    assert merge_commandstats("# Keyspace\r\ndb0:keys=1\r\n", ours).endswith("\r\n\r\n# Commandstats\r\n" + ours[0])


def test_queue_field_names_have_no_colon() -> None:
    assert (queue_field_name("CPU"), queue_field_name("GPU:1")) == ("ai_queue_CPU", "ai_queue_GPU_1")
