"""Pure pieces of AI.CONFIG / INFO: the load-time options, the AI.CONFIG parser, commandstats merging."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from backends.errors import AIError
from backends.registry import (
    RUNTIME_DISTRIBUTIONS,
    BackendRegistry,
    default_backends_path,
    runtime_version,
    torch_build_version,
)
from server.ai.state import AIState
from server.commands.config import ConfigRequest, parse_config
from server.commands.info_ai import queue_field_name
from server.commands.info_text import merged, module_lines, split_sections, wanted_sections
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


def _distribution_installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_registry_reports_available_without_loading() -> None:
    """Available = installed (asked of the distributions here, not of the import system as the registry does);
    the versions reported before loading are the ones the loaded backends report (``+cu130`` included)."""
    registry = BackendRegistry()
    installed = {name for name, dists in RUNTIME_DISTRIBUTIONS.items() if any(map(_distribution_installed, dists))}
    assert set(registry.available()) == installed and registry.loaded() == {}
    light = [name for name in ("TORCH", "ONNX") if name in installed]  # TF takes seconds to import
    before = {name: runtime_version(name) for name in light}
    assert registry.loaded() == {}
    for name in light:
        registry.get(name)
    assert registry.loaded() == before


def test_torch_version_keeps_the_builds_local_tag(tmp_path: Path) -> None:
    """PyPI's CUDA wheel says 2.11.0 in its metadata and 2.11.0+cu130 in torch.__version__: the latter counts."""
    (tmp_path / "version.py").write_text("from typing import Optional\n__version__ = '2.11.0+cu130'\n"
                                         "cuda: Optional[str] = '13.0'\n")
    assert torch_build_version(str(tmp_path)) == "2.11.0+cu130"
    (tmp_path / "version.py").write_text("__version__ = get_version()\n")
    assert torch_build_version(str(tmp_path)) == "" and torch_build_version(str(tmp_path / "none")) == ""


def test_info_groups_follow_redis() -> None:
    assert wanted_sections([])[:3] == ["server", "clients", "memory"] and "module_list" in wanted_sections([])
    everything = wanted_sections(["everything"])
    assert everything.index("module_list") < everything.index("keyspace") and everything[-1] == "ai"
    assert wanted_sections(["ai", "modules"]) == ["module_list", "ai"]
    assert wanted_sections(["keyspace", "server", "ai_cpu"]) == ["server", "keyspace", "ai_cpu"]
    assert wanted_sections(["Memory", "memory"]) == ["memory"]


def test_our_fields_replace_the_stores_and_the_rest_stay() -> None:
    store = ["redis_version:7.2.4", "process_id:1", "used_cpu_sys:0.1"]
    assert merged(store, [("process_id", 42), ("backing_store", "x")]) == [
        "redis_version:7.2.4", "process_id:42", "used_cpu_sys:0.1", "backing_store:x"]


def test_the_stores_text_splits_into_sections_and_the_ai_module_is_listed_first() -> None:
    text = "# Server\r\nredis_version:7\r\n\r\n# Modules\r\nmodule:name=search,ver=1\r\n"
    sections = split_sections(text)
    assert sections == {"server": ["redis_version:7"], "modules": ["module:name=search,ver=1"]}
    assert module_lines(sections["modules"])[0].startswith("module:name=ai,ver=10207,")
    assert module_lines(sections["modules"])[1] == "module:name=search,ver=1"


def test_queue_field_names_have_no_colon() -> None:
    assert (queue_field_name("CPU"), queue_field_name("GPU:1")) == ("ai_queue_CPU", "ai_queue_GPU_1")
