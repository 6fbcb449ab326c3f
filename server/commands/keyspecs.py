"""Key specifications of our commands, in Redis 7's vocabulary (``COMMAND INFO``'s ninth field).

A spec says where a search for keys begins (an ``index``, or just after a ``keyword`` searched from
``startfrom``; ``unknown`` where no rule can say, e.g. the model keys inside a DAG's ops) and how the keys are
found from there (a ``range``, or a ``keynum`` count before the keys), with Redis's flags (RO/RW/OW/RM,
access/update/insert/delete, not_key). The search itself is the store layer's ``KeySpec`` (the one the
cluster router uses on the backing store's specs), so a spec shown here and a spec read from Redis are read
by the same code.

Usage: ``key_at(1, READ)``, ``keys_after(b"INPUTS", 2, READ)``, ``spec.keys(argv)``, ``spec.reply()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from server.protocol.reply import SetOf, Status
from server.store.cluster_keys import KeySpec

READ = ("RO", "access")
OVERWRITE = ("OW", "update")
READ_WRITE = ("RW", "access", "update")
DELETE = ("RM", "delete")
ROUTE_ONLY = ("RO", "not_key")  # routed as a key on a cluster, never read (a DAG's ROUTING / KEYS)


@dataclass(frozen=True, slots=True)
class KeySpecRow:
    """One key spec of a command: Redis's flags and the search (``finder``)."""

    flags: tuple[str, ...]
    finder: KeySpec
    notes: str = ""

    def keys(self, argv: Sequence[bytes]) -> list[bytes]:
        return self.finder.keys(argv)

    def brief(self) -> str:
        """A short form for docs/commands.md: ``arg 1``, ``INPUTS n key…``, ``ROUTING key``, ``(notes)``."""
        spec = self.finder
        if spec.begin == "unknown":
            return f"({self.notes.lower()})"
        where = f"arg {spec.index}" if spec.begin == "index" else spec.keyword.decode() + " "
        if spec.find == "keynum":
            return where + "n key…"
        key = "key" if spec.begin == "keyword" else ""
        return where + key + ("…" if spec.lastkey < 0 else f"..{spec.index + spec.lastkey}" if spec.lastkey else "")

    def reply(self) -> dict[str, Any]:
        """The spec as ``COMMAND INFO`` shows it (a map in RESP3, name/value pairs in RESP2)."""
        head: dict[str, Any] = {"notes": self.notes} if self.notes else {}
        return {**head, "flags": SetOf([Status(flag) for flag in self.flags]),
                "begin_search": self._begin(), "find_keys": self._find()}

    def _begin(self) -> dict[str, Any]:
        spec = self.finder
        if spec.begin == "index":
            return {"type": "index", "spec": {"index": spec.index}}
        if spec.begin == "keyword":
            return {"type": "keyword", "spec": {"keyword": spec.keyword.decode(), "startfrom": spec.index}}
        return {"type": "unknown", "spec": {}}

    def _find(self) -> dict[str, Any]:
        spec = self.finder
        if spec.find == "range":
            return {"type": "range", "spec": {"lastkey": spec.lastkey, "keystep": spec.keystep, "limit": spec.limit}}
        if spec.find == "keynum":
            return {"type": "keynum", "spec": {"keynumidx": spec.keynumidx, "firstkey": spec.firstkey,
                                               "keystep": spec.keystep}}
        return {"type": "unknown", "spec": {}}


def key_at(index: int, flags: tuple[str, ...], *, lastkey: int = 0) -> KeySpecRow:
    """Keys at a fixed position: ``index`` up to ``index + lastkey`` (``lastkey`` -1: to the end)."""
    return KeySpecRow(flags, KeySpec("index", index, find="range", lastkey=lastkey))


def keys_after(keyword: bytes, startfrom: int, flags: tuple[str, ...], *, lastkey: int | None = None) -> KeySpecRow:
    """Keys after ``keyword`` (searched from ``startfrom``): a count and that many keys, or (``lastkey`` given)
    a range: 0 the one argument after it, -1 every argument up to the end."""
    if lastkey is None:
        return KeySpecRow(flags, KeySpec("keyword", startfrom, keyword=keyword, find="keynum"))
    return KeySpecRow(flags, KeySpec("keyword", startfrom, keyword=keyword, find="range", lastkey=lastkey))


def unknown_keys(flags: tuple[str, ...], notes: str) -> KeySpecRow:
    """Keys no begin/find rule can locate; the command's own key finder (COMMAND GETKEYS) knows them."""
    return KeySpecRow(flags, KeySpec("unknown", find="unknown"), notes)
