"""Runtime settings reach the backends: ONNX MODEL_EXECUTION_TIMEOUT stops long runs, thread counts are set,
and the TLS listener serves clients."""

from __future__ import annotations

import random
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import redis
import torch

from backends.base import RuntimeOptions
from backends.device import Device
from backends.onnx_backend import OnnxBackend, OnnxModel, Watchdog
from backends.torch_backend import TorchBackend
from backends.torch_threads import use_intra_op_threads
from server.config import Config
from tests import models
from tests.support import running_server

CPU = Device("CPU", "CPU", None)


def test_onnx_execution_timeout_stops_a_long_run() -> None:
    with running_server(Config(port=0, model_execution_timeout=10)) as server:
        conn = server.client()
        conn.execute_command("AI.MODELSTORE", "chain", "ONNX", "CPU", "BLOB", models.onnx_slow_chain(links=64))
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 512, 512, "BLOB", bytes(512 * 512 * 4))
        with pytest.raises(redis.ResponseError, match="terminate flag"):  # stopped by the timeout, not finished
            conn.execute_command("AI.MODELEXECUTE", "chain", "INPUTS", 1, "x", "OUTPUTS", 1, "y")
        assert conn.exists("y") == 0
        conn.execute_command("AI.MODELSTORE", "add", "ONNX", "CPU", "BLOB", models.onnx_add())
        conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, 2, "VALUES", 1, 2, 3, 4)
        assert conn.execute_command("AI.MODELEXECUTE", "add", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b") == b"OK"


def test_thread_settings_reach_the_runtimes() -> None:
    session = OnnxBackend().load_model(models.onnx_add(), CPU, RuntimeOptions(intra_op_threads=1,
                                                                             inter_op_threads=2))
    options = session._session.get_session_options()
    assert isinstance(options, ort.SessionOptions)
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 2)
    before = torch.get_num_threads()
    try:
        TorchBackend().load_model(models.torch_add(), CPU, RuntimeOptions(intra_op_threads=1))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_tls_listener(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-days",
                    "1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    with running_server(Config(port=0, tls_cert_file=str(cert), tls_key_file=str(key))) as server:
        secure = redis.Redis(port=server.port, ssl=True, ssl_cert_reqs=ssl.CERT_NONE, protocol=2)
        assert secure.set("over-tls", "yes") is True
        assert secure.execute_command("AI.TENSORSET", "t", "FLOAT", 1, "VALUES", 1) == b"OK"
        assert secure.get("over-tls") == b"yes"
        big = random.Random(11).randbytes(1_500_000)  # read chunk by chunk: TLS decrypts, nothing is read in place
        assert secure.set("big", big) is True
        assert secure.execute_command("AI.TENSORSET", "image", "UINT8", len(big), "BLOB", big) == b"OK"
        assert secure.get("big") == big
        assert secure.execute_command("AI.TENSORGET", "image", "BLOB") == big
        plain = redis.Redis(port=server.port, socket_timeout=2)
        with pytest.raises(redis.ConnectionError):
            plain.ping()


THREADS_SCRIPT = """
def threads(tensors: List[Tensor], keys: List[str], args: List[str]):
    return torch.ops.probe.threads(tensors[0])
"""


@pytest.fixture(scope="module")
def thread_probe() -> Iterator[None]:
    """An operator, callable from TorchScript, that answers the calling thread's own intra-op thread count."""
    library = torch.library.Library("probe", "DEF")
    library.define("threads(Tensor x) -> Tensor")
    library.impl("threads", lambda x: torch.tensor([torch.get_num_threads()]), "CPU")
    yield
    library._destroy()


@pytest.mark.parametrize(("configured", "expected"), [(0, 1), (2, 2)])
def test_intra_op_threads_are_set_on_the_worker_thread_itself(configured: int, expected: int,
                                                              thread_probe: None) -> None:
    """torch's setting is per OS thread: what the worker thread sees is what counts (0 = one per worker)."""
    with running_server(Config(port=0, intra_op_parallelism=configured, script_allow_ops="probe::threads")) as server:
        conn = server.client()
        conn.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "threads", "SOURCE", THREADS_SCRIPT)
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, "VALUES", 1)
        assert conn.execute_command("AI.SCRIPTEXECUTE", "s", "threads", "INPUTS", 1, "x", "OUTPUTS", 1, "n") == b"OK"
        assert conn.execute_command("AI.TENSORGET", "n", "VALUES") == [expected]


def test_a_thread_keeps_its_own_intra_op_setting() -> None:
    """Why the setting is made on each worker: a new thread does not inherit another thread's count."""
    seen: list[int] = []

    def worker() -> None:
        use_intra_op_threads(1)
        seen.append(torch.get_num_threads())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [1]


def test_a_torch_run_turns_autograd_off_on_its_own_thread_only() -> None:
    """Runs skip a per-call inference_mode block: the first run on a thread turns autograd off there (torch's
    grad mode is per thread), so outputs never carry a graph, and a thread that ran nothing keeps it on."""
    model = TorchBackend().load_model(models.torch_mlp(), CPU, RuntimeOptions(intra_op_threads=1))
    x = torch.ones(1, 64).numpy()
    seen: list[tuple[bool, bool, int]] = []

    def worker() -> None:
        before = torch.is_grad_enabled()
        (out,) = model.run([x])
        seen.append((before, torch.is_grad_enabled(), out.shape[1]))
        seen.append((before, torch.is_grad_enabled(), model.run([x])[0].shape[1]))  # the second run: no change

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [(True, False, 10), (True, False, 10)]
    bystander: list[bool] = []
    other = threading.Thread(target=lambda: bystander.append(torch.is_grad_enabled()))
    other.start()
    other.join()
    assert bystander == [True]


def test_onnx_runs_through_the_binding_on_the_cpu_and_through_the_session_on_a_gpu() -> None:
    """On the CPU a run calls onnxruntime's binding directly (the session's Python checks are ours to skip:
    our feed names every input); its outputs are the session's own. A GPU model keeps the session's run, whose
    EPFail fallback to the CPU the binding lacks."""
    model = OnnxBackend().load_model(models.onnx_add(), CPU, RuntimeOptions(intra_op_threads=1))
    a = np.array([[1, 2], [3, 4]], dtype=np.float32)
    session = model._session
    expected = session.run(None, {name: a for name in model.input_names})
    assert [out.tolist() for out in model.run([a, a])] == [out.tolist() for out in expected] == [[[2, 4], [6, 8]]]
    assert model._run != session.run
    on_gpu = OnnxModel(session, 0, Watchdog(), on_gpu=True)
    assert on_gpu._run == session.run
    assert [out.tolist() for out in on_gpu.run([a, a])] == [[[2, 4], [6, 8]]]
