"""Hostile input and faults, shared by the CI tests (a few thousand cases) and ``make soak`` (bench/soak.py, 100k
and more).

* Seeded generators (a ``random.Random`` in, bytes out): malformed RESP frames, and AI.* commands with wrong
  dtypes, shapes, absurd dims, corrupt blobs and broken DAG grammar, aimed at the objects ``store_fixtures``
  stores.
* ``check_reply``: the one rule every reply must meet: a proper reply or a proper error, never the server's
  ``internal error`` or an op's ``TypeError: …`` (an exception nobody anticipated) and never a dropped connection. ``check_witness``: a
  bystander's own tensor and model run answer as without the fuzz.
* ``WRITES``: the kinds of write whose acknowledgement is checked after a fault (the store killed mid-load) and
  under long mixed load: each written under its own key, read back, compared.
"""

from __future__ import annotations

import random
import re
import struct
from collections.abc import Callable
from typing import Any

import redis

from backends.tensor import MAGIC

Argv = list[bytes]

KEYS = [b"f%d" % i for i in range(6)] + [b"fm", b"fo", b"fs", b"plain", b"alist", b"c0", b"{f}x", b""]
FORGED = [b"c0", b"c1"]  # where forged tensor values go (elsewhere they would turn every key into WRONGTYPE)
DTYPES = [b"FLOAT", b"DOUBLE", b"INT8", b"INT16", b"INT32", b"INT64", b"UINT8", b"UINT16", b"BOOL", b"STRING",
          b"float", b"Int32", b"FLOAT16", b"BFLOAT16", b"COMPLEX", b"", b"\xff\xfe", b"FLOAT32"]
DIMS = [b"0", b"1", b"2", b"3", b"4", b"-1", b"1099511627776", b"9223372036854775807", b"9223372036854775808",
        b"18446744073709551616", b"1e3", b"0x10", b"abc", b"", b"01", b"+2", b" 2"]
VALUES = [b"0", b"1", b"-1", b"1.5", b"nan", b"inf", b"-inf", b"1e309", b"abc", b"", b"true", b"2147483648",
          b"9223372036854775808", b"0x1f", b"\x00"]
DEVICES = [b"CPU", b"cpu", b"CPU:0", b"CPU:1", b"GPU", b"GPU:0", b"TPU", b"", b"CPU:-1", b"CPU:99999999999999999999"]
BACKENDS = [b"TORCH", b"ONNX", b"torch", b"PYTORCH", b"", b"TFX"]
DAG_TOKENS = [b"LOAD", b"PERSIST", b"ROUTING", b"KEYS", b"TIMEOUT", b"|>", b"|>", b"|>", b"AI.TENSORSET",
              b"AI.TENSORGET", b"AI.MODELEXECUTE", b"AI.SCRIPTEXECUTE", b"AI.MODELRUN", b"AI.DAGEXECUTE", b"INPUTS",
              b"OUTPUTS", b"VALUES", b"BLOB", b"META", b"FLOAT", b"1", b"2", b"0", b"-1", b"x", b"y", b"fm", b"fs",
              b"9223372036854775807"]
COMMAND_NAMES = [b"AI.TENSORSET", b"AI.TENSORGET", b"AI.MODELSTORE", b"AI.MODELSET", b"AI.MODELGET", b"AI.MODELDEL",
                 b"AI.MODELEXECUTE", b"AI.MODELRUN", b"AI.SCRIPTSTORE", b"AI.SCRIPTSET", b"AI.SCRIPTGET",
                 b"AI.SCRIPTDEL", b"AI.SCRIPTEXECUTE", b"AI.SCRIPTRUN", b"AI.DAGEXECUTE", b"AI.DAGEXECUTE_RO",
                 b"AI.DAGRUN", b"AI.DAGRUN_RO", b"AI.INFO", b"AI.CONFIG", b"AI._MODELSCAN", b"AI._SCRIPTSCAN",
                 b"AI.GRAPHSTORE", b"AI.GRAPHEXECUTE", b"AI.GRAPHGET", b"AI.GRAPHDEL", b"AI.NOSUCH"]
# Plain commands a frame may carry: harmless to the witness (no FLUSHALL, SHUTDOWN, DEBUG, CONFIG SET, blocking).
PLAIN = [b"PING", b"ECHO", b"GET", b"SET", b"DEL", b"EXISTS", b"HGETALL", b"LPUSH", b"TYPE", b"INCR", b"MGET",
         b"NOSUCHCOMMAND", b"SELECT", b"HELLO", b"CLIENT", b"MULTI", b"EXEC", b"DISCARD", b"WATCH"]


