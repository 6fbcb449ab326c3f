"""SmartSim's ``smartredis`` client (0.6.1, the Python API over its C++ client) against our server, unchanged: it
runs from its own virtualenv (.clients/smartredis-venv: the ``smartredis_python`` fixture in conftest.py) and
finds us through SSDB. Every call's result is compared with what numpy (in the client script) or torch and
onnxruntime (in this process, passed in as .npy files) compute for the same data.

Not covered: ``unpack_tensor`` (C++/C/Fortran only, not in the Python client), the ``*_multigpu`` calls (they
need GPUs), DatasetConverter (needs xarray)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from tests import models
from tests.support import RunningServer, run_client_script

# Shared by every client script: argv[1] is our port. SmartRedis reads SSDB (and the other SR_* / SSKEY* settings)
# when a Client is made; SR_DB_TYPE=Standalone is what SmartSim sets for a non-cluster database (the default,
# "Clustered", sends CLUSTER commands, which a non-cluster Redis refuses as well).
PRELUDE = r'''
import os
import sys
import numpy as np

os.environ["SSDB"] = f"127.0.0.1:{sys.argv[1]}"
os.environ["SR_DB_TYPE"] = "Standalone"
os.environ["SR_LOG_LEVEL"] = "QUIET"
from smartredis import Client, ConfigOptions, Dataset
from smartredis.error import RedisKeyError, RedisReplyError

ADDRESS = os.environ["SSDB"]
ARGS = sys.argv[2:]


def raises(call, *needles, kind=RedisReplyError):
    """``call()`` must raise ``kind`` whose text holds every needle; returns that text."""
    try:
        call()
    except kind as exc:
        text = str(exc)
        for needle in needles:
            assert needle in text, (needle, text)
        return text
    raise AssertionError(f"no {kind.__name__} raised")
'''

TENSORS_SCRIPT = PRELUDE + r'''
client = Client(cluster=False)  # the address comes from SSDB
assert ADDRESS in str(client), str(client)
rng = np.random.default_rng(7)
dtypes = [np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16]
shapes = [(1,), (7,), (2, 3), (2, 3, 4), (1, 1, 1, 5), (3, 1, 2, 1, 2)]
for dtype in dtypes:
    floating = np.issubdtype(dtype, np.floating)
    for shape in shapes:
        if floating:
            data = rng.standard_normal(shape).astype(dtype)
        else:
            info = np.iinfo(dtype)
            data = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
        name = f"t_{np.dtype(dtype).name}_{'x'.join(map(str, shape))}"
        client.put_tensor(name, data)
        got = client.get_tensor(name)
        assert got.dtype == data.dtype and got.shape == data.shape, (name, got.dtype, got.shape)
        assert np.array_equal(got, data), name
    if floating:
        fi = np.finfo(dtype)
        edge = np.array([[np.nan, np.inf, -np.inf], [0.0, -0.0, fi.max], [fi.min, fi.tiny, fi.eps]], dtype=dtype)
    else:
        ii = np.iinfo(dtype)
        edge = np.array([[ii.min, ii.max], [0, 1]], dtype=dtype)
    client.put_tensor("edge", edge)
    got = client.get_tensor("edge")
    assert got.dtype == edge.dtype and got.shape == edge.shape, (dtype, got.dtype, got.shape)
    assert np.array_equal(got, edge, equal_nan=floating), (dtype, got)
    if floating:
        assert np.array_equal(np.signbit(got), np.signbit(edge)), got  # -0.0 stays -0.0

big = rng.standard_normal((512, 1024))  # 4 MiB of float64
client.put_tensor("big", big)
assert np.array_equal(client.get_tensor("big"), big)
wide = rng.integers(0, 255, size=(1, 1_000_000), dtype=np.uint8)
client.put_tensor("wide", wide)
assert np.array_equal(client.get_tensor("wide"), wide)

# overwriting a key with another dtype and shape
client.put_tensor("big", np.arange(6, dtype=np.int16).reshape(3, 2))
got = client.get_tensor("big")
assert got.dtype == np.int16 and np.array_equal(got, np.arange(6, dtype=np.int16).reshape(3, 2)), got

# existence, polling, copy, rename, delete
x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
client.put_tensor("x", x)
assert client.tensor_exists("x") and client.key_exists("x")
assert not client.tensor_exists("nope") and not client.key_exists("nope")
assert client.poll_tensor("x", 10, 3) and client.poll_key("x", 10, 3)
assert not client.poll_tensor("nope", 10, 3) and not client.poll_key("nope", 10, 3)
client.copy_tensor("x", "x_copy")
assert np.array_equal(client.get_tensor("x_copy"), x) and np.array_equal(client.get_tensor("x"), x)
client.rename_tensor("x_copy", "x_renamed")
assert not client.tensor_exists("x_copy") and np.array_equal(client.get_tensor("x_renamed"), x)
client.delete_tensor("x_renamed")
assert not client.tensor_exists("x_renamed")
client.delete_tensor("x_renamed")  # deleting what is gone is no error (DEL answers 0)

raises(lambda: client.get_tensor("nope"), "command: ERR tensor key is empty or in a different shard")
raises(lambda: client.copy_tensor("nope", "y"), "command: ERR tensor key is empty or in a different shard")
raises(lambda: client.rename_tensor("nope", "y"), "command: ERR no such key")
print("smartredis client: tensors ok")
'''

MODELS_SCRIPT = PRELUDE + r'''
folder = ARGS[0]


def path(name):
    return os.path.join(folder, name)


def blob(name):
    with open(path(name), "rb") as handle:
        return handle.read()


client = Client(None)  # the standard construction: SSDB and SR_DB_TYPE from the environment
add_blob, mlp_blob, onnx_mlp_blob, onnx_add_blob = blob("add.pt"), blob("mlp.pt"), blob("mlp.onnx"), blob("add.onnx")
x = np.load(path("x.npy"))
a = np.array([[1.5, -2.0], [3.25, 4.0]], dtype=np.float32)
b = np.array([[0.5, 2.0], [-1.25, 8.0]], dtype=np.float32)
client.put_tensor("a", a)
client.put_tensor("b", b)
client.put_tensor("x", x)

# TORCH from bytes, with a tag
client.set_model("add", add_blob, "TORCH", "CPU", tag="v1")
assert client.model_exists("add") and client.poll_model("add", 10, 3)
assert not client.model_exists("nope") and not client.poll_model("nope", 10, 3)
assert client.get_model("add") == add_blob
client.run_model("add", ["a", "b"], ["c"])
c = client.get_tensor("c")
assert c.dtype == np.float32 and np.array_equal(c, a + b), c
info = client.get_ai_info([ADDRESS], "add")
assert len(info) == 1 and int(info[0].pop("duration")) > 0, info
assert info == [{"key": "add", "type": "MODEL", "backend": "TORCH", "device": "CPU", "tag": "v1", "samples": "2",
                 "calls": "1", "errors": "0"}], info
# RedisAI answers AI.INFO key RESETSTAT with +OK, which SmartRedis 0.6.1 cannot read as the map it expects (it
# raises); the statistics are reset all the same.
raises(lambda: client.get_ai_info([ADDRESS], "add", True), "reply type is REDIS_REPLY_STATUS")
info = client.get_ai_info([ADDRESS], "add")[0]
assert (info["calls"], info["samples"], info["duration"], info["errors"]) == ("0", "0", "0", "0"), info
raises(lambda: client.get_ai_info([ADDRESS], "nope"), "command: ERR cannot find run info for key")

# TORCH from a file, with a batch size; ONNX from bytes and from a file
client.set_model_from_file("mlp", path("mlp.pt"), "TORCH", "CPU", batch_size=8)
assert client.get_model("mlp") == mlp_blob
client.run_model("mlp", "x", "y_torch")
assert np.allclose(client.get_tensor("y_torch"), np.load(path("torch_y.npy")), rtol=1e-5, atol=1e-6)
client.set_model("onnx_mlp", onnx_mlp_blob, "ONNX", "CPU", tag="onnx")
assert client.get_model("onnx_mlp") == onnx_mlp_blob
client.run_model("onnx_mlp", ["x"], ["y_onnx"])
assert np.allclose(client.get_tensor("y_onnx"), np.load(path("onnx_y.npy")), rtol=1e-5, atol=1e-6)
client.set_model_from_file("onnx_add", path("add.onnx"), "ONNX", "CPU")
assert client.get_model("onnx_add") == onnx_add_blob
client.run_model("onnx_add", ["a", "b"], ["c_onnx"])
assert np.array_equal(client.get_tensor("c_onnx"), a + b)

# AI.CONFIG MODEL_CHUNK_SIZE: SmartRedis then sends a bigger model as many BLOB arguments
chunk = 4096
assert len(mlp_blob) > 4 * chunk
client.set_model_chunk_size(chunk)
client.set_model("mlp_chunked", mlp_blob, "TORCH", "CPU")
client.run_model("mlp_chunked", ["x"], ["y_chunked"])
assert np.allclose(client.get_tensor("y_chunked"), np.load(path("torch_y.npy")), rtol=1e-5, atol=1e-6)
# AI.MODELGET BLOB now answers an array of chunks (as RedisAI does; the test checks it with redis-py). SmartRedis
# 0.6.1's Client::get_model joins them without advancing its copy offset (client.cpp: memcpy(model + offset, ...)
# with offset never incremented), so every chunk lands at offset 0: the model's length, starting with the last chunk.
got = client.get_model("mlp_chunked")
last = mlp_blob[(len(mlp_blob) - 1) // chunk * chunk:]
assert len(got) == len(mlp_blob) and got[:len(last)] == last, (len(got), len(mlp_blob))
client.set_model_chunk_size(len(mlp_blob) + 1)  # one bulk string again: the stored chunks join into the model
assert client.get_model("mlp_chunked") == mlp_blob
client.set_model_chunk_size(chunk)  # left so for the test's own AI.MODELGET

# deletion
client.delete_model("add")
assert not client.model_exists("add")
raises(lambda: client.get_model("add"), "command: ERR model key is empty")
raises(lambda: client.run_model("add", ["a", "b"], ["c"]), "command: ERR model key is empty")
raises(lambda: client.delete_model("add"), "command: ERR model key is empty")

# batching: the client refuses min_batch_* without batch_size itself; a batched model waits, then runs
raises(lambda: client.set_model("bad", add_blob, "TORCH", "CPU", min_batch_timeout=1),
       "batch_size must be non-zero if min_batch_size or min_batch_timeout is used")
client.set_model("batched", add_blob, "TORCH", "CPU", batch_size=4, min_batch_size=2, min_batch_timeout=50)
client.run_model("batched", ["a", "b"], ["c_batched"])
assert np.array_equal(client.get_tensor("c_batched"), a + b)

# RedisAI's backend errors, as it words them
raises(lambda: client.run_model("onnx_mlp", ["x", "x"], ["y"]),
       "command: Number of keys given as INPUTS here does not match model definition")
client.put_tensor("a3", np.ones((3, 2), dtype=np.float32))
raises(lambda: client.run_model("onnx_add", ["a3", "a3"], ["c3"]), "command: Got invalid dimensions for input: ")
raises(lambda: client.set_model("bad", blob("nograph.onnx"), "ONNX", "CPU"),
       "command: No graph was found in the protobuf.")
assert not client.model_exists("bad")
print("smartredis client: models ok")
'''

SCRIPTS_SCRIPT = PRELUDE + r'''
import importlib
import inspect

folder = ARGS[0]
sys.path.insert(0, folder)
functions = importlib.import_module("sr_functions")  # set_function sends inspect.getsource(), so a real file
with open(os.path.join(folder, "script.txt")) as handle:
    file_source = handle.read()

client = Client(cluster=False)
data = np.array([[1, 2, 3, 4, 5], [9, -1, 0, 7, 2]], dtype=np.int64)
data_2 = np.array([[5, 6, 7, 8, 0], [3, 3, 3, 3, 3]], dtype=np.int64)
f = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
client.put_tensor("data", data)
client.put_tensor("data_2", data_2)
client.put_tensor("f", f)

source = "def add(a, b):\n    return a + b\n\ndef scale(a):\n    return a * 3, a - a\n"
client.set_script("s", source)
assert client.model_exists("s") and client.poll_model("s", 10, 3)
assert client.get_script("s") == source
client.run_script("s", "add", ["data", "data_2"], ["sum"])
assert np.array_equal(client.get_tensor("sum"), data + data_2)
client.run_script("s", "scale", "f", ["tripled", "zeros"])
assert np.allclose(client.get_tensor("tripled"), f * 3) and np.array_equal(client.get_tensor("zeros"), f * 0)
info = client.get_ai_info([ADDRESS], "s")[0]
assert int(info.pop("duration")) > 0, info
assert info == {"key": "s", "type": "SCRIPT", "backend": "TORCH", "device": "CPU", "tag": "", "samples": "-1",
                "calls": "2", "errors": "0"}, info

client.set_script_from_file("from_file", os.path.join(folder, "script.txt"), "CPU")
assert client.get_script("from_file") == file_source
client.run_script("from_file", "normalize", "f", "normalized")
assert np.allclose(client.get_tensor("normalized"), (f - f.mean()) / f.std(ddof=1), atol=1e-6)  # torch: unbiased

client.set_function("one", functions.one_to_one)
assert client.get_script("one") == inspect.getsource(functions.one_to_one)
client.run_script("one", "one_to_one", "data", "max_one")
assert np.array_equal(client.get_tensor("max_one"), data.max(1))
client.set_function("two", functions.two_to_one, "CPU")
client.run_script("two", "two_to_one", ["data", "data_2"], ["max_two"])
assert np.array_equal(client.get_tensor("max_two"), np.concatenate((data, data_2)).max(1))

client.delete_script("from_file")
assert not client.model_exists("from_file")
raises(lambda: client.get_script("from_file"), "command: ERR script key is empty")
raises(lambda: client.run_script("from_file", "normalize", "f", "n"), "command: ERR script key is empty")
raises(lambda: client.delete_script("from_file"), "command: ERR script key is empty")
raises(lambda: client.run_script("s", "nope", "f", "n"), "command: Function does not exist: nope")
raises(lambda: client.run_script("s", "add", ["f", "data"], ["n"]),
       "command: The following operation failed in the TorchScript interpreter.")
raises(lambda: client.set_script("broken", "def f(a) return a\n"), "command: expected : but found 'return' here")
assert not client.model_exists("broken")
print("smartredis client: scripts ok")
'''

DATASETS_SCRIPT = PRELUDE + r'''
client = Client(cluster=False)
rng = np.random.default_rng(3)
arrays = {"f32": rng.standard_normal((2, 3)).astype(np.float32), "f64": np.array([np.nan, np.inf, -1.5]),
          "i8": np.array([-128, 0, 127], dtype=np.int8), "i16": np.arange(-4, 4, dtype=np.int16).reshape(2, 2, 2),
          "i32": np.array([[2**31 - 1, -2**31]], dtype=np.int32), "i64": np.array([2**63 - 1, -2**63], dtype=np.int64),
          "u8": np.array([0, 255], dtype=np.uint8), "u16": np.array([[0], [65535]], dtype=np.uint16)}
scalars = {"count": [3, 4], "ratio": [4.5, -0.25], "i32": [np.int32(-7)], "u64": [np.uint64(2**64 - 1)],
           "f32": [np.float32(0.5)]}
strings = {"tag": ["hello", "wörld"], "empty": [""]}


def build(name):
    dataset = Dataset(name)
    for key, value in arrays.items():
        dataset.add_tensor(key, value)
    for key, values in scalars.items():
        for value in values:
            dataset.add_meta_scalar(key, value)
    for key, values in strings.items():
        for value in values:
            dataset.add_meta_string(key, value)
    return dataset


def check(dataset, name):
    assert dataset.get_name() == name, dataset.get_name()
    assert sorted(dataset.get_tensor_names()) == sorted(arrays), dataset.get_tensor_names()
    for key, value in arrays.items():
        got = dataset.get_tensor(key)
        assert got.dtype == value.dtype and np.array_equal(got, value, equal_nan=value.dtype.kind == "f"), (key, got)
        # (not get_tensor_type: SmartRedis 0.6.1's own name table maps FLOAT to float64 and misspells UINT16)
        assert dataset.get_tensor_dims(key) == list(value.shape), (key, dataset.get_tensor_dims(key))
    assert sorted(dataset.get_metadata_field_names()) == sorted([*scalars, *strings])
    for key, values in scalars.items():
        got = dataset.get_meta_scalars(key)
        assert list(got) == [v for v in values], (key, got)
        assert np.asarray(got).dtype == np.asarray(values).dtype, (key, np.asarray(got).dtype)
    for key, values in strings.items():
        assert dataset.get_meta_strings(key) == values, (key, dataset.get_meta_strings(key))


original = build("ds")
client.put_dataset(original)
assert client.dataset_exists("ds") and client.poll_dataset("ds", 10, 3)
assert not client.dataset_exists("nope") and not client.poll_dataset("nope", 10, 3)
got = client.get_dataset("ds")
check(got, "ds")
client.copy_dataset("ds", "ds_copy")
copy = client.get_dataset("ds_copy")
check(copy, "ds_copy")
check(client.get_dataset("ds"), "ds")
client.rename_dataset("ds_copy", "ds_renamed")
assert not client.dataset_exists("ds_copy")
renamed = client.get_dataset("ds_renamed")
check(renamed, "ds_renamed")
client.delete_dataset("ds_renamed")
assert not client.dataset_exists("ds_renamed")
raises(lambda: client.get_dataset("ds_renamed"), 'The requested DataSet, "ds_renamed", does not exist.', kind=RedisKeyError)

# aggregation lists: references to datasets already put
names = [f"member_{i}" for i in range(5)]
members = [build(name) for name in names]
client.delete_list("agg")
for member in members:
    client.put_dataset(member)
    client.append_to_list("agg", member)
assert client.get_list_length("agg") == 5
assert client.poll_list_length("agg", 5, 10, 3) and not client.poll_list_length("agg", 6, 10, 3)
assert client.poll_list_length_gte("agg", 4, 10, 3) and not client.poll_list_length_gte("agg", 6, 10, 3)
assert client.poll_list_length_lte("agg", 5, 10, 3) and not client.poll_list_length_lte("agg", 4, 10, 3)
listed = [Dataset.from_pybind(d) for d in client.get_datasets_from_list("agg")]
assert [d.get_name() for d in listed] == names
for dataset, name in zip(listed, names):
    check(dataset, name)
ranged = [Dataset.from_pybind(d) for d in client.get_dataset_list_range("agg", 1, 3)]
assert [d.get_name() for d in ranged] == names[1:4]
assert [Dataset.from_pybind(d).get_name() for d in client.get_dataset_list_range("agg", -2, -1)] == names[-2:]
client.copy_list("agg", "agg_copy")
assert client.get_list_length("agg_copy") == 5 and client.get_list_length("agg") == 5
client.rename_list("agg_copy", "agg_renamed")
assert client.get_list_length("agg_copy") == 0 and client.get_list_length("agg_renamed") == 5
assert [Dataset.from_pybind(d).get_name() for d in client.get_datasets_from_list("agg_renamed")] == names
client.delete_list("agg_renamed")
assert client.get_list_length("agg_renamed") == 0
assert client.dataset_exists("member_0")  # deleting a list leaves its datasets
print("smartredis client: datasets and lists ok")
'''

PREFIX_SCRIPT = PRELUDE + r'''
a = np.arange(4, dtype=np.float32).reshape(2, 2)
b = np.full((2, 2), 10, dtype=np.float32)
with open(ARGS[0], "rb") as handle:
    add_blob = handle.read()

plain = Client(cluster=False)  # no SSKEYIN / SSKEYOUT: no prefixes at all

# another ensemble member writes under its own prefix
os.environ["SSKEYOUT"] = "producer"
os.environ["SSKEYIN"] = "producer"
producer = Client(cluster=False)
producer.put_tensor("a", a)
producer.put_tensor("b", b)
produced = Dataset("ds")
produced.add_tensor("t", a)
produced.add_meta_string("who", "producer")
producer.put_dataset(produced)
producer.append_to_list("runs", produced)

os.environ["SSKEYOUT"] = "consumer"
os.environ["SSKEYIN"] = "consumer,producer"
for key in ("producer.a", "producer.b", "producer.{ds}.meta", "producer.{ds}.t", "producer.runs"):
    assert plain.key_exists(key), key
assert not plain.key_exists("a") and not plain.key_exists("{ds}.meta")

consumer = Client(cluster=False)
consumer.use_tensor_ensemble_prefix(True)
consumer.use_dataset_ensemble_prefix(True)
consumer.use_list_ensemble_prefix(True)
consumer.use_model_ensemble_prefix(True)
assert not consumer.tensor_exists("a")  # reads come from SSKEYIN's first prefix, consumer
raises(lambda: consumer.set_data_source("nobody"), "data source nobody could not be found")
consumer.set_data_source("producer")
assert consumer.tensor_exists("a") and np.array_equal(consumer.get_tensor("a"), a)
got = consumer.get_dataset("ds")
assert np.array_equal(got.get_tensor("t"), a) and got.get_meta_strings("who") == ["producer"]
assert consumer.get_list_length("runs") == 1
consumer.set_model("add", add_blob, "TORCH", "CPU")  # stored as consumer.add, looked up as producer.add
assert plain.key_exists("consumer.add") and not plain.key_exists("add")
assert not consumer.model_exists("add")
consumer.use_model_ensemble_prefix(False)
producer.set_model("add", add_blob, "TORCH", "CPU")  # the producer's model prefix is off: plain "add"
assert consumer.model_exists("add")
consumer.run_model("add", ["a", "b"], ["c"])  # inputs producer.a/b, output consumer.c
assert plain.key_exists("consumer.c") and not plain.key_exists("producer.c")
assert np.array_equal(plain.get_tensor("consumer.c"), a + b)
consumer.put_tensor("mine", b)
assert plain.key_exists("consumer.mine")
consumer.use_tensor_ensemble_prefix(False)
consumer.put_tensor("mine", a)
assert np.array_equal(plain.get_tensor("mine"), a) and np.array_equal(plain.get_tensor("consumer.mine"), b)
print("smartredis client: ensemble prefixes ok")
'''

INFO_SCRIPT = PRELUDE + r'''
with open(ARGS[0], "rb") as handle:
    add_blob = handle.read()
client = Client(ConfigOptions.create_from_environment(""), logger_name="info")
client.set_model("m", add_blob, "TORCH", "CPU")
client.set_script("s", "def f(a):\n    return a\n")
client.put_tensor("a", np.ones((2, 2), dtype=np.float32))
client.run_model("m", ["a", "a"], ["c"])

nodes = client.get_db_node_info([ADDRESS])
assert len(nodes) == 1
info = nodes[0]
for section in ("Server", "Clients", "Memory", "Persistence", "Stats", "Replication", "CPU", "Modules",
                "Commandstats", "Keyspace"):
    assert section in info, (section, sorted(info))
assert int(info["Memory"]["used_memory"]) > 0, info["Memory"]
assert "rdb_last_save_time" in info["Persistence"], info["Persistence"]
assert info["Modules"]["module"].startswith("name=ai,ver=10207,"), info["Modules"]
assert info["ai_versions"]["ai_RedisAI_version"] == "1.2.7", info["ai_versions"]
assert info["ai_versions"]["ai_low_level_API_version"] == "1", info["ai_versions"]
assert info["ai_versions"]["ai_rdb_version"].isdigit(), info["ai_versions"]
assert "ai_git_sha" in info["ai_git"], info.get("ai_git")
for field in ("ai_threads_per_queue", "ai_inter_op_parallelism", "ai_intra_op_parallelism",
              "ai_model_execution_timeout", "ai_backend_memory_limit"):
    assert info["ai_load_time_configs"][field].isdigit(), (field, info["ai_load_time_configs"])
assert "ai_backends_info" in info
for field in ("ai_self_used_cpu_sys", "ai_self_used_cpu_user", "ai_children_used_cpu_sys",
              "ai_children_used_cpu_user", "ai_main_thread_used_cpu_sys", "ai_main_thread_used_cpu_user"):
    assert field in info["ai_cpu"], (field, info["ai_cpu"])
assert int(info["ai_runs"]["ai_models"]) == 1 and int(info["ai_runs"]["ai_scripts"]) == 1, info["ai_runs"]
assert int(info["ai_runs"]["ai_runs"]) >= 1, info["ai_runs"]
assert "ai_devices" in info["ai_queues"] and "ai_cache_hits" in info["ai_cache"], (info["ai_queues"], info["ai_cache"])
assert info["Keyspace"]["db0"].startswith("keys="), info["Keyspace"]

# SAVE: rdb_last_save_time does not go back (SmartRedis's own test_save_command)
before = int(info["Persistence"]["rdb_last_save_time"])
client.save([ADDRESS])
persistence = client.get_db_node_info([ADDRESS])[0]["Persistence"]
after = int(persistence["rdb_last_save_time"])
assert before <= after and persistence["rdb_changes_since_last_save"] == "0", persistence  # saved just now

# CONFIG GET / SET
assert client.config_get("dbfilename", ADDRESS) == {"dbfilename": "dump.rdb"}
assert client.config_get("config_param_DNE", ADDRESS) == {}
client.config_set("maxmemory", "1gb", ADDRESS)
assert client.config_get("maxmemory", ADDRESS) == {"maxmemory": str(1 << 30)}
client.config_set("maxmemory-policy", "allkeys-lru", ADDRESS)
assert client.config_get("maxmemory-policy", ADDRESS) == {"maxmemory-policy": "allkeys-lru"}
client.config_set("lua-time-limit", "6000", ADDRESS)
assert client.config_get("lua-time-limit", ADDRESS) == {"lua-time-limit": "6000"}
got = client.config_get("maxmemory*", ADDRESS)
assert got["maxmemory"] == str(1 << 30) and got["maxmemory-policy"] == "allkeys-lru", got
raises(lambda: client.config_set("config_param_DNE", "10", ADDRESS),
       "command: ERR Unknown option or number of arguments for CONFIG SET - 'config_param_DNE'")
client.config_set("maxmemory", "0", ADDRESS)
client.config_set("maxmemory-policy", "noeviction", ADDRESS)

# CLUSTER INFO is refused by the client itself on a non-cluster connection (SmartRedis's own test expects that)
raises(lambda: client.get_db_cluster_info([ADDRESS]), "Cannot run on non-cluster environment")

# FLUSHDB takes models, scripts and tensors with it
client.flush_db([ADDRESS])
assert not client.tensor_exists("a") and not client.model_exists("m") and not client.model_exists("s")
raises(lambda: client.run_model("m", ["a", "a"], ["c"]), "command: ERR model key is empty")
info = client.get_db_node_info([ADDRESS])[0]
assert int(info["ai_runs"]["ai_models"]) == 0 and int(info["ai_runs"]["ai_scripts"]) == 0, info["ai_runs"]
assert "db0" not in info["Keyspace"], info["Keyspace"]
print("smartredis client: info and config ok")
'''

SCRIPT_FILE = '''def normalize(x):
    return (x - x.mean()) / x.std()
'''

FUNCTIONS_FILE = '''"""TorchScript functions for set_function: only their source travels, so no torch is needed here."""


def one_to_one(data):
    """The highest element of each row."""
    return data.max(1)[0]


def two_to_one(data, data_2):
    """The highest element of each row of both, stacked."""
    merged = torch.cat((data, data_2))
    return merged.max(1)[0]
'''


@pytest.mark.timeout(1200)
def test_smartredis_tensors(smartredis_python: Path, server: RunningServer) -> None:
    run_client_script(smartredis_python, TENSORS_SCRIPT, server.port, expect="tensors ok")


@pytest.mark.timeout(1200)
def test_smartredis_models(smartredis_python: Path, server: RunningServer, tmp_path: Path) -> None:
    torch_mlp, onnx_mlp = models.torch_mlp(), models.onnx_mlp()
    (tmp_path / "add.pt").write_bytes(models.torch_add())
    (tmp_path / "mlp.pt").write_bytes(torch_mlp)
    (tmp_path / "mlp.onnx").write_bytes(onnx_mlp)
    (tmp_path / "add.onnx").write_bytes(models.onnx_add())
    (tmp_path / "nograph.onnx").write_bytes(onnx.ModelProto(ir_version=8).SerializeToString())
    x = np.random.default_rng(11).standard_normal((5, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    with torch.no_grad():
        torch_y = torch.jit.load(io.BytesIO(torch_mlp))(torch.from_numpy(x)).numpy()
    np.save(tmp_path / "torch_y.npy", torch_y)
    session = onnxruntime.InferenceSession(onnx_mlp, providers=["CPUExecutionProvider"])
    np.save(tmp_path / "onnx_y.npy", session.run(None, {"x": x})[0])
    run_client_script(smartredis_python, MODELS_SCRIPT, server.port, tmp_path, expect="models ok")
    # the chunked model as RedisAI answers it with MODEL_CHUNK_SIZE 4096: all its chunks, in order
    chunks = server.client().execute_command("AI.MODELGET", "mlp_chunked", "BLOB")
    assert isinstance(chunks, list) and b"".join(chunks) == torch_mlp
    assert {len(piece) for piece in chunks[:-1]} == {4096} and 0 < len(chunks[-1]) <= 4096


@pytest.mark.timeout(1200)
def test_smartredis_scripts(smartredis_python: Path, server: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "script.txt").write_text(SCRIPT_FILE)
    (tmp_path / "sr_functions.py").write_text(FUNCTIONS_FILE)
    run_client_script(smartredis_python, SCRIPTS_SCRIPT, server.port, tmp_path, expect="scripts ok")


@pytest.mark.timeout(1200)
def test_smartredis_datasets_and_lists(smartredis_python: Path, server: RunningServer) -> None:
    run_client_script(smartredis_python, DATASETS_SCRIPT, server.port, expect="datasets and lists ok")


@pytest.mark.timeout(1200)
def test_smartredis_ensemble_prefixes(smartredis_python: Path, server: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "add.pt").write_bytes(models.torch_add())
    run_client_script(smartredis_python, PREFIX_SCRIPT, server.port, tmp_path / "add.pt", expect="prefixes ok")


@pytest.mark.timeout(1200)
def test_smartredis_info_config_flush_save(smartredis_python: Path, server: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "add.pt").write_bytes(models.torch_add())
    run_client_script(smartredis_python, INFO_SCRIPT, server.port, tmp_path / "add.pt", expect="info and config ok")
