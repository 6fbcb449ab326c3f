"""Per-device queues (their workers are started by dag/manager.py).

One queue per upper-cased device string (``CPU``, ``CPU:1``, ``GPU:0``), made on first use, each served by
THREADS_PER_QUEUE worker threads. A queue is a deque of tickets plus one ``threading.Condition``; workers
never poll: they wait on the condition with a timeout computed from the earliest ticket deadline, and are
woken by a push, by another device finishing a step of the same run (its outputs may be our inputs), or by
shutdown.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from dag.batching import WaitForBatch, select_batch
from dag.runinfo import DeviceTicket

RECENT_CALLS = 64
# The longest a worker or the watchdog sleeps before it looks again: a TIMEOUT of 2^63 ms would otherwise be a wait
# that threading cannot represent (OverflowError), and the thread waiting on it would die.
LONGEST_WAIT_S = 3600.0


@dataclass(eq=False)
class DeviceQueue:
    """Tickets waiting for one device, and the condition its workers sleep on."""

    name: str
    # the condition's own lock: code that only updates counters takes it directly (``with queue.lock``), which
    # skips threading.Condition's interpreted __enter__/__exit__ (an inline run does, on every request)
    lock: threading.Lock = field(default_factory=threading.Lock)
    cond: threading.Condition = field(init=False)
    items: deque[DeviceTicket] = field(default_factory=deque)
    closed: bool = False
    running: int = 0  # worker threads busy with work they took (under ``lock``; dag/inline.py reads it bare)
    busy_seconds: float = 0.0  # total time workers spent executing steps (INFO)
    executed: int = 0  # model/script calls made (a batch is one call)
    batched_requests: int = 0  # requests that ran inside a batch of two or more
    # (start, end) perf_counter stamps of the last calls: parallelism is checked from these, not from wall time
    recent: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=RECENT_CALLS))

    def __post_init__(self) -> None:
        self.cond = threading.Condition(self.lock)

    def push_back(self, ticket: DeviceTicket) -> None:
        with self.cond:
            self.items.append(ticket)
            self.cond.notify()

    def push_front(self, ticket: DeviceTicket) -> None:
        """A ticket that made progress goes back to the head: it usually continues at once."""
        with self.cond:
            self.items.appendleft(ticket)
            self.cond.notify()

    def take_locked(self, now: float) -> tuple[list[DeviceTicket], float | None]:
        """(Call with ``cond`` held.) The first work that can move, removed from the queue: a dead ticket
        (only to be finished), a ready ticket, or a batch of ready tickets for one model. Else ([], seconds
        until the earliest deadline or batch wake-up, or None to sleep until woken)."""
        earliest: float | None = None
        for position, ticket in enumerate(self.items):
            run = ticket.run
            if run.is_dead(now) or (ticket.ready() and ticket.current.batch is None):
                del self.items[position]
                return [ticket], None
            wake = run.deadline
            if ticket.ready():
                decision = self._batch_from(position, now)
                if isinstance(decision, list):
                    return decision, None
                wake = decision if wake is None or (decision is not None and decision < wake) else wake
            if wake is not None and (earliest is None or wake < earliest):
                earliest = wake
        return [], (min(max(earliest - now, 0.0) + 0.0005, LONGEST_WAIT_S) if earliest is not None else None)

    def _batch_from(self, position: int, now: float) -> list[DeviceTicket] | float | None:
        """Run the ticket at ``position`` with partners behind it (removed and returned), or wait (the time
        to look again)."""
        head = self.items[position]
        spec = head.current.batch
        assert spec is not None
        tickets, candidates = [head], []
        head_candidate = head.batch_candidate()
        assert head_candidate is not None
        candidates.append(head_candidate)
        for ticket in list(self.items)[position + 1 :]:
            step = ticket.current
            if step.batch is None or step.batch.model != spec.model or not ticket.ready():
                continue
            if ticket.run.is_dead(now):
                continue
            candidate = ticket.batch_candidate()
            if candidate is not None:
                tickets.append(ticket)
                candidates.append(candidate)
        decision = select_batch(spec.policy, candidates, now)
        if isinstance(decision, WaitForBatch):
            return decision.until
        chosen = [tickets[i] for i in decision.members]
        for ticket in chosen:
            self.items.remove(ticket)
        return chosen

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def __len__(self) -> int:
        return len(self.items)

    def busy(self) -> bool:
        """Tickets wait, or a worker is working: a run on the loop thread now shares the machine with it."""
        return bool(self.items) or self.running > 0