def _pick(rng: random.Random, items: list[bytes]) -> bytes:
    return items[rng.randrange(len(items))]


def _noise(rng: random.Random, limit: int = 24) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(limit)))


def _key(rng: random.Random) -> bytes:
    return _pick(rng, KEYS) if rng.random() < 0.9 else _noise(rng, 8)


def _dims(rng: random.Random) -> Argv:
    return [_pick(rng, DIMS) if rng.random() < 0.3 else str(rng.randrange(5)).encode()
            for _ in range(rng.randrange(5))]


def tensorset(rng: random.Random) -> Argv:
    """AI.TENSORSET with any dtype, shape, BLOB of any length or VALUES of any text."""
    argv = [b"AI.TENSORSET", _key(rng), _pick(rng, DTYPES), *_dims(rng)]
    choice = rng.random()
    if choice < 0.45:
        argv += [b"BLOB", _noise(rng, 64) if rng.random() < 0.5 else bytes(4 * rng.randrange(8))]
    elif choice < 0.9:
        argv += [b"VALUES", *(_pick(rng, VALUES) if rng.random() < 0.3 else str(rng.randrange(100)).encode()
                              for _ in range(rng.randrange(6)))]
    elif choice < 0.95:
        argv += [_pick(rng, [b"BLOB", b"VALUES", b"META", b"blob"])]
    return argv


def tensorget(rng: random.Random) -> Argv:
    return [b"AI.TENSORGET", _key(rng), *[_pick(rng, [b"META", b"VALUES", b"BLOB", b"meta", b"X", b""])
                                        for _ in range(rng.randrange(3))]]


def corrupt_tensor(rng: random.Random) -> Argv:
    """A plain SET of a value that looks like a tensor header and is not: wrong counts, absurd dims, short data."""
    ndim = rng.randrange(5)
    header = MAGIC + struct.pack("<BBH", rng.randrange(3), rng.randrange(16), ndim)
    dims = b"".join(struct.pack("<q", rng.choice([0, 1, 2, -1, 2**40, 2**62, -(2**63)])) for _ in range(ndim))
    return [b"SET", _pick(rng, FORGED), (header + dims + _noise(rng, 32))[: rng.randrange(1, 64)]]


