"""Fixtures shared by the integration tests against the session's real Redis Cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from server.config import Config
from tests.cluster_support import LocalCluster
from tests.support import RunningServer, running_server


@pytest.fixture
def cluster(redis_cluster: LocalCluster) -> LocalCluster:
    """The session's cluster, emptied."""
    redis_cluster.flush()
    return redis_cluster


@pytest.fixture
def cluster_servers(cluster: LocalCluster) -> Iterator[tuple[RunningServer, RunningServer]]:
    """Two servers in front of the one cluster: A (ours) and B (theirs)."""
    config = Config(port=0, redis_url=cluster.seed_url, shutdown_timeout=2.0)
    with running_server(config) as ours, running_server(config) as theirs:
        yield ours, theirs
