"""The model command parsers, without a store: RedisAI's checks, in RedisAI's order, with its texts."""

from __future__ import annotations

import pytest

from backends.errors import AIError
from server.commands.model_args import (
    check_modelexecute_arity,
    input_keys_hint,
    parse_modelexecute,
    parse_modelget_flags,
    parse_modelrun,
    parse_modelset,
    parse_modelstore,
)


def _argv(text: str) -> list[bytes]:
    return [part.encode() for part in text.split()]


def test_modelstore_full_form() -> None:
    req = parse_modelstore(_argv("AI.MODELSTORE m TORCH cpu:1 TAG v1 BATCHSIZE 4 MINBATCHSIZE 2 MINBATCHTIMEOUT 10 "
                                 "BLOB ab cd"))
    assert (req.key, req.backend, req.device.text, req.device.queue_name, req.tag) == (
        b"m", "TORCH", "cpu:1", "CPU:1", b"v1")
    assert (req.batchsize, req.minbatchsize, req.minbatchtimeout, req.blob) == (4, 2, 10, b"abcd")


def test_modelstore_tf_inputs_outputs() -> None:
    req = parse_modelstore(_argv("AI.MODELSTORE m TF CPU INPUTS 2 a b OUTPUTS 1 mul BLOB x"))
    assert (req.inputs, req.outputs) == (("a", "b"), ("mul",))


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("AI.MODELSTORE m TORCH BLOB x", "ERR wrong number of arguments for 'AI.MODELSTORE' command"),
        ("ai.modelstore m TORCH BLOB x", "ERR wrong number of arguments for 'ai.modelstore' command"),
        ("AI.MODELSTORE m PYTORCH CPU BLOB x", "ERR unsupported backend"),
        ("AI.MODELSTORE m TORCH bad_device BLOB x", "ERR Invalid DEVICE"),
        ("AI.MODELSTORE m TORCH CPU:: BLOB x", "ERR Invalid DEVICE"),
        ("AI.MODELSTORE m TORCH CPU:1.8 BLOB x", "ERR Invalid DEVICE"),
        ("AI.MODELSTORE m TORCH CPU:123456 BLOB x", "ERR Invalid DEVICE"),
        ("AI.MODELSTORE m TORCH CPU BATCHSIZE -1 BLOB x", "ERR Invalid argument for BATCHSIZE"),
        ("AI.MODELSTORE m TORCH CPU BATCHSIZE 2 MINBATCHSIZE x BLOB x", "ERR Invalid argument for MINBATCHSIZE"),
        ("AI.MODELSTORE m TORCH CPU BATCHSIZE 0 MINBATCHSIZE 2 BLOB x", "ERR MINBATCHSIZE specified without BATCHSIZE"),
        ("AI.MODELSTORE m TORCH CPU MINBATCHSIZE 2 BLOB x", "ERR MINBATCHSIZE specified without BATCHSIZE"),
        ("AI.MODELSTORE m TORCH CPU BATCHSIZE 2 MINBATCHTIMEOUT 1000 BLOB x",
         "ERR MINBATCHTIMEOUT specified without MINBATCHSIZE"),
        ("AI.MODELSTORE m TORCH CPU TAG t BATCHSIZE 2", "ERR Insufficient arguments, missing model BLOB"),
        ("AI.MODELSTORE m TORCH CPU BATCHSIZE 2 NOT_BLOB", "ERR Invalid argument, expected BLOB"),
        ("AI.MODELSTORE m TORCH CPU INPUTS 1 a BLOB x", "ERR INPUTS argument should not be specified for this backend"),
        ("AI.MODELSTORE m TORCH CPU TAG t BLOB", "ERR Insufficient arguments, missing model BLOB"),
        ("AI.MODELSTORE m TF CPU BLOB x", "ERR INPUTS not specified for TF"),
        ("AI.MODELSTORE m TF CPU INPUTS 0 BLOB x", "ERR Invalid argument for input_count"),
        ("AI.MODELSTORE m TF CPU INPUTS 3 a b", "ERR number of model inputs does not match the number of given arguments"),
        ("AI.MODELSTORE m TF CPU INPUTS 1 a BLOB x", "ERR OUTPUTS not specified for TF"),
        ("AI.MODELSTORE m TF CPU INPUTS 1 a OUTPUTS x BLOB", "ERR Invalid argument for output_count"),
        ("AI.MODELSTORE m TF CPU INPUTS 1 a OUTPUTS 2 b", "ERR number of model outputs does not match the number of given arguments"),
        ("AI.MODELSTORE m TF CPU INPUTS 1 a OUTPUTS 1 b NOBLOB x", "ERR Invalid argument, expected BLOB"),
    ],
)
def test_modelstore_errors(command: str, error: str) -> None:
    with pytest.raises(AIError) as info:
        parse_modelstore(_argv(command))
    assert info.value.message == error


