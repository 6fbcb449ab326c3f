"""The script command parsers, without a store: RedisAI 1.2.7's checks, in its order, with its texts."""

from __future__ import annotations

import pytest

from backends.errors import AIError
from server.commands.script_args import (
    ScriptExecuteRequest,
    check_scriptexecute_arity,
    check_scriptrun_arity,
    parse_script_device,
    parse_scriptexecute,
    parse_scriptget_flags,
    parse_scriptrun,
    parse_scriptset,
    parse_scriptstore,
)


def _argv(text: str) -> list[bytes]:
    return [part.encode() for part in text.split()]


def _error(parse: object, argv: list[bytes]) -> str:
    with pytest.raises(AIError) as info:
        parse(argv)  # type: ignore[operator]
    return info.value.message


def test_scriptstore_full_form() -> None:
    req = parse_scriptstore(_argv("AI.SCRIPTSTORE s gpu:1 TAG v1 ENTRY_POINTS 2 bar bar_variadic SOURCE src extra"))
    assert (req.key, req.device.text, req.device.kind, req.device.index, req.tag) == (b"s", "gpu:1", "GPU", 1, b"v1")
    assert (req.entry_points, req.source) == (("bar", "bar_variadic"), b"src")
    req = parse_scriptstore([*_argv("AI.SCRIPTSTORE s CPUxyz ENTRY_POINTS 2.0 f g SOURCE"), b"def f\0tail"])
    assert (req.device.kind, req.device.queue_name, req.tag, req.entry_points) == ("CPU", "CPUXYZ", b"", ("f", "g"))
    assert req.source == b"def f"  # a C string in RedisAI
    req = parse_scriptstore(_argv("AI.SCRIPTSTORE s CPU TAG t ENTRY_POINTS 0 SOURCE src"))
    assert req.entry_points == ()


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("AI.SCRIPTSTORE ket CPU SOURCE return_1", "ERR wrong number of arguments for 'AI.SCRIPTSTORE' command"),
        ("AI.SCRIPTSTORE nope", "ERR wrong number of arguments for 'AI.SCRIPTSTORE' command"),
        ("AI.SCRIPTSTORE nope SOURCE", "ERR wrong number of arguments for 'AI.SCRIPTSTORE' command"),
        ("ai.scriptstore more CPU", "ERR wrong number of arguments for 'ai.scriptstore' command"),
        ("AI.SCRIPTSTORE s CPU TAG t SOURCE a b c", "ERR Insufficient arguments, missing script entry points"),
        ("AI.SCRIPTSTORE s CPU ENTRY_POINTS x f SOURCE src", "ERR Non numeric entry points number provided to "
                                                              "AI.SCRIPTSTORE command"),
        ("AI.SCRIPTSTORE s CPU ENTRY_POINTS 5 bar bar_variadic SOURCE src",
         "ERR Insufficient arguments, missing script entry points"),
        ("AI.SCRIPTSTORE s CPU ENTRY_POINTS -1 bar SOURCE src", "ERR Insufficient arguments, missing script entry points"),
        ("AI.SCRIPTSTORE s CPU ENTRY_POINTS 1 bar NOT_SOURCE src", "ERR Insufficient arguments, missing script SOURCE"),
        ("AI.SCRIPTSTORE s CPU ENTRY_POINTS 2 bar baz SOURCE", "ERR Insufficient arguments, missing script SOURCE"),
        ("AI.SCRIPTSTORE s TPU ENTRY_POINTS 1 bar SOURCE src", "ERR unsupported device"),
        ("AI.SCRIPTSTORE s GPUX ENTRY_POINTS 1 bar SOURCE src", "ERR unsupported device"),
        ("AI.SCRIPTSTORE s TPU ENTRY_POINTS 1 bar NOT_SOURCE src", "ERR Insufficient arguments, missing script SOURCE"),
    ],
)
def test_scriptstore_errors(command: str, error: str) -> None:
    assert _error(parse_scriptstore, _argv(command)) == error


def test_scriptset() -> None:
    req = parse_scriptset(_argv("AI.SCRIPTSET ket CPU TAG asdf SOURCE src"))
    assert (req.device.text, req.tag, req.entry_points, req.source) == ("CPU", b"asdf", (), b"src")
    req = parse_scriptset(_argv("AI.SCRIPTSET ket CPU SOURCE src x y"))  # argc 7 without TAG: extras ignored
    assert (req.tag, req.source) == (b"", b"src")
    for command in ("AI.SCRIPTSET ket CPU SOURCE", "AI.SCRIPTSET ket CPU TAG t SOURCE src x"):
        assert _error(parse_scriptset, _argv(command)).startswith("ERR wrong number of arguments for 'AI.SCRIPTSET'")
    for command in ("AI.SCRIPTSET ket CPU TAG asdf", "AI.SCRIPTSET ket CPU NOT_SOURCE src x y"):
        assert _error(parse_scriptset, _argv(command)) == "ERR Insufficient arguments, missing script SOURCE"
    assert _error(parse_scriptset, _argv("AI.SCRIPTSET ket nodevice SOURCE src")) == "ERR unsupported device"


