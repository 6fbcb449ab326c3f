"""What the server says about itself at start (and ``--version``): version, listeners, store, backends, devices.

Usage: ``redisai-server --version``; the banner is logged at notice by every start.

Nothing here imports a runtime: backend versions come from the installed files (backends/registry.py), GPUs from the
NVIDIA driver's /proc entries, so the banner costs milliseconds and ``import server`` stays light.
"""

from __future__ import annotations

import glob
import os
import platform
from dataclasses import dataclass
from urllib.parse import urlsplit

from backends.registry import BackendRegistry, runtime_version
from server.config import REDISAI_COMPAT_VERSION, VERSION, Config

NVIDIA_GPUS = "/proc/driver/nvidia/gpus/*/information"


def version_text() -> str:
    """``--version``: ``redisai-server 0.1.0 (RedisAI 1.2.7 commands, Python 3.11.7)``"""
    return f"redisai-server {VERSION} (RedisAI {REDISAI_COMPAT_VERSION} commands, Python {platform.python_version()})"


@dataclass(frozen=True, slots=True)
class StoreVersion:
    """What the store says it is (its INFO server): ``valkey 8.1.8`` with ``redis_version`` 7.2.4, say."""

    name: str = ""  # redis, valkey, ... ("" until the store was asked)
    version: str = ""  # the server's own version (valkey_version for Valkey, else redis_version)
    redis_version: str = ""  # the Redis version it claims compatibility with (what clients feature-check)

    def describe(self) -> str:
        if not self.name:
            return "unknown"
        same = self.version == self.redis_version or not self.redis_version
        return f"{self.name} {self.version}" + ("" if same else f" (redis_version {self.redis_version})")


def parse_store_version(info_server: str) -> StoreVersion:
    """The store's name and versions from its ``INFO server`` text."""
    fields = dict(line.split(":", 1) for line in info_server.splitlines() if ":" in line and not line.startswith("#"))
    redis_version = fields.get("redis_version", "").strip()
    name = fields.get("server_name", "").strip() or ("redis" if redis_version else "")
    version = fields.get(f"{name}_version", "").strip() or redis_version
    return StoreVersion(name, version, redis_version)


def redact_url(url: str) -> str:
    """A store URL fit for a log: its password (and any ``password=`` query value) replaced by ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user = parts.username or ""
        netloc = f"{user}:***@{netloc.rpartition('@')[2]}"
    query = "&".join("password=***" if item.lower().startswith("password=") else item
                     for item in parts.query.split("&")) if parts.query else ""
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "") + (
        f"#{parts.fragment}" if parts.fragment else "")


def backend_versions(registry: BackendRegistry) -> list[tuple[str, str]]:
    """(backend, runtime version) of every backend whose runtime is installed, without importing it; the
    version as the runtime reports it (``+cu130`` included: backends/registry.py, ``runtime_version``)."""
    return [(name, runtime_version(name)) for name in registry.available()]


def gpu_names() -> list[str]:
    """The NVIDIA GPUs the driver reports (``Model:`` of /proc/driver/nvidia/gpus/*/information), in bus order."""
    names = []
    for path in sorted(glob.glob(NVIDIA_GPUS)):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if line.startswith("Model:"):
                        names.append(line.split(":", 1)[1].strip())
                        break
        except OSError:
            continue
    return names


def cuda_text(gpus: list[str], torch_version: str) -> str:
    """CUDA yes or no, and why: the driver's GPUs, unless torch is a CPU-only build that cannot use them."""
    if not gpus:
        return "no (no NVIDIA GPU driver)"
    listed = ", ".join(f"GPU:{i} {name}" for i, name in enumerate(gpus))
    if torch_version.endswith("+cpu"):
        return f"no (torch {torch_version} is a CPU-only build; the driver reports {listed})"
    return f"yes ({listed})"


def store_text(config: Config, store_describe: str, version: StoreVersion) -> str:
    where = redact_url(config.redis_url) if config.redis_url else store_describe
    return f"{where}, server {version.describe()}"


def banner(config: Config, listeners: list[str], metrics_url: str, store_describe: str,
           version: StoreVersion, registry: BackendRegistry) -> list[tuple[str, dict[str, object]]]:
    """The start banner: one (line, fields) per log record, so the JSON log has each part as fields."""
    backends = backend_versions(registry)
    gpus = gpu_names()
    cuda = cuda_text(gpus, dict(backends).get("TORCH", ""))
    return [
        (version_text(), {"version": VERSION, "redisai_version": REDISAI_COMPAT_VERSION, "pid": os.getpid()}),
        (f"listening on {', '.join(listeners) or 'nothing'}"
         + (f"; metrics, /healthz and /readyz on {metrics_url}" if metrics_url else ""),
         {"listeners": listeners, "metrics": metrics_url}),
        (f"store: {store_text(config, store_describe, version)}",
         {"store": redact_url(config.redis_url) if config.redis_url else "embedded",
          "store_version": version.describe()}),
        ("backends available: " + (", ".join(f"{name} {ver}" for name, ver in backends) or "none")
         + " (each loaded on first use)", {"backends": dict(backends)}),
        (f"devices: CPU ({os.cpu_count() or 1} cores); CUDA: {cuda}", {"cpus": os.cpu_count() or 1, "gpus": gpus}),
        (f"worker threads: {config.threads_per_queue} per device queue; config file: {config.config_file or 'none'}",
         {"threads_per_queue": config.threads_per_queue, "config_file": config.config_file}),
    ]