def modelstore(rng: random.Random, blobs: list[bytes]) -> Argv:
    """AI.MODELSTORE of a corrupt (or real) blob with random options; never TF (its import takes seconds), and
    no MINBATCHSIZE (a run of such a model rightly waits for partners that never come)."""
    key = _pick(rng, [b"fm", b"fo", b"m2", b"m3"]) if rng.random() < 0.85 else _key(rng)
    argv = [rng.choice([b"AI.MODELSTORE", b"AI.MODELSET"]), key, _pick(rng, BACKENDS), _pick(rng, DEVICES)]
    for word in (b"TAG", b"BATCHSIZE"):
        if rng.random() < 0.2:
            argv += [word, _pick(rng, DIMS)]
    for word in (b"INPUTS", b"OUTPUTS"):
        if rng.random() < 0.3:
            argv += [word, _pick(rng, DIMS), *(_key(rng) for _ in range(rng.randrange(3)))]
    blob = rng.choice(blobs) if blobs and rng.random() < 0.3 else _noise(rng, 200)
    if rng.random() < 0.5 and blob:
        damaged = bytearray(blob)
        for _ in range(rng.randrange(1, 8)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        blob = bytes(damaged)[: rng.randrange(1, len(damaged) + 1)]
    if rng.random() < 0.9:
        argv += [b"BLOB", blob]
    return argv


def _keys_clause(rng: random.Random, word: bytes, pool: list[bytes], counted: bool) -> Argv:
    """``word [n] key...``: mostly keys of ``pool`` and a count that matches them (else anything)."""
    keys = [_pick(rng, pool) if rng.random() < 0.8 else _key(rng) for _ in range(rng.randrange(1, 3))]
    if not counted:
        return [word, *keys]
    count = str(len(keys)).encode() if rng.random() < 0.7 else _pick(rng, DIMS)
    return [word, count, *keys]


def execute(rng: random.Random) -> Argv:
    """AI.MODELEXECUTE / AI.SCRIPTEXECUTE / the deprecated RUN forms (no counts), mostly well formed, on the
    fixtures' tensors; sometimes with the longest TIMEOUT there is."""
    kind = rng.randrange(4)
    if kind == 0:
        argv = [b"AI.MODELEXECUTE", _pick(rng, [b"fm", b"fo", b"fs", b"f1"])]
    elif kind == 1:
        argv = [b"AI.SCRIPTEXECUTE", _pick(rng, [b"fs", b"fm", b"f2"]), _pick(rng, [b"bump", b"ident", b"", b"nope"])]
        if rng.random() < 0.5:
            argv += _keys_clause(rng, b"KEYS", KEYS, counted=True)
    elif kind == 2:
        argv = [b"AI.MODELRUN", _pick(rng, [b"fm", b"fo"])]
    else:
        argv = [b"AI.SCRIPTRUN", b"fs", _pick(rng, [b"bump", b"ident"])]
    if kind < 2 and rng.random() < 0.1:
        argv += [b"TIMEOUT", b"9223372036854775807"]  # before INPUTS: refused by the parser
    argv += _keys_clause(rng, b"INPUTS", [b"f1", b"f1", b"f0"], counted=kind < 2)
    if kind == 1 and rng.random() < 0.3:
        argv += [b"ARGS", b"1", _noise(rng, 6)]
    argv += _keys_clause(rng, b"OUTPUTS", [b"f2", b"f3", b"f4"], counted=kind < 2)
    if rng.random() < 0.3:
        argv += [b"TIMEOUT", rng.choice([b"9223372036854775807", b"1", b"5000", _pick(rng, DIMS)])]
    return argv


def scriptstore(rng: random.Random, source: bytes) -> Argv:
    """AI.SCRIPTSTORE of a mangled source (cut, bytes flipped) or no source at all."""
    text = bytearray(source)
    for _ in range(rng.randrange(4)):
        text[rng.randrange(len(text))] = rng.randrange(32, 127)
    cut = bytes(text)[: rng.randrange(1, len(text) + 1)]
    argv = [b"AI.SCRIPTSTORE", _pick(rng, [b"s3", b"s4", b"fs"]), _pick(rng, DEVICES)]
    if rng.random() < 0.8:
        argv += [b"ENTRY_POINTS", _pick(rng, DIMS), *(_pick(rng, [b"bump", b"ident", b"", b"zz"])
                                                       for _ in range(rng.randrange(3)))]
    return [*argv, b"SOURCE", cut] if rng.random() < 0.9 else argv


def dag(rng: random.Random) -> Argv:
    """AI.DAGEXECUTE (or _RO, or DAGRUN) of random tokens: the grammar broken in every place."""
    name = _pick(rng, [b"AI.DAGEXECUTE", b"AI.DAGEXECUTE_RO", b"AI.DAGRUN", b"AI.DAGRUN_RO"])
    if rng.random() < 0.5:  # mostly well-formed, one part damaged
        argv = [name, b"LOAD", b"1", b"f1", b"|>", b"AI.TENSORSET", b"x", b"FLOAT", b"1", b"VALUES", b"1",
                b"|>", b"AI.MODELEXECUTE", b"fm", b"INPUTS", b"1", b"x", b"OUTPUTS", b"1", b"y",
                b"|>", b"AI.TENSORGET", b"y", b"VALUES"]
        argv[rng.randrange(1, len(argv))] = _pick(rng, DAG_TOKENS) if rng.random() < 0.8 else _noise(rng, 6)
        return argv
    return [name, *(_pick(rng, DAG_TOKENS) for _ in range(rng.randrange(12)))]


def graph(rng: random.Random) -> Argv:
    words = [b"OPS", b"INPUTS", b"OUTPUTS", b"MODE", b"COMPILED", b"INTERPRETED", b"|>", b"AI.MODELEXECUTE", b"fm"]
    return [_pick(rng, [b"AI.GRAPHSTORE", b"AI.GRAPHEXECUTE", b"AI.GRAPHGET", b"AI.GRAPHDEL"]), _key(rng),
            *(_pick(rng, words) if rng.random() < 0.7 else _pick(rng, DIMS) for _ in range(rng.randrange(10)))]


def misc(rng: random.Random) -> Argv:
    """The read-only AI commands and AI.CONFIG GET (its setters would change what the witness sees)."""
    return rng.choice([
        [b"AI.MODELGET", _key(rng), *(_pick(rng, [b"META", b"BLOB", b"X"]) for _ in range(rng.randrange(3)))],
        [b"AI.SCRIPTGET", _key(rng), *(_pick(rng, [b"META", b"SOURCE", b"X"]) for _ in range(rng.randrange(3)))],
        [rng.choice([b"AI.MODELDEL", b"AI.SCRIPTDEL"]), _key(rng)],
        [b"AI.INFO", _key(rng), *([b"RESETSTAT"] if rng.random() < 0.3 else [])],
        [b"AI.CONFIG", b"GET", _pick(rng, [b"MODEL_CHUNK_SIZE", b"BACKENDSPATH", b"NOPE", b""])],
        [b"AI.CONFIG", *(_pick(rng, [b"SET", b"LOADBACKEND", b"BACKENDSPATH", b"NOPE"]) for _ in range(rng.randrange(2)))],
        [rng.choice([b"AI._MODELSCAN", b"AI._SCRIPTSCAN"]), *(_pick(rng, DIMS) for _ in range(rng.randrange(3)))],
        [_pick(rng, COMMAND_NAMES), *(_noise(rng, 10) for _ in range(rng.randrange(6)))],
    ])


def ai_command(rng: random.Random, blobs: list[bytes], source: bytes) -> Argv:
    """One random AI.* command (or a forged tensor value) of the kinds above, weighted to the cheap ones."""
    roll = rng.random()
    if roll < 0.25:
        return tensorset(rng)
    if roll < 0.35:
        return tensorget(rng)
    if roll < 0.42:
        return corrupt_tensor(rng)
    if roll < 0.47:
        return modelstore(rng, blobs)
    if roll < 0.67:
        return execute(rng)
    if roll < 0.70:
        return scriptstore(rng, source)
    if roll < 0.85:
        return dag(rng)
    if roll < 0.90:
        return graph(rng)
    return misc(rng)


def encode(argv: Argv) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in argv)


