"""Lazy backend registry: runtimes are imported on first use, never by ``import server``.

Backends are named by import string (uvicorn's pattern), so a missing optional dependency only matters to
the commands that need it, and availability can be reported without importing anything heavy.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import threading
from dataclasses import dataclass, field

from backends import errors as msgs
from backends.base import Backend
from backends.errors import AIError

KNOWN_BACKENDS = ("TF", "TFLITE", "TORCH", "ONNX")
BACKEND_IMPORTS = {
    "TF": "backends.tf_backend:TfBackend",
    "TFLITE": "backends.tflite_backend:TfliteBackend",
    "TORCH": "backends.torch_backend:TorchBackend",
    "ONNX": "backends.onnx_backend:OnnxBackend",
}
# Any one of a backend's packages makes it available (TFLITE: LiteRT, or the older tflite-runtime).
RUNTIME_PACKAGES = {
    "TF": ("tensorflow",),
    "TFLITE": ("ai_edge_litert", "tflite_runtime"),
    "TORCH": ("torch",),
    "ONNX": ("onnxruntime",),
}
# The distributions that may provide a backend's runtime, first match wins (CPU and GPU builds of each).
RUNTIME_DISTRIBUTIONS = {
    "TORCH": ("torch",),
    "ONNX": ("onnxruntime", "onnxruntime-gpu"),
    "TF": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"),
    "TFLITE": ("ai-edge-litert", "tflite-runtime"),
}


def default_backends_path() -> str:
    """RedisAI's default BACKENDSPATH is ``<module dir>/backends``; ours is the installed backends package."""
    return os.path.dirname(os.path.abspath(__file__))


@dataclass
class BackendRegistry:
    """The loaded backends of one server (part of its context)."""

    _loaded: dict[str, Backend] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, name: str) -> Backend:
        """The backend called ``name`` (upper case), importing it on first use.

        ``ERR Could not load backend`` for a known backend whose runtime package is not installed.
        """
        backend = self._loaded.get(name)
        if backend is not None:
            return backend
        with self._lock:
            if name not in self._loaded:
                self._loaded[name] = self._import(name)
            return self._loaded[name]

    @staticmethod
    def _import(name: str) -> Backend:
        target = BACKEND_IMPORTS.get(name)
        if target is None:
            raise AIError(msgs.COULD_NOT_LOAD_BACKEND_MSG)
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise AIError(msgs.COULD_NOT_LOAD_BACKEND_MSG) from exc
        backend: Backend = getattr(module, attr)()
        return backend

    def load_new(self, name: str) -> bool:
        """AI.CONFIG LOADBACKEND: import ``name`` now; False when it was already loaded (RedisAI refuses to load
        a backend twice). Raises ``AIError`` when it cannot be loaded. Call off the event loop: imports are slow."""
        with self._lock:
            if name in self._loaded:
                return False
            self._loaded[name] = self._import(name)
            return True

    def available(self) -> list[str]:
        """The backends whose runtime package is installed, found without importing it."""
        return [name for name, packages in RUNTIME_PACKAGES.items() if any(map(_installed, packages))]

    def loaded(self) -> dict[str, str]:
        """Backend name → runtime version, for the backends loaded so far."""
        return {name: backend.version() for name, backend in self._loaded.items()}


def _installed(package: str) -> bool:
    """Whether ``package`` can be imported, found without importing it (an import hook that refuses it, or a
    half-imported module without a spec, counts as not installed)."""
    return _find_spec(package) is not None


def runtime_version(name: str) -> str:
    """Backend ``name``'s runtime version as the runtime itself reports it once imported, found without
    importing it (the start banner must stay light); ``installed`` when nothing says.

    torch's is read from its ``torch/version.py``: PyPI's CUDA wheels carry ``2.11.0`` in their metadata while
    ``torch.__version__`` (what AI.INFO and ``INFO ai`` show once the backend is loaded) is ``2.11.0+cu130``.
    """
    if name == "TORCH":
        spec = _find_spec("torch")
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        built = torch_build_version(locations[0]) if locations else ""
        if built:
            return built
    for dist in RUNTIME_DISTRIBUTIONS.get(name, ()):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "installed"


def torch_build_version(package_dir: str) -> str:
    """``__version__`` as written in ``<package_dir>/version.py`` (torch generates it at build time, local tag
    included: ``+cpu``, ``+cu130``); ``""`` when the file or the line is missing."""
    try:
        with open(os.path.join(package_dir, "version.py"), encoding="utf-8") as handle:
            lines = handle.readlines()
    except OSError:
        return ""
    for line in lines:
        target, _, value = line.partition("=")
        if target.strip() == "__version__":
            try:
                parsed = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):
                return ""
            return parsed if isinstance(parsed, str) else ""
    return ""


def _find_spec(package: str) -> importlib.machinery.ModuleSpec | None:
    """``package``'s spec without importing it; None when it cannot be found."""
    try:
        return importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None


def parse_backend(raw: bytes) -> str:
    name = raw.decode(errors="replace").upper()
    if name not in KNOWN_BACKENDS:
        raise AIError(msgs.UNSUPPORTED_BACKEND_MSG)
    return name