def test_modelstore_accepts_quirky_devices_and_integral_doubles() -> None:
    assert parse_modelstore(_argv("AI.MODELSTORE m TORCH CPU: BLOB x")).device.text == "CPU:"
    assert parse_modelstore(_argv("AI.MODELSTORE m TORCH GPU:12345 BLOB x")).device.index == 12345
    assert parse_modelstore(_argv("AI.MODELSTORE m TORCH CPU BATCHSIZE 2.0 BLOB x")).batchsize == 2
    assert parse_modelstore(_argv("AI.MODELSTORE m TORCH CPU BATCHSIZE 1e1 BLOB x")).batchsize == 10


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("AI.MODELSET m BLOB", "ERR wrong number of arguments for 'AI.MODELSET' command"),
        ("AI.MODELSET m TORCH BLOB x", "ERR Invalid DEVICE"),
        ("AI.MODELSET m TFLITE CPU BATCHSIZE 2 BLOB x", "ERR Auto-batching not supported by the TFLITE backend"),
        ("AI.MODELSET m TORCH CPU MINBATCHSIZE 2 BLOB x", "ERR MINBATCHSIZE specified without BATCHSIZE"),
        ("AI.MODELSET m TORCH CPU BATCHSIZE 2 MINBATCHSIZE x BLOB x", "ERR Invalid argument for MINBATCHSIZE"),
        ("AI.MODELSET m TORCH CPU BATCHSIZE 2 MINBATCHTIMEOUT 5 BLOB x",
         "ERR MINBATCHTIMEOUT specified without MINBATCHSIZE"),
        ("AI.MODELSET m TORCH CPU BATCHSIZE 2 NOT_BLOB", "ERR Insufficient arguments, missing model BLOB"),
        ("AI.MODELSET m TF CPU BLOB x", "ERR Insufficient arguments, INPUTS and OUTPUTS not specified"),
        ("AI.MODELSET m TF CPU INPUTS a b", "ERR OUTPUTS not specified"),
        ("AI.MODELSET m TF CPU INPUTS a b OUTPUTS mul", "ERR Insufficient arguments, missing model BLOB"),
    ],
)
def test_modelset_errors(command: str, error: str) -> None:
    with pytest.raises(AIError) as info:
        parse_modelset(_argv(command))
    assert info.value.message == error


def test_modelset_tf_names_and_ignored_options() -> None:
    req = parse_modelset(_argv("AI.MODELSET m TF CPU INPUTS a b OUTPUTS mul BLOB x y"))
    assert (req.inputs, req.outputs, req.blob) == (("a", "b"), ("mul",), b"xy")
    assert parse_modelset(_argv("AI.MODELSET m TORCH CPU junk tokens BLOB x")).blob == b"x"


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("AI.MODELEXECUTE m TIMEOUT 1000 INPUTS 2 a b OUTPUTS 1", "ERR INPUTS not specified"),
        ("AI.MODELEXECUTE m INPUTS x a b OUTPUTS 1 c", "ERR Invalid argument for input_count"),
        ("AI.MODELEXECUTE m INPUTS 0 a b OUTPUTS 1 c", "ERR Input count must be a positive integer"),
        ("AI.MODELEXECUTE m INPUTS 1 a b OUTPUTS 1 c", "Number of keys given as INPUTS here does not match model definition"),
        ("AI.MODELEXECUTE m INPUTS 2 a b NOTOUTPUTS 1 c", "ERR OUTPUTS not specified"),
        ("AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS -1 c", "ERR Output count must be a positive integer"),
        ("AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 2 c d", "Number of keys given as OUTPUTS here does not match model definition"),
        ("AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c EXTRA", "Invalid argument: EXTRA"),
        ("AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c TIMEOUT", "ERR No value provided for TIMEOUT"),
        ("AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c TIMEOUT 0", "ERR Invalid value for TIMEOUT"),
        ("AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c TIMEOUT 5 x", "Invalid argument: x"),
    ],
)
def test_modelexecute_errors(command: str, error: str) -> None:
    with pytest.raises(AIError) as info:
        parse_modelexecute(_argv(command), 2, 1)
    assert info.value.message == error


