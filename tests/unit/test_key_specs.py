"""The command table's key specs, key finders and DOCS arguments agree with each other (no sockets).

A key spec (COMMAND INFO) and a command's own key finder (COMMAND GETKEYS) describe the same keys: where a
command's specs are all known, they find exactly the finder's keys; where some are ``unknown``, what they
find is among the finder's keys, so a client routing by the specs alone never routes by a key that is not
one.
"""

from __future__ import annotations

import pytest

from server.commands.command_info import glob_regex
from server.commands.table import COMMAND_TABLE

SAMPLES = [
    "AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c TIMEOUT 10",
    "AI.MODELRUN m INPUTS a b OUTPUTS c d",
    "AI.SCRIPTEXECUTE s f KEYS 2 k1 k2 INPUTS 1 a ARGS 2 x y OUTPUTS 2 c d",
    "AI.SCRIPTEXECUTE s f INPUTS 1 a",
    "AI.SCRIPTRUN s f INPUTS a OUTPUTS b",
    "AI.DAGEXECUTE LOAD 2 a b PERSIST 1 c |> AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c",
    "AI.DAGEXECUTE ROUTING {t} |> AI.TENSORSET x FLOAT 1 |> AI.TENSORGET x",
    "AI.DAGEXECUTE_RO LOAD 1 a |> AI.MODELEXECUTE m INPUTS 1 a OUTPUTS 1 b |> AI.TENSORGET b",
    "AI.DAGRUN LOAD 1 a PERSIST 1 b |> AI.MODELRUN m INPUTS a OUTPUTS b",
    "AI.DAGRUN_RO LOAD 1 a |> AI.TENSORGET a",
    "AI.GRAPHSTORE g INPUTS 1 x OUTPUTS 1 y |> AI.MODELEXECUTE m INPUTS 1 x OUTPUTS 1 y",
    "AI.GRAPHEXECUTE g INPUTS 2 a b OUTPUTS 1 c",
    "AI.TENSORSET t FLOAT 2 VALUES 1 2",
    "AI.SCRIPTSTORE s CPU ENTRY_POINTS 1 f SOURCE x",
]


def _argv(line: str) -> list[bytes]:
    return [word.encode() for word in line.split()]


@pytest.mark.parametrize("line", SAMPLES)
def test_key_specs_find_the_finders_keys(line: str) -> None:
    argv = _argv(line)
    spec = COMMAND_TABLE[line.split()[0]]
    found = spec.keys_of(argv)
    by_specs = [key for key_spec in spec.specs() for key in key_spec.keys(argv)]
    if any(key_spec.finder.begin == "unknown" for key_spec in spec.specs()):
        assert set(by_specs) <= set(found)
    else:
        assert sorted(by_specs) == sorted(found)
    legacy = argv[spec.first_key : spec.last_key + 1 : spec.step] if spec.first_key > 0 else []
    assert set(legacy) <= set(found)


def test_rows_whose_keys_move_say_so() -> None:
    for spec in COMMAND_TABLE.values():
        movable = spec.find_keys is not None or any(s.finder.begin != "index" for s in spec.specs())
        assert movable == ("movablekeys" in spec.flags), spec.name


def test_every_key_argument_names_its_key_spec() -> None:
    def key_args(arguments: list[dict[str, object]]) -> list[dict[str, object]]:
        found = [arg for arg in arguments if arg["type"] == "key"]
        nested = [arg["arguments"] for arg in arguments if "arguments" in arg]
        return found + [inner for group in nested for inner in key_args(group)]  # type: ignore[arg-type]

    for spec in COMMAND_TABLE.values():
        if not spec.ai:
            continue
        docs = spec.docs_reply()
        assert docs["complexity"] and docs["group"] == "module" and docs["module"] == "ai", spec.name
        for arg in key_args(docs["arguments"]):
            index = arg.get("key_spec_index")
            assert isinstance(index, int) and 0 <= index < len(spec.specs()), (spec.name, arg)


def test_usage_lines_become_redis_arguments() -> None:
    tensorset = COMMAND_TABLE["AI.TENSORSET"].docs_reply()["arguments"]
    assert [arg["name"] for arg in tensorset] == ["key", "type", "dim", "data_value"]
    assert [flag.text for flag in tensorset[2]["flags"].items] == ["optional", "multiple"]
    choice = tensorset[3]
    assert choice["type"] == "oneof" and [arg["token"] for arg in choice["arguments"]] == ["BLOB", "VALUES"]
    assert [flag.text for flag in choice["arguments"][1]["flags"].items] == ["multiple"]  # value [value ...]
    mode = COMMAND_TABLE["AI.GRAPHEXECUTE"].docs_reply()["arguments"][-1]
    assert (mode["type"], mode["token"]) == ("oneof", "MODE")
    assert [arg["type"] for arg in mode["arguments"]] == ["pure-token", "pure-token"]
    dag = COMMAND_TABLE["AI.DAGEXECUTE"].docs_reply()["arguments"]
    assert dag[-1]["token"] == "|>" and [flag.text for flag in dag[-1]["flags"].items] == ["multiple"]


@pytest.mark.parametrize(("pattern", "name", "matches"), [
    ("ai.*", "ai.modelexecute", True),
    ("AI.MODEL*", "ai.modelexecute", True),
    ("p?ng", "ping", True),
    ("p[io]ng", "pong", True),
    ("p[^i]ng", "ping", False),
    ("[a-c]ny", "bny", True),
    ("ai\\.info", "ai.info", True),
    ("ai\\.info", "aixinfo", False),
    ("get", "getex", False),
])
def test_redis_glob(pattern: str, name: str, matches: bool) -> None:
    assert (glob_regex(pattern).fullmatch(name) is not None) == matches