def resp_frame(rng: random.Random) -> bytes:
    """One request frame, valid or broken: bad lengths, wrong prefixes, truncation, inline garbage, nesting."""
    argv = [_pick(rng, PLAIN + COMMAND_NAMES), *(_noise(rng, 12) for _ in range(rng.randrange(4)))]
    frame = encode(argv)
    roll = rng.random()
    if roll < 0.15:
        return frame  # valid
    if roll < 0.30:
        return frame[: rng.randrange(len(frame))]  # cut anywhere
    if roll < 0.45:
        broken = bytearray(frame)
        for _ in range(rng.randrange(1, 4)):
            broken[rng.randrange(len(broken))] = _pick(rng, [b"*", b"$", b"\r", b"\n", b"-", b":", b"x", b"9"])[0]
        return bytes(broken)
    if roll < 0.55:
        return b"*" + _pick(rng, DIMS) + b"\r\n" + frame[4:]  # array count of any text
    if roll < 0.65:
        return b"*1\r\n$" + _pick(rng, DIMS) + b"\r\n" + _noise(rng, 16) + b"\r\n"  # bulk length of any text
    if roll < 0.72:
        return _pick(rng, [b":", b"+", b"-", b"%", b"~", b">", b"_", b"#", b",", b"("]) + _noise(rng, 12) + b"\r\n"
    if roll < 0.80:
        return b"*2\r\n*1\r\n$4\r\nPING\r\n$1\r\nx\r\n"  # nested array
    if roll < 0.90:  # inline command, quotes maybe unbalanced
        return b" ".join(rng.choice([b"SET", b"GET", b"\"a", b"'b'", b"\"c\\x41\"", b"PING", b"\"\"", b"x"])
                         for _ in range(rng.randrange(1, 5))) + b"\r\n"
    return _noise(rng, 48)


class Violation(AssertionError):
    """A reply that breaks the rule: the server's own internal error, or a connection lost."""


# How an exception nobody anticipated is answered: the server's "internal error", or an op's "<Python exception
# class>: ..." (dag/worker.py _op_failed).
UNEXPECTED = re.compile(r"internal error|^[A-Z][A-Za-z]*(Error|Exception): ")


def check_reply(conn: redis.Redis, argv: Argv) -> object:
    """Send ``argv``; a reply or a proper error is fine (returned); an error that says an exception was not
    anticipated, or a lost connection, is a Violation."""
    try:
        return conn.execute_command(*argv)
    except redis.ResponseError as exc:
        if UNEXPECTED.search(str(exc)):
            raise Violation(f"{argv!r:.300}: {exc}") from exc
        return exc
    except redis.ConnectionError as exc:
        raise Violation(f"{argv!r:.300}: connection lost: {exc}") from exc


