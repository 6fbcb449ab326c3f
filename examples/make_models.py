"""Write the quickstart's model: add.pt, a TorchScript module whose forward(a, b) returns a + b.

Usage: python examples/make_models.py [directory]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch


class Add(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    torch.jit.save(torch.jit.script(Add()), str(target / "add.pt"))
    print(f"wrote {target / 'add.pt'}")


if __name__ == "__main__":
    main()
