"""Intermediate tensors left on their device: which ops take them as they are, and where they cross to the host.

On a GPU queue whose lane keeps them (dag/lanes.py), a model op's outputs stay on the GPU
(``backends.device.ResidentTensor``): the next op of the run on the same device takes them as they are, with no
copy to the host and back. They cross to the host, once, when an op on another device (or one that cannot take
them, such as a script) needs them (``bring_inputs``), and when the run ends (``settle_run``, before ``on_done``)
if the event loop reads them afterwards (TENSORGET, PERSIST, a stored graph's outputs: ``needed``; every slot
when the run does not say), so that what it reads is a host ``Tensor`` as before; an intermediate nobody reads
stays on the device and goes with the run (AI.INFO's sample counts read its shape). A run with nothing
resident (every CPU run) costs one flag read (``RunInfo.resident``). Usage, on a worker::

    work = resident_work(step, lane)          # None: the plain path
    if run.resident:
        bring_inputs(run, step, step.device if work is not None else None)
    ...
    finish_run(run, needed={4, 7})           # the last ticket let go: slots 4 and 7 are read after it
"""

from __future__ import annotations

import logging
from collections.abc import Container, Sequence
from typing import Any

from backends import errors as msgs
from backends.device import ResidentTensor
from backends.errors import AIError
from dag.execute import ModelWork
from dag.lanes import Lane
from dag.mangle import ResolvedDag
from dag.ops import DagOp, TensorGetOp
from dag.runinfo import RunInfo, Step, Work

log = logging.getLogger("redisai.worker")


class ResidentWork:
    """A model step run so that its outputs stay on the device (``ModelWork.run_resident``); with the lane's
    CUDA graphs (``graphs``, not None) the model's ``run_resident`` is handed them."""

    __slots__ = ("device", "graphs", "work")

    def __init__(self, work: ModelWork, device: str, graphs: object | None = None) -> None:
        self.work = work
        self.device = device
        self.graphs = graphs

    def __call__(self, inputs: list[Any]) -> list[Any]:
        if self.graphs is None:
            return self.work.run_resident(inputs, self.device)
        model: Any = self.work.model  # a backend's model beyond LoadedModel (checked by can_stay_resident)
        outputs: list[Any] = model.run_resident(inputs, self.device, self.graphs)
        if len(outputs) != self.work.n_outputs:
            raise AIError(msgs.MODEL_OUTPUT_COUNT_MSG)
        return outputs


def resident_work(step: Step, lane: Lane | None) -> Work | None:
    """How ``step`` runs keeping its outputs on the device, or None (the plain ``step.work``): only a model whose
    backend can (``run_resident``), on a lane that keeps them."""
    work = step.work
    if lane is None or not lane.keep_resident or not isinstance(work, ModelWork) or not work.can_stay_resident():
        return None
    return ResidentWork(work, step.device, lane.graphs)


def bring_inputs(run: RunInfo, step: Step, keep_on: str | None) -> None:
    """Host every resident input of ``step`` not on ``keep_on`` (None: all of them), in its slot, so that the
    copy is made once however many ops read it."""
    slots = run.slots
    for index in step.inputs:
        value = slots[index]
        if type(value) is ResidentTensor and value.device != keep_on:
            hosted = value.host()
            with run.lock:
                if slots[index] is value:
                    slots[index] = hosted


def bring_batch_inputs(runs: Sequence[RunInfo], steps: Sequence[Step]) -> None:
    """A batch's inputs are stacked on the host: every resident one comes over first."""
    for run, step in zip(runs, steps, strict=True):
        if run.resident:
            bring_inputs(run, step, None)


def settle_run(run: RunInfo, needed: Container[int] | None = None) -> None:
    """(The run is finished: no worker touches it.) The resident slots read after the run (``needed``: a DAG's
    TENSORGET and PERSIST slots, a graph's outputs; None: all of them) to the host; the others stay where they
    are, never copied (their shape is still readable; their memory goes with the run). One that cannot be copied
    (a device error) is logged and left empty: the reply answers it as never made."""
    slots = run.slots
    for index, value in enumerate(slots):
        if type(value) is ResidentTensor and (needed is None or index in needed):
            try:
                slots[index] = value.host()
            except Exception:
                log.exception("could not copy an intermediate tensor back from %s", value.device)
                slots[index] = None
    run.resident = False


def dag_reads(ops: Sequence[DagOp], resolved: ResolvedDag) -> frozenset[int]:
    """The slots a DAG's reply and writes read after its run (``settle_run``'s ``needed``): each TENSORGET's
    and each PERSIST name's."""
    gets = (resolved.op_inputs[index][0] for index, op in enumerate(ops) if isinstance(op, TensorGetOp))
    return frozenset((*gets, *(slot for _name, slot in resolved.persist)))


def finish_run(run: RunInfo, needed: Container[int] | None = None) -> None:
    """The last ticket of ``run`` let go: its resident tensors read after it (``needed``) to the host, then
    ``on_done``."""
    if run.resident:
        settle_run(run, needed)
    if run.on_done is not None:
        run.on_done(run)
