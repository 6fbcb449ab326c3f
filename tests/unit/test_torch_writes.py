"""``writes_in_place``: read from a module's graph whether its run may write into a tensor (its inputs included)."""

from __future__ import annotations

import torch

from backends.torch_writes import writes_in_place


class _Pool(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.head(x.mean(dim=(2, 3))))


class _AddsToAView(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.view(-1)
        flat.add_(1)
        return x.mean()


class _InPlaceReluInALoop(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = torch.nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 0):
            for _ in range(2):
                x = self.act(x)
        return x


class _WritesIntoOut(torch.nn.Module):
    def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return torch.add(x, x, out=out)


def test_a_module_without_in_place_ops_writes_nothing() -> None:
    assert not writes_in_place(torch.jit.script(_Pool()))
    assert not writes_in_place(torch.jit.trace(_Pool(), torch.zeros(1, 3, 4, 4)))


def test_an_in_place_op_on_a_view_of_the_input_counts() -> None:
    assert writes_in_place(torch.jit.script(_AddsToAView()))


def test_an_in_place_op_inside_a_branch_and_a_loop_of_a_submodule_counts() -> None:
    assert writes_in_place(torch.jit.script(_InPlaceReluInALoop()))


def test_an_out_argument_counts() -> None:
    assert writes_in_place(torch.jit.script(_WritesIntoOut()))
