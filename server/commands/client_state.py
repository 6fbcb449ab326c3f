"""ClientState: what CLIENT LIST shows and what commands change about one connection."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(slots=True)
class ClientState:
    """What CLIENT LIST shows and what commands change about one connection."""

    id: int
    addr: str
    laddr: str
    fd: int
    authenticated: bool
    name: str = ""
    lib_name: str = ""
    lib_ver: str = ""
    proto: int = 2
    db: int = 0
    in_multi: bool = False
    reply_mode: str = "on"  # CLIENT REPLY: on, off, or skip (the next command only)
    pending_db: int | None = None  # a SELECT queued inside MULTI, applied at EXEC
    used_pubsub: bool = False
    tracking: bool = False  # CLIENT TRACKING ON accepted by the store (flag t)
    created: float = field(default_factory=time.monotonic)
    last_active: float = field(default_factory=time.monotonic)
    last_command: bytes = b"NULL"  # argv[0] as sent; decoded only for CLIENT LIST

    def describe(self, query_buffer: int, held: tuple[int, int, int]) -> str:
        """One CLIENT LIST line; ``held``: the channels, patterns and shard channels subscribed to now (any: the
        flag P). The fields are Redis 7.2's that mean something here, in its order (redir: -1, or 0 when tracking:
        RESP3 tracking on the client's own connection, as REDIRECT is refused)."""
        now = time.monotonic()
        command = self.last_command.decode(errors="replace").lower()
        flags = ("P" if any(held) else "") + ("x" if self.in_multi else "") + ("t" if self.tracking else "") or "N"
        return (f"id={self.id} addr={self.addr} laddr={self.laddr} fd={self.fd} name={self.name} "
                f"age={int(now - self.created)} idle={int(now - self.last_active)} flags={flags} db={self.db} "
                f"sub={held[0]} psub={held[1]} ssub={held[2]} multi={0 if self.in_multi else -1} "
                f"qbuf={query_buffer} cmd={command} user=default redir={0 if self.tracking else -1} resp={self.proto} "
                f"lib-name={self.lib_name} lib-ver={self.lib_ver}")


NO_SUBSCRIPTIONS: Final = (0, 0, 0)


def format_peer(info: Any) -> str:
    if isinstance(info, tuple) and len(info) >= 2:
        host, port = info[0], info[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return f"{info or '/unixsocket'}:0"
