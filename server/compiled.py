"""Which modules of the per-request path are compiled with mypyc, and whether any compiled one is stale.

    python -m server.compiled            # one line per hot module: compiled, stale or pure Python

The compiled build (setup.py, `make venv`) puts a `.so` next to each module's `.py`; Python imports the `.so`
first. A `.py` edited after its build is therefore *not* what runs until `make compile` rebuilds it, which is
why the test suite refuses to start on a stale build and the start-up log names stale modules.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from dataclasses import dataclass

# The modules a common request passes through (docs/performance.md, "Compiled hot path"): framing and reply
# encoding, the connection and its reply queue, the store links (a cluster's routing too) and the metadata
# cache, the tensor, model and DAG commands with their codecs, and the run path down to the device queues.
# Not the ones only a rare command or a cluster's map refresh reaches (pub/sub bookkeeping, the topology
# parser). A module stays compiled even where its own share of a request is small: interpreted, each call
# into it from compiled code, and each read of its objects' attributes, goes through the interpreter, which
# costs far more than the module's own instructions in a compiled profile suggest (docs/bench-log.md,
# "Which modules to compile").
# A class compiled here cannot be subclassed by an interpreted one: keep its subclasses here too
# (tests/unit/test_compiled.py checks it).
HOT_MODULES: tuple[str, ...] = (
    "server.protocol.framer",
    "server.protocol.reply",
    "server.protocol.request",
    "server.protocol.slot",
    "server.frontend.connection",
    "server.frontend.replies",
    "server.frontend.relay",
    "server.frontend.eager",
    "server.frontend.bulk_reader",
    "server.commands.client_state",
    "server.ops.stats",
    "server.store.keyspace",
    "server.store.shared_checks",
    "server.store.slot_writes",
    "server.store.upstream",
    "server.store.redis",
    "server.store.embedded",
    "server.store.cluster_keys",
    "server.store.cluster_link",
    "server.store.relays",
    "server.store.node_connections",
    "server.store.cluster_fanout",
    "server.store.cache",
    "server.store.nodes",
    "server.store.cluster_state",
    "server.store.atomic",
    "server.commands.args",
    "server.commands.context",
    "server.commands.spec",
    "server.commands.generic",
    "server.commands.tensor",
    "server.commands.model",
    "server.commands.model_args",
    "server.commands.dag",
    "server.commands.dag_ops",
    "server.ai.single_op",
    "server.ai.execution",
    "server.ai.tensor_io",
    "server.ai.state",
    "server.ai.steps",
    "server.ai.stored",
    "server.ai.attempts",
    "dag.parse",
    "dag.inline",
    "dag.cost_table",
    "dag.inline_batch",
    "dag.inline_group",
    "dag.batching",
    "dag.runinfo",
    "dag.execute",
    "dag.worker",
    "dag.manager",
    "dag.mangle",
    "dag.ops",
    "backends.objects",
    "backends.tensor",
    "backends.tensor_args",
    "backends.batching",
    "backends.errors",
    "backends.device",
)


@dataclass(frozen=True)
class ModuleBuild:
    """One hot module: where its source is, and the compiled file that shadows it (None when pure)."""

    name: str
    source: str
    native: str | None

    built_at: float = 0.0

    @property
    def stale(self) -> bool:
        """A compiled module whose source changed after it was built runs the old code."""
        return self.native is not None and os.path.getmtime(self.source) > self.built_at


def _native_beside(source: str) -> str | None:
    """The extension module next to `source` that an import would pick before it, if there is one."""
    stem = source[: -len(".py")]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(stem + suffix):
            return stem + suffix
    return None


def _shared_library_time(root: str) -> float:
    """When mypyc's shared library (the compiled code itself; each module's `.so` is a small shim) was built.

    A rebuild rewrites it but may leave an unchanged shim with its old time, so staleness is judged by it; a
    rebuild after an edit that changes no C (a comment) rewrites nothing, so `make compile` dates the library.
    """
    times = [os.path.getmtime(os.path.join(root, name)) for name in os.listdir(root) if "__mypyc" in name]
    return max(times, default=0.0)


def hot_module_builds(root: str = "") -> list[ModuleBuild]:
    """Each hot module's build, found without importing it (the check runs before the server imports them);
    ``root``: the folder that holds the packages (this project's by default)."""
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # Only a build in place (a checkout: setup.py beside the packages) goes stale by editing; an installed
    # wheel's files get whatever times the installer gave them, so their order means nothing.
    built_at = _shared_library_time(root) if os.path.exists(os.path.join(root, "setup.py")) else float("inf")
    builds = []
    for name in HOT_MODULES:
        source = os.path.join(root, *name.split(".")) + ".py"
        native = _native_beside(source)
        built_at_module = max(built_at, os.path.getmtime(native)) if native is not None else 0.0
        builds.append(ModuleBuild(name, source, native, built_at_module))
    return builds


def describe_build() -> str:
    """`compiled (15 modules)`, `pure Python`, or `compiled, STALE: a, b` for the start-up log and INFO."""
    if os.environ.get("REDISAI_PURE_PYTHON") == "1":
        return "pure Python (REDISAI_PURE_PYTHON=1)"
    builds = hot_module_builds()
    compiled = [build for build in builds if build.native is not None]
    stale = [build.name for build in compiled if build.stale]
    if not compiled:
        return "pure Python"
    text = f"compiled ({len(compiled)} of {len(builds)} hot modules)"
    return f"{text}, STALE (run make compile): {', '.join(stale)}" if stale else text


def main() -> int:
    """Print each hot module's state; exit 1 when a compiled module is stale."""
    builds = hot_module_builds()
    for build in builds:
        state = "pure Python" if build.native is None else ("STALE" if build.stale else "compiled")
        print(f"{build.name:32} {state}")
    return 1 if any(build.stale for build in builds) else 0


if __name__ == "__main__":
    sys.exit(main())
