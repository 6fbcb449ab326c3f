"""Counters of the event loop: INFO stats and commandstats, read by Prometheus at scrape time."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class CommandStat:
    """INFO commandstats / Prometheus counters of one of our commands (relayed commands: the store counts)."""

    calls: int = 0
    usec: int = 0
    failed: int = 0


@dataclass(slots=True)
class Stats:
    """Counters behind INFO stats (event-loop thread only)."""

    connections_received: int = 0
    commands_processed: int = 0
    rejected_connections: int = 0
    protocol_errors: int = 0
    per_command: dict[str, int] = field(default_factory=dict)
    commands: dict[str, CommandStat] = field(default_factory=dict)  # by command-table name