FUZZ_SCRIPT = b"""
def bump(tensors: List[Tensor], keys: List[str], args: List[str]):
    return tensors[0] + 1

def ident(tensors: List[Tensor], keys: List[str], args: List[str]):
    return tensors[0]
"""


def store_fixtures(conn: redis.Redis) -> list[bytes]:
    """(Again) the objects random commands aim at: a TORCH and an ONNX model, a script, a tensor, plain keys;
    the fresh tensor keys. Returns the real model blobs (the fuzz corrupts copies of them)."""
    from tests import models  # torch: imported only by the callers that store models

    blobs = [models.torch_double(), models.onnx_add()]
    conn.delete("fm", "fo", "fs", "plain", "alist", *(f"f{i}" for i in range(6)))
    conn.execute_command("AI.MODELSTORE", "fm", "TORCH", "CPU", "BLOB", blobs[0])
    conn.execute_command("AI.MODELSTORE", "fo", "ONNX", "CPU", "BLOB", blobs[1])
    conn.execute_command("AI.SCRIPTSTORE", "fs", "CPU", "ENTRY_POINTS", 2, "bump", "ident", "SOURCE", FUZZ_SCRIPT)
    conn.execute_command("AI.TENSORSET", "f1", "FLOAT", 2, "VALUES", 1, 2)
    conn.set("plain", "text")
    conn.rpush("alist", "a")
    return blobs


def store_witness(witness: redis.Redis) -> None:
    """The bystander's model and script (also what ``WRITES`` runs), under keys the fuzz never names."""
    from tests import models

    witness.execute_command("AI.MODELSTORE", "witness:m", "TORCH", "CPU", "BLOB", models.torch_double())
    witness.execute_command("AI.SCRIPTSTORE", "witness:s", "CPU", "ENTRY_POINTS", 2, "bump", "ident", "SOURCE",
                            FUZZ_SCRIPT)


def check_witness(witness: redis.Redis, round_: int) -> None:
    """The bystander's own tensor and model run answer exactly as without the fuzz."""
    witness.execute_command("AI.TENSORSET", "witness:in", "FLOAT", 2, "VALUES", round_, 1)
    assert witness.execute_command("AI.MODELEXECUTE", "witness:m", "INPUTS", 1, "witness:in", "OUTPUTS", 1,
                                   "witness:out") == b"OK"
    assert witness.execute_command("AI.TENSORGET", "witness:out", "VALUES") == [str(2 * round_).encode(), b"2"]


def acknowledged(reply: Any) -> Any:
    """``reply`` when the write was acknowledged; else raise the error element of a DAG reply (a DAG whose PERSIST
    failed answers its op replies and one more, the error: nothing was written)."""
    failures = [e for e in reply if isinstance(e, redis.ResponseError)] if isinstance(reply, list) else []
    if failures:
        raise failures[0]
    return reply


def _dag_through(op: list[object]) -> Callable[[Any, str, int], Any]:
    """A DAG that sets a local tensor to i, runs ``op`` on it into the key, and PERSISTs the key."""
    return lambda c, k, i: c.execute_command("AI.DAGEXECUTE", "PERSIST", 1, k, "|>", "AI.TENSORSET", "a", "FLOAT", 1,
                                             "VALUES", i, "|>", *op, "INPUTS", 1, "a", "OUTPUTS", 1, k)


def _tensor_values(c: Any, k: str) -> Any:
    return c.execute_command("AI.TENSORGET", k, "VALUES")


# (write(conn, key, i), read(conn or pipeline, key), what the read must give for i); the model and script ones
# need ``store_witness``.
WRITES: list[tuple[Callable[[Any, str, int], Any], Callable[[Any, str], Any], Callable[[int], Any]]] = [
    (lambda c, k, i: c.execute_command("AI.TENSORSET", k, "INT32", 1, "VALUES", i), _tensor_values, lambda i: [i]),
    (lambda c, k, i: c.set(k, i), lambda c, k: c.get(k), lambda i: str(i).encode()),
    (lambda c, k, i: c.execute_command("AI.DAGEXECUTE", "PERSIST", 1, k, "|>", "AI.TENSORSET", k, "INT32", 1,
                                       "VALUES", i), _tensor_values, lambda i: [i]),
    (_dag_through(["AI.MODELEXECUTE", "witness:m"]), _tensor_values, lambda i: [str(2 * i).encode()]),
    (_dag_through(["AI.SCRIPTEXECUTE", "witness:s", "bump"]), _tensor_values, lambda i: [str(i + 1).encode()]),
]