def test_modelexecute_forms() -> None:
    with pytest.raises(AIError, match=r"wrong number of arguments for 'AI.MODELEXECUTE'"):
        check_modelexecute_arity(_argv("ai.modelexecute m INPUTS 1 a OUTPUTS 1"))
    req = parse_modelexecute(_argv("AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c TIMEOUT 60000000"), 2, 1)
    assert (req.inputs, req.outputs, req.timeout_ms) == ((b"a", b"b"), (b"c",), 60000000)
    assert input_keys_hint(_argv("AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c")) == [b"a", b"b"]
    assert input_keys_hint(_argv("AI.MODELRUN m TIMEOUT 5 INPUTS a b OUTPUTS c")) == [b"a", b"b"]


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("AI.MODELRUN m NOT_INPUTS a b OUTPUTS c", "ERR INPUTS not specified"),
        ("AI.MODELRUN m INPUTS a OUTPUTS c", "Number of keys given as INPUTS here does not match model definition"),
        ("AI.MODELRUN m TIMEOUT -43 INPUTS a b OUTPUTS c", "ERR Invalid value for TIMEOUT"),
        ("AI.MODELRUN m TIMEOUT 1000 NOT_INPUTS a b OUTPUTS c", "ERR INPUTS not specified"),
        ("AI.MODELRUN m INPUTS a b OUTPUTS c d", "Number of keys given as OUTPUTS here does not match model definition"),
    ],
)
def test_modelrun_errors(command: str, error: str) -> None:
    with pytest.raises(AIError) as info:
        parse_modelrun(_argv(command), 2, 1)
    assert info.value.message == error


def test_modelget_flags() -> None:
    assert parse_modelget_flags(_argv("AI.MODELGET m")) == (True, True)
    assert parse_modelget_flags(_argv("AI.MODELGET m META")) == (True, False)
    assert parse_modelget_flags(_argv("AI.MODELGET m blob")) == (False, True)
    assert parse_modelget_flags(_argv("AI.MODELGET m META whatever")) == (True, False)
    with pytest.raises(AIError, match=r"wrong number of arguments"):
        parse_modelget_flags(_argv("AI.MODELGET m META BLOB extra"))


def test_which_pre_run_errors_are_checked_on_a_fresh_read() -> None:
    """A model stored again while loading: always; an error on (possibly cached) metadata or inputs: with the
    cache on; never the store being unavailable (a second timeout) nor the backend refusing the model."""
    from backends.errors import AIError
    from server.ai.stored import ChangedWhileLoading
    from server.commands.model import _worth_a_fresh_look

    changed = ChangedWhileLoading("ERR model key changed while the model was being loaded, try again")
    arity = AIError("ERR Number of keys given as INPUTS here does not match model definition")
    down = AIError("ERR backing store unavailable: redis://127.0.0.1:7000: no answer within 3000 ms")
    refused = AIError("ERR Could not load the model")
    assert _worth_a_fresh_look(changed, caching=False, loading=True)
    assert _worth_a_fresh_look(arity, caching=True, loading=False)
    assert not _worth_a_fresh_look(arity, caching=False, loading=False)
    assert not _worth_a_fresh_look(down, caching=True, loading=False)
    assert not _worth_a_fresh_look(AIError("LOADING Redis is loading the dataset in memory"), caching=True,
                                   loading=False)
    assert not _worth_a_fresh_look(refused, caching=True, loading=True)