def test_script_device_rule() -> None:
    assert parse_script_device(b"GPU").index is None and parse_script_device(b"gpu:abc").kind == "GPU"
    assert parse_script_device(b"cpu:3").queue_name == "CPU:3"
    with pytest.raises(AIError, match=r"^ERR unsupported device$"):
        parse_script_device(b"")


def test_scriptget_flags() -> None:
    assert parse_scriptget_flags(_argv("AI.SCRIPTGET s")) == (True, True)
    assert parse_scriptget_flags(_argv("AI.SCRIPTGET s meta")) == (True, False)
    assert parse_scriptget_flags(_argv("AI.SCRIPTGET s SOURCE bogus")) == (False, True)
    assert parse_scriptget_flags(_argv("AI.SCRIPTGET s SOURCE META")) == (True, True)
    assert _error(parse_scriptget_flags, _argv("AI.SCRIPTGET s META SOURCE x")).startswith("ERR wrong number")


def test_scriptexecute_scopes_in_any_order() -> None:
    req = parse_scriptexecute(_argv("AI.SCRIPTEXECUTE s bar KEYS 1 {1} OUTPUTS 1 c ARGS 2 x y INPUTS 2 a b "
                                    "TIMEOUT 5"))
    assert req == ScriptExecuteRequest(b"s", "bar", (b"{1}",), (b"a", b"b"), (b"x", b"y"), (b"c",), 5)
    req = parse_scriptexecute(_argv("AI.SCRIPTEXECUTE my_script long_func KEYS 1 {$}"))
    assert (req.keys, req.inputs, req.args, req.outputs, req.timeout_ms) == ((b"{$}",), (), (), (), None)
    req = parse_scriptexecute(_argv("AI.SCRIPTEXECUTE s f INPUTS -1 OUTPUTS 0"))  # negative counts read as 0
    assert (req.inputs, req.outputs) == ((), ())


def test_scriptexecute_in_a_dag() -> None:
    req = parse_scriptexecute(_argv("AI.SCRIPTEXECUTE s f OUTPUTS 1 y INPUTS 1 x"), standalone=False)
    assert (req.inputs, req.outputs) == ((b"x",), (b"y",))
    assert parse_scriptexecute(_argv("AI.SCRIPTEXECUTE s f"), standalone=False).inputs == ()
    assert parse_scriptexecute(_argv("AI.SCRIPTEXECUTE s f INPUTS 1 x TIMEOUT 9"), standalone=False).timeout_ms == 9


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("AI.SCRIPTEXECUTE s", "ERR wrong number of arguments for 'AI.SCRIPTEXECUTE' command"),
        ("AI.SCRIPTEXECUTE s bar", "ERR KEYS or INPUTS scope must be provided first for AI.SCRIPTEXECUTE command"),
        ("AI.SCRIPTEXECUTE script bar OUTPUTS 2 a a",
         "ERR KEYS or INPUTS scope must be provided first for AI.SCRIPTEXECUTE command"),
        ("AI.SCRIPTEXECUTE script bar KEYS 1", "ERR Missing arguments after KEYS keyword"),
        ("AI.SCRIPTEXECUTE script bar KEYS not_number key", "ERR Invalid or negative value found in number of KEYS"),
        ("AI.SCRIPTEXECUTE script bar KEYS 0 key", "ERR Invalid or negative value found in number of KEYS"),
        ("AI.SCRIPTEXECUTE script bar KEYS 2 key", "ERR Number of pre declared KEYS to be used in the command does "
                                                    "not match the number of given arguments"),
        ("AI.SCRIPTEXECUTE ket bar KEYS 1 {1} ARGS", "ERR Invalid arguments provided to AI.SCRIPTEXECUTE"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS", "ERR Invalid arguments provided to AI.SCRIPTEXECUTE"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 1 a OUTPUTS", "ERR Invalid arguments provided to AI.SCRIPTEXECUTE"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS OUTPUTS", "ERR Invalid argument for inputs count in AI.SCRIPTEXECUTE"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 01 a", "ERR Invalid argument for inputs count in AI.SCRIPTEXECUTE"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 3 a b", "ERR number of inputs to AI.SCRIPTEXECUTE command does not match "
                                                  "the number of given arguments"),
        ("AI.SCRIPTEXECUTE ket bar KEYS 1 k ARGS x", "ERR Invalid argument for keys count in AI.SCRIPTEXECUTE"),
        ("AI.SCRIPTEXECUTE ket bar KEYS 1 k ARGS 2 x", "ERR number of args to AI.SCRIPTEXECUTE command does not "
                                                       "match the number of given arguments"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 1 a OUTPUTS 1.0 c",
         "ERR Invalid argument for outputs count in AI.SCRIPTEXECUTE"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 1 a OUTPUTS 2 c", "ERR number of outputs to AI.SCRIPTEXECUTE command does "
                                                           "not match the number of given arguments"),
        ("AI.SCRIPTEXECUTE ket bar KEYS 1 a KEYS 1 b", "ERR Already Encountered KEYS scope in AI.SCRIPTEXECUTE command"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 0 ARGS 0 ARGS 0",
         "ERR Already Encountered ARGS scope in AI.SCRIPTEXECUTE command"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 0 INPUTS 0",
         "ERR Already Encountered INPUTS scope in AI.SCRIPTEXECUTE command"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 0 OUTPUTS 0 outputs 0",
         "ERR Already Encountered OUTPUTS scope in AI.SCRIPTEXECUTE command"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 2 a b OUTPUTS 1 c TIMEOUT TIMEOUT", "ERR Invalid value for TIMEOUT"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 2 a b OUTPUTS 1 c TIMEOUT 0", "ERR Invalid value for TIMEOUT"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 2 a b OUTPUTS 1 c TIMEOUT",
         "ERR No value provided for TIMEOUT in AI.SCRIPTEXECUTE"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 1 a TIMEOUT 5 OUTPUTS 1 c",
         "ERR Encountered problem parsing AI.SCRIPTEXECUTE"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 1 a Bogus 1 c",
         "ERR Invalid AI.SCRIPTEXECUTE command. Unexpected argument: Bogus"),
        ("AI.SCRIPTEXECUTE ket bar INPUTS 1 a LIST_INPUTS 1 c",
         "ERR Invalid AI.SCRIPTEXECUTE command. Unexpected argument: LIST_INPUTS"),
    ],
)
def test_scriptexecute_errors(command: str, error: str) -> None:
    assert _error(parse_scriptexecute, _argv(command)) == error


