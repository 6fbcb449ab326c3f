"""Each row of the command table agrees with its handler.

``after_relays`` (server/commands/spec.py) used to be kept in sync by hand, and AI.CONFIG slipped: its
LOADBACKEND returns a coroutine, and a coroutine that starts while a relayed command is still in flight can
overtake it. The rule checked here: a handler that can return a coroutine is marked, and a sync handler that
never does is marked only for a reason written down in ``SYNC_BUT_AFTER_RELAYS``.

Whether a sync handler can return a coroutine is found by running it: every sync handler is called with a
small fake client (the ``Client`` protocol of server/commands/context.py, over a real ``ServerContext`` whose
store is never started) and the representative argvs of ``SAMPLES``, which must cover each sync handler, so
a new command cannot skip the check. Coroutines are closed unrun: nothing touches the store or a backend.
"""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from backends.errors import AIError
from server.ai.state import AIState
from server.commands.client_state import ClientState
from server.commands.context import Client, ServerContext
from server.commands.spec import CommandSpec
from server.commands.table import COMMAND_TABLE
from server.config import Config
from server.store.keyspace import Keyspace
from server.store.redis import RedisStore

# Sync handlers marked ``after_relays`` although they return no coroutine, each with its reason.
SYNC_BUT_AFTER_RELAYS = {
    # RESET drops the store session that the client's earlier relayed commands are still waiting on.
    "RESET",
    # CLIENT INFO/LIST describe what earlier relayed commands change once answered (EXEC's SELECT: db=,
    # CLIENT TRACKING: flag t), as Redis, which runs them in order, does.
    "CLIENT",
}

PASSWORD = "secret"


def _argvs(*lines: str) -> list[list[bytes]]:
    return [[word.encode() for word in line.split()] for line in lines]


# Representative argvs for every sync handler: each subcommand and each branch that could hand work off.
SAMPLES: dict[str, list[list[bytes]]] = {
    "PING": _argvs("PING", "PING hello"),
    "ECHO": _argvs("ECHO hello"),
    "MODULE": _argvs("MODULE LIST", "MODULE HELP", "MODULE LOAD /x.so"),
    "QUIT": _argvs("QUIT"),
    "AUTH": _argvs(f"AUTH {PASSWORD}", f"AUTH default {PASSWORD}", "AUTH wrong"),
    "HELLO": _argvs("HELLO", "HELLO 3", f"HELLO 2 AUTH default {PASSWORD} SETNAME me", "HELLO 4"),
    "SELECT": _argvs("SELECT 1", "SELECT 99"),
    "RESET": _argvs("RESET"),
    "CLIENT": _argvs("CLIENT SETNAME me", "CLIENT GETNAME", "CLIENT SETINFO LIB-NAME lib", "CLIENT ID",
                     "CLIENT INFO", "CLIENT LIST", "CLIENT LIST TYPE normal", "CLIENT KILL ID 99",
                     "CLIENT KILL 1.2.3.4:5", "CLIENT REPLY ON", "CLIENT TRACKING ON", "CLIENT UNBLOCK 1",
                     "CLIENT NO-EVICT on"),
    "SHUTDOWN": _argvs("SHUTDOWN", "SHUTDOWN NOSAVE NOW", "SHUTDOWN ABORT"),
    "COMMAND": _argvs("COMMAND", "COMMAND COUNT", "COMMAND LIST", "COMMAND INFO PING", "COMMAND INFO PING GET",
                      "COMMAND DOCS", "COMMAND DOCS PING", "COMMAND DOCS GET", "COMMAND GETKEYS AI.TENSORGET k",
                      "COMMAND GETKEYSANDFLAGS AI.TENSORGET k", "COMMAND GETKEYS GET k", "COMMAND HELP"),
    "AI.CONFIG": _argvs("AI.CONFIG LOADBACKEND TORCH x", "AI.CONFIG LOADBACKEND ONNX x",
                        "AI.CONFIG LOADBACKEND TF x", "AI.CONFIG BACKENDSPATH /tmp", "AI.CONFIG MODEL_CHUNK_SIZE 10",
                        "AI.CONFIG GET BACKENDSPATH", "AI.CONFIG GET MODEL_CHUNK_SIZE", "AI.CONFIG NOPE"),
}


@dataclass
class FakeClient:
    """The ``Client`` protocol, minimally: state lives in ``state``; a sync handler never reaches the store."""

    ctx: ServerContext
    state: ClientState = field(default_factory=lambda: ClientState(1, "127.0.0.1:5000", "127.0.0.1:6379", 7, True))
    closing: bool = False

    def keyspace(self) -> Keyspace:
        raise AssertionError("a sync handler reached the store: make it async and mark it after_relays")

    def set_protocol(self, proto: int) -> None:
        self.state.proto = proto

    def reset(self) -> None:
        pass

    def close_after_reply(self) -> None:
        self.closing = True

    def show_current_reply(self, visible: bool) -> None:
        pass

    def relays_everything(self) -> bool:
        return False

    def kill(self) -> None:
        self.closing = True

    def subscribed(self) -> bool:
        return False

    def describe(self) -> str:
        return f"id={self.state.id} addr={self.state.addr}"

    def idle(self) -> bool:
        return True

    def close(self) -> None:
        self.closing = True


