"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dag.manager import QueueManager


@pytest.fixture
def queues() -> Iterator[QueueManager]:
    """The real device queues with one worker thread each, closed after the test."""
    manager = QueueManager(threads_per_queue=1)
    yield manager
    manager.close(5)
