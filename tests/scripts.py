"""TorchScript script sources the script tests store (RedisAI's test scripts, rewritten), and a helper."""

from __future__ import annotations

from typing import Any

import redis

SCRIPT = """
def bar(tensors: List[Tensor], keys: List[str], args: List[str]):
    a = tensors[0]
    b = tensors[1]
    return a + b

def bar_variadic(tensors: List[Tensor], keys: List[str], args: List[str]):
    a = tensors[0]
    l = tensors[1:]
    return a + l[0]

def pair(tensors: List[Tensor], keys: List[str], args: List[str]):
    return tensors[0] * float(args[0]), torch.tensor([len(keys), len(args), len(tensors)])

def many(tensors: List[Tensor], keys: List[str], args: List[str]):
    return [t * 2 for t in tensors]

def nothing(tensors: List[Tensor], keys: List[str], args: List[str]):
    x = 1

def helper(a, b: List[Tensor]):
    return a - b[0]
"""

OLD_SCRIPT = """
def bar(a, b):
    return a + b

def bar_variadic(a, args : List[Tensor]):
    return args[0] + args[1]

def takes_int(a: int):
    return torch.tensor(a)
"""

REDIS_SCRIPT = """
def to_int_tensor(value: Any):
    return torch.tensor(int(str(value)))

def set_get(tensors: List[Tensor], keys: List[str], args: List[str]):
    ok = redis.execute("SET", keys[0], args[0])
    res = redis.execute("GET", keys[0])
    return to_int_tensor(res), torch.tensor(int(str(ok) == "OK"))

def incr(tensors: List[Tensor], keys: List[str], args: List[str]):
    redis.execute("SET", [keys[0], args[0]])
    return to_int_tensor(redis.execute("INCR", keys[0]))

def float_get(tensors: List[Tensor], keys: List[str], args: List[str]):
    redis.execute("SET", keys[0], args[0])
    return torch.tensor(float(str(redis.execute("GET", keys[0]))))

def int_list(tensors: List[Tensor], keys: List[str], args: List[str]):
    for value in args:
        redis.execute("RPUSH", keys[0], value)
    values = redis.asList(redis.execute("LRANGE", keys[0], "0", str(len(args))))
    redis.execute("DEL", keys[0])
    return torch.cat([to_int_tensor(v).reshape(1, 1) for v in values], dim=0)

def hash_set(tensors: List[Tensor], keys: List[str], args: List[str]):
    command_args = [keys[0]]
    for s in args:
        command_args.append(s)
    redis.execute("HSET", command_args)
    values = redis.asList(redis.execute("HVALS", keys[0]))
    return torch.tensor(len(values))

def delete(tensors: List[Tensor], keys: List[str], args: List[str]):
    redis.execute("DEL", [keys[0]])

def call(tensors: List[Tensor], keys: List[str], args: List[str]):
    redis.execute(args[0], args[1:])

def run_model(tensors: List[Tensor], keys: List[str], args: List[str]):
    return redisAI.model_execute(keys[0], [tensors[0], tensors[1]], 1)

def run_model_n(tensors: List[Tensor], keys: List[str], args: List[str]):
    return redisAI.model_execute(keys[0], tensors, int(args[0]))
"""

A_B = ("FLOAT", 2, 2, "VALUES", 2, 3, 2, 3)


def tensor_values(conn: redis.Redis, key: str) -> list[Any]:
    return list(conn.execute_command("AI.TENSORGET", key, "VALUES"))


def store_script(conn: redis.Redis, key: str, source: str, *entry_points: str, device: str = "CPU") -> None:
    assert conn.execute_command("AI.SCRIPTSTORE", key, device, "ENTRY_POINTS", len(entry_points), *entry_points,
                                "SOURCE", source) == b"OK"