def test_arity_checks() -> None:
    with pytest.raises(AIError, match=r"^ERR wrong number of arguments for 'AI.SCRIPTEXECUTE' command$"):
        check_scriptexecute_arity(_argv("ai.scriptexecute s"))
    with pytest.raises(AIError, match=r"^ERR wrong number of arguments for 'AI.SCRIPTRUN' command$"):
        check_scriptrun_arity(_argv("ai.scriptrun s"))
    check_scriptexecute_arity(_argv("AI.SCRIPTEXECUTE s f"))
    check_scriptrun_arity(_argv("AI.SCRIPTRUN s f"))


def test_scriptrun() -> None:
    req = parse_scriptrun(_argv("AI.SCRIPTRUN myscript bar_variadic INPUTS a $ b1 b2 OUTPUTS c"))
    assert req == ScriptExecuteRequest(b"myscript", "bar_variadic", (), (b"a", b"b1", b"b2"), (), (b"c",), None)
    assert parse_scriptrun(_argv("AI.SCRIPTRUN s f")).inputs == ()
    req = parse_scriptrun(_argv("AI.SCRIPTRUN s f INPUTS a OUTPUTS b TIMEOUT 3"))  # TIMEOUT anywhere
    assert (req.inputs, req.outputs, req.timeout_ms) == ((b"a",), (b"b",), 3)
    req = parse_scriptrun(_argv("AI.SCRIPTRUN s f timeout 4 OUTPUTS b"))  # INPUTS is optional
    assert (req.inputs, req.outputs, req.timeout_ms) == ((), (b"b",), 4)


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("AI.SCRIPTRUN s", "ERR wrong number of arguments for 'AI.SCRIPTRUN' command"),
        ("AI.SCRIPTRUN s f TIMEOUT 1 INPUTS a TIMEOUT 2", "ERR Already encountered an TIMEOUT section in SCRIPTRUN"),
        ("AI.SCRIPTRUN s f TIMEOUT -43 INPUTS a", "ERR Invalid value for TIMEOUT"),
        ("AI.SCRIPTRUN s f INPUTS a TIMEOUT", "ERR Invalid value for TIMEOUT"),
        ("AI.SCRIPTRUN s f INPUTS a OUTPUTS b INPUTS c", "ERR Already encountered an INPUTS section in SCRIPTRUN"),
        ("AI.SCRIPTRUN s f OUTPUTS b INPUTS c", "ERR Already encountered an INPUTS section in SCRIPTRUN"),
        ("AI.SCRIPTRUN s f INPUTS a INPUTS c", "ERR Already encountered an INPUTS keyword in SCRIPTRUN"),
        ("AI.SCRIPTRUN s f INPUTS a OUTPUTS b OUTPUTS c", "ERR Already encountered an OUTPUTS keyword in SCRIPTRUN"),
        ("AI.SCRIPTRUN s f $ a", "ERR Encountered a variable size list of tensors outside of input section"),
        ("AI.SCRIPTRUN s f INPUTS a OUTPUTS $", "ERR Encountered a variable size list of tensors outside of input "
                                                "section"),
        ("AI.SCRIPTRUN s f INPUTS $ a $ b", "ERR Already encountered a variable size list of tensors"),
        ("AI.SCRIPTRUN s f a INPUTS b", "ERR Unrecongnized parameter to SCRIPTRUN"),
    ],
)
def test_scriptrun_errors(command: str, error: str) -> None:
    assert _error(parse_scriptrun, _argv(command)) == error
