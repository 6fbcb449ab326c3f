"""The floors `make bench` measures beside our server do the work they stand for: bench/relay_floor.py hands a
602 KB SET to its store and the reply back; bench/model_floor.py runs the MLP on its input and writes the
output's bytes to its store before it answers. A floor that skipped its work would read low and make every
ratio to it look better than it is."""

from __future__ import annotations

import io
import socket
from typing import Any

import numpy as np
import redis
import torch

from bench import model_floor, relay_floor
from tests import models
from tests.support import redis_server_process


def _request(port: int, command: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(command)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = conn.recv(4096)
            assert chunk, reply
            reply += chunk
        return reply


def test_the_model_floor_writes_the_models_output_before_it_answers() -> None:
    with model_floor.running() as floor:
        command = b"*8\r\n$15\r\nAI.MODELEXECUTE\r\n$1\r\nm\r\n$6\r\nINPUTS\r\n$1\r\n1\r\n$1\r\nx\r\n" \
                  b"$7\r\nOUTPUTS\r\n$1\r\n1\r\n$1\r\ny\r\n"
        assert _request(floor.port, command) == b"+OK\r\n"
        stored = redis.Redis(unix_socket_path=floor.store_socket).get("y")
    module: Any = torch.jit.load(io.BytesIO(models.torch_mlp()))
    with torch.no_grad():
        expected = module(torch.from_numpy(model_floor.model_input())).numpy()
    assert isinstance(stored, bytes) and len(stored) == 10 * 4
    assert np.allclose(np.frombuffer(stored, dtype=np.float32).reshape(1, 10), expected, rtol=1e-5)


def test_the_relay_floor_hands_a_big_set_to_its_store() -> None:
    value = np.random.default_rng(3).bytes(602_112)
    with redis_server_process() as url:
        store_port = int(url.rsplit(":", 1)[1])
        with relay_floor.running(store_port) as (port, _pid):
            command = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%b\r\n" % (len(value), value)
            assert _request(port, command) == b"+OK\r\n"
        assert redis.Redis(port=store_port).get("k") == value
