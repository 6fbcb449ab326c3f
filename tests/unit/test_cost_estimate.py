"""A model's cost estimate (dag/cost_table.py ``CostEstimate``): where the next run goes, from figures seen on
the loop thread and on the workers, with the numbers the inline policy was seen to get on this machine."""

from __future__ import annotations

from dag.cost_table import RETRY_FIRST, RETRY_MAX, CostEstimate

BUDGET = 200.0  # --inline-op-us


def _estimate(inline: tuple[float, ...] = (), worker: tuple[float, ...] = ()) -> CostEstimate:
    estimate = CostEstimate()
    for cost in worker:
        estimate.ran_on_worker(cost)
    for cost in inline:
        estimate.ran_inline(cost, BUDGET)
    return estimate


def _worker_runs_until_a_try(estimate: CostEstimate, cost_us: float = 300) -> int:
    runs = 0
    while not estimate.may_run_inline(BUDGET):
        estimate.ran_on_worker(cost_us)
        runs += 1
        assert runs <= RETRY_MAX
    return runs


def test_nothing_seen_means_a_worker() -> None:
    assert not CostEstimate().may_run_inline(BUDGET)


def test_a_worker_figure_within_four_budgets_earns_a_try() -> None:
    assert _estimate(worker=(800,)).may_run_inline(BUDGET)
    assert not _estimate(worker=(801,)).may_run_inline(BUDGET)


def test_a_jit_warm_up_does_not_hold_a_model_back() -> None:
    """A TorchScript module's first calls (63 ms, then 1.6 ms: measured here) are forgotten at the first cheaper
    run; a plain average of them kept the figure over the budget for thirty runs and more."""
    estimate = _estimate(worker=(63_000, 1_600))
    assert not estimate.may_run_inline(BUDGET)
    estimate.ran_on_worker(330)
    assert estimate.worker_us == 330 and estimate.may_run_inline(BUDGET)


def test_the_loop_threads_own_figure_decides_once_there_is_one() -> None:
    estimate = _estimate(worker=(350,), inline=(60,))
    for _ in range(100):  # what a worker would say of it does not matter any more
        estimate.ran_on_worker(5_000)
    assert estimate.may_run_inline(BUDGET)
    assert not _estimate(worker=(350,), inline=(250,)).may_run_inline(BUDGET)


def test_a_try_beside_a_busy_worker_is_judged_with_leeway_until_the_queue_is_empty() -> None:
    """The cliff's second half: tries made while the worker drained the model's earlier runs cost 200-300 µs
    (the GIL, the core's other hyperthread) of a run that costs 60 alone, so each failed and the queue never
    emptied. Beside a busy worker a run within 4 x the budget keeps the model here, and the first run with the
    queue empty gives the figure that counts."""
    estimate = _estimate(worker=(63_000, 1_600, 300))
    assert estimate.may_run_inline(BUDGET)
    estimate.ran_inline(290, BUDGET, contended=True)
    for _ in range(50):  # the queue drains meanwhile
        assert estimate.may_run_inline(BUDGET)
        estimate.ran_inline(250, BUDGET, contended=True)
    estimate.ran_inline(60, BUDGET)
    assert estimate.inline_us == 60 and not estimate.admitted and estimate.may_run_inline(BUDGET)


def test_a_model_too_costly_beside_a_busy_worker_is_not_admitted() -> None:
    estimate = _estimate(worker=(700,))
    estimate.ran_inline(4 * BUDGET + 1, BUDGET, contended=True)
    assert not estimate.admitted and not estimate.may_run_inline(BUDGET)


def test_an_admitted_model_that_costs_too_much_alone_goes_back_to_the_workers() -> None:
    estimate = _estimate(worker=(700,))
    estimate.ran_inline(600, BUDGET, contended=True)
    assert estimate.may_run_inline(BUDGET)
    estimate.ran_inline(450, BUDGET)  # the queue is empty: the true figure
    assert not estimate.may_run_inline(BUDGET)


def test_one_spike_does_not_send_a_cheap_model_away() -> None:
    """A GC pause: the figure rises at most SPIKE times per run, by SMOOTHING."""
    estimate = _estimate(worker=(300,), inline=(30, 30, 30))
    estimate.ran_inline(50_000, BUDGET)
    assert estimate.inline_us == 30 + 0.2 * (4 * 30 + 10 - 30)
    assert estimate.may_run_inline(BUDGET)


def test_a_model_that_really_grows_slow_leaves_within_a_few_runs() -> None:
    estimate = _estimate(worker=(300,), inline=(30,))
    runs = 0
    while estimate.may_run_inline(BUDGET):
        estimate.ran_inline(10_000, BUDGET)
        runs += 1
        assert runs < 10
    assert estimate.inline_us > BUDGET


def test_over_budget_it_is_tried_again_ever_later_and_a_try_replaces_the_figure() -> None:
    """A model's first run on the loop thread costs more (torch sets the thread up): the next try comes soon;
    one that keeps costing too much is tried ever less often."""
    estimate = _estimate(worker=(300,), inline=(400,))
    waits = []
    for _ in range(10):
        waits.append(_worker_runs_until_a_try(estimate))
        estimate.ran_inline(5_000, BUDGET)  # the try: still over budget
        assert estimate.inline_us == 5_000
    assert waits == [RETRY_FIRST * 2**i for i in range(9)] + [RETRY_MAX]
    _worker_runs_until_a_try(estimate)
    estimate.ran_inline(40, BUDGET)  # a try that stays
    assert estimate.inline_us == 40 and estimate.may_run_inline(BUDGET)
    for _ in range(10):  # it grows slow: back to the workers, and tried again soon
        estimate.ran_inline(2_000, BUDGET)
    assert _worker_runs_until_a_try(estimate) == RETRY_FIRST


def test_no_try_for_a_model_that_is_costly_on_the_workers_too() -> None:
    estimate = _estimate(worker=(5_000,), inline=(5_000,))
    for _ in range(RETRY_MAX * 2):
        estimate.ran_on_worker(5_000)
    assert not estimate.may_run_inline(BUDGET)


def test_a_figure_of_zero_can_still_grow() -> None:
    estimate = _estimate(worker=(0,), inline=(0,))
    for _ in range(40):
        estimate.ran_inline(10_000, BUDGET)
    assert not estimate.may_run_inline(BUDGET)
