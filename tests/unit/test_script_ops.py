"""The script allow-list (backends/script_ops.py): what pre- and post-processing needs compiles, names are real."""

from __future__ import annotations

import pytest
import torch

from backends.device import parse_device
from backends.errors import AIError
from backends.script_backend import compile_script
from backends.script_ops import ALLOWED_OPS, NOT_IN_EVERY_TORCH

CPU = parse_device(b"CPU")

PREPROCESSING = '''
def helper(x: Tensor) -> Tensor:
    return x * 2

def f(tensors: List[Tensor], keys: List[str], args: List[str]):
    x = tensors[0]
    a = torch.nn.functional.softmax(x, dim=-1) + torch.nn.functional.relu(x) + torch.nn.functional.gelu(x)
    b = torch.nn.functional.interpolate(x.unsqueeze(0).unsqueeze(0), scale_factor=2.0, mode="bilinear",
                                        align_corners=False)
    c = torch.nn.functional.pad(x, [1, 1]) + torch.nn.functional.normalize(x, dim=0).sum()
    d = torch.nn.functional.one_hot(x.long().clamp(0, 3), 4)
    e = torch.nn.functional.layer_norm(x, [x.size(-1)]) + torch.nn.functional.log_softmax(x, 1)
    g = torch.nn.functional.max_pool2d(x.unsqueeze(0), 1) + torch.nn.functional.avg_pool2d(x.unsqueeze(0), 1)
    h = torch.nn.functional.conv2d(x.unsqueeze(0).unsqueeze(0), torch.ones(1, 1, 1, 1))
    table: Dict[str, Tensor] = {}
    table["a"] = x
    del table["a"]
    parts = "a,b".split(",")
    n = int(args[0]) if len(args) > 0 else len(parts)
    y = helper(x).float().to(torch.int32).to(torch.float64).double().half().float()
    with torch.no_grad():
        y = y + 1
    z = torch.stack([x, x]).sum(0).mean().item()
    w: List[List[float]] = x.tolist()
    assert x.dim() == 2, "two dims"
    q = torch.where(x > 0, x, torch.zeros_like(x))[0:1, :]
    u = torch.argmax(x, dim=1).to(torch.float32)
    v = torch.cat(torch.split(x, 1), 0).view(-1).reshape(2, -1).permute(1, 0).contiguous()
    for i in range(n):
        y = y + i
    names = [key.upper() for key in keys]
    names.sort()
    text = "{} x {}".format(n, len(names))
    return x.clamp(0, 1).type(torch.float32).sqrt().exp().log() + z + len(w) + len(text) + q.sum() + u.sum() + v.sum()
'''


def test_pre_and_post_processing_compiles() -> None:
    script = compile_script(PREPROCESSING.encode(), CPU, ["f"])
    assert script.has_function("helper")


def test_every_listed_aten_op_exists() -> None:
    """A typo in the list would allow nothing and hide a missing op: every listed aten op is one the installed
    torch registers, but for the few that only some torch in the declared range has (NOT_IN_EVERY_TORCH)."""
    registered = {schema.name for schema in torch._C._jit_get_all_schemas()}
    missing = {op for op in ALLOWED_OPS if op.startswith("aten::") and op not in registered}
    assert sorted(missing - NOT_IN_EVERY_TORCH) == [], f"torch {torch.__version__}"
    assert NOT_IN_EVERY_TORCH <= ALLOWED_OPS


def test_a_refusal_lists_every_refused_op() -> None:
    source = ("def f(tensors: List[Tensor], keys: List[str], args: List[str]):\n"
              "    torch.save(tensors[0], '/nonexistent/x')\n    print(1)\n    return tensors[0]\n")
    with pytest.raises(AIError, match=r"does not allow: aten::save, prim::Print$"):
        compile_script(source.encode(), CPU, ["f"])


def test_extra_ops_are_allowed_when_configured() -> None:
    source = "def f(tensors: List[Tensor], keys: List[str], args: List[str]):\n    print(1)\n    return tensors[0]\n"
    compile_script(source.encode(), CPU, ["f"], allow_ops=frozenset({"prim::Print"}))