def _client() -> Client:
    config = Config(requirepass=PASSWORD)
    ctx = ServerContext(config=config, store=RedisStore("redis://127.0.0.1:1/0"), commands=COMMAND_TABLE,
                        ai=AIState.from_config(config))
    client = FakeClient(ctx)
    ctx.clients[client.state.id] = client
    return client


def _source_def(handler: Callable[..., object]) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The handler's definition read from its `.py`: a compiled (mypyc) handler keeps neither its docstring,
    its `__module__` nor `inspect.iscoroutinefunction`'s answer, so all are judged by its source."""
    for module in list(sys.modules.values()):
        module_file = getattr(module, "__file__", None) or ""
        if "/server/commands/" not in module_file or getattr(module, handler.__name__, None) is not handler:
            continue
        directory, name = module_file.rsplit("/", 1)
        with open(f"{directory}/{name.split('.', 1)[0]}.py", encoding="utf-8") as file:
            tree = ast.parse(file.read())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == handler.__name__:
                return node
    raise AssertionError(f"no module of server/commands defines {handler.__name__}")


def _is_async(handler: Callable[..., object]) -> bool:
    return isinstance(_source_def(handler), ast.AsyncFunctionDef)


def _has_docstring(handler: Callable[..., object]) -> bool:
    return ast.get_docstring(_source_def(handler)) is not None


def _sync_specs() -> list[CommandSpec]:
    return [spec for spec in COMMAND_TABLE.values() if not _is_async(spec.handler)]


def _outcomes(spec: CommandSpec) -> Iterator[object]:
    """What the handler returns for each sample (an error counts as no coroutine), each on a fresh client."""
    for argv in SAMPLES[spec.name]:
        try:
            yield spec.handler(_client(), argv)
        except AIError:
            continue


def _returns_coroutine(spec: CommandSpec) -> bool:
    found = False
    for outcome in _outcomes(spec):
        if inspect.iscoroutine(outcome):
            outcome.close()
            found = True
    return found


@pytest.mark.parametrize("spec", [s for s in COMMAND_TABLE.values() if _is_async(s.handler)],
                         ids=lambda spec: spec.name)
def test_async_handlers_are_marked_after_relays(spec: CommandSpec) -> None:
    assert spec.after_relays, f"{spec.name}: its handler is async def, so mark the row after_relays=True"


def test_every_sync_handler_has_samples() -> None:
    assert {spec.name for spec in _sync_specs()} == set(SAMPLES), "add representative argvs to SAMPLES"


@pytest.mark.parametrize("spec", _sync_specs(), ids=lambda spec: spec.name)
def test_sync_handlers_are_marked_exactly_when_they_must_be(spec: CommandSpec) -> None:
    if _returns_coroutine(spec):
        assert spec.after_relays, f"{spec.name} can return a coroutine: mark the row after_relays=True"
    elif spec.after_relays:
        assert spec.name in SYNC_BUT_AFTER_RELAYS, (
            f"{spec.name} is sync and never returns a coroutine: unmark it, or add it with its reason to "
            "SYNC_BUT_AFTER_RELAYS")


def test_the_allow_list_names_sync_marked_rows() -> None:
    for name in SYNC_BUT_AFTER_RELAYS:
        spec = COMMAND_TABLE[name]
        assert spec.after_relays and not _is_async(spec.handler)
        assert not _returns_coroutine(spec), f"{name} returns a coroutine: it needs no allow-list entry"


def test_loadbackend_is_a_coroutine_so_ai_config_is_marked() -> None:
    spec = COMMAND_TABLE["AI.CONFIG"]
    outcome = spec.handler(_client(), _argvs("AI.CONFIG LOADBACKEND TORCH x")[0])
    assert inspect.iscoroutine(outcome)
    outcome.close()
    assert spec.after_relays


def test_no_auth_comes_from_the_rows_flags() -> None:
    allowed = {name for name, spec in COMMAND_TABLE.items() if spec.no_auth}
    assert allowed == {"AUTH", "HELLO", "QUIT", "RESET"}
    assert all(spec.no_auth == ("no_auth" in spec.flags) for spec in COMMAND_TABLE.values())


def test_ai_rows_are_the_ai_commands() -> None:
    for spec in COMMAND_TABLE.values():
        assert spec.ai == spec.name.startswith("AI.") == (spec.group == "ai"), spec.name
        assert spec.name == spec.name.upper() and _has_docstring(spec.handler), spec.name
