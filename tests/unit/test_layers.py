"""The layers of the tree, checked from its imports (docs/architecture.md, "Layers").

Every import counts, type-only ones too (``if TYPE_CHECKING:`` and function-local imports). The rule:
composition (``server.__main__``, ``server.app``, ``server.supervisor``, ``server.port_owner``, ``server.compiled``) → frontend → commands → ops → ai →
store → protocol; a module imports only its own layer or lower ones; ``server.config`` is a leaf any layer
but protocol may import; protocol imports only ``backends.errors``; ``dag`` and ``backends`` never import
``server``, and ``backends`` never imports ``dag``. And no cycles anywhere, within a layer neither.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("server", "dag", "backends")
LAYERS = {"protocol": 0, "store": 1, "ai": 2, "ops": 3, "commands": 4, "frontend": 5}
COMPOSITION = {"server.__main__", "server.app", "server.supervisor", "server.port_owner", "server.compiled"}
TOP = max(LAYERS.values()) + 1


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def _imported(tree: ast.AST, known: dict[str, Path]) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                target = full if full in known else node.module
                if target in known:
                    yield target
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: set(_imported(ast.parse(path.read_text()), known)) - {name} for name, path in known.items()}


def layer_of(module: str) -> int | None:
    """The rank of a server module (None: not in a layer — config, the package itself)."""
    if module in COMPOSITION:
        return TOP
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 2 and parts[0] == "server" else None


def _allowed(source: str, target: str) -> bool:
    if source.startswith("backends."):
        return target.startswith("backends")
    if source.startswith("dag"):
        return not target.startswith("server")
    if source.startswith("server.protocol."):
        return target == "backends.errors" or target.startswith("server.protocol.")
    here, there = layer_of(source), layer_of(target)
    if there is None or here is None:
        return target == "server.config" or not target.startswith("server") or here == TOP
    return there <= here


def test_no_module_imports_a_higher_layer() -> None:
    graph = import_graph()
    upward = sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                    if not _allowed(source, target))
    assert upward == []


def test_every_server_module_is_in_a_layer() -> None:
    """A new file in server/'s root would sit outside every layer: only config and the composition may."""
    loose = sorted(path.name for path in (ROOT / "server").glob("*.py")
                   if f"server.{path.stem}" not in COMPOSITION | {"server.config"} and path.stem != "__init__")
    assert loose == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative enough for this tree)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_there_are_no_import_cycles() -> None:
    assert _cycles(import_graph()) == []


def test_the_checker_sees_a_cycle_and_an_upward_import() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert not _allowed("server.store.keyspace", "server.commands.context")
    assert not _allowed("server.protocol.request", "server.config")
    assert not _allowed("dag.worker", "server.ai.state")
    assert _allowed("server.frontend.connection", "server.store.session")
