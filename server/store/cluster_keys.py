"""Which hash slot a command belongs to on a Redis Cluster: key slots, and the keys of any command.

The keys of a command come from the store's own ``COMMAND`` reply, read once at start: Redis 7+/Valkey key
specifications (begin_search index/keyword, find_keys range/keynum), or the legacy first/last/step triple
where a store gives no specs (Redis 6.2). So a relayed command is routed by the same rules the cluster uses
to check it, and the node still has the last word (MOVED, CROSSSLOT) where a spec is ``unknown``.

Usage: ``finder = KeyFinder.from_command_reply(reply)``; ``finder.slot(argv)`` → a slot, None (no keys), or
``CrossSlot`` raised when the keys hash to several slots.
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from backends import errors as msgs
from backends.errors import AIError

SLOTS: Final = 16384


class CrossSlot(AIError):
    """The keys of one command (or one transaction) hash to more than one slot."""

    def __init__(self) -> None:
        super().__init__(msgs.CROSSSLOT_MSG)


_crc_hqx: Final = binascii.crc_hqx  # a static when compiled: no lookup on the module per key
_OPEN: Final = ord("{")
_CLOSE: Final = ord("}")
MEMO_KEYS: Final = 1024  # keys whose slot SlotTags remembers (then it starts over)
MEMO_KEY_BYTES: Final = 128  # longer keys are not remembered (their CRC dominates; no large key is held)
Remembered = TypeVar("Remembered")


def remember(memo: dict[bytes, Remembered], key: bytes, value: Remembered) -> None:
    """``value`` kept for ``key`` in a bounded memo (``SlotTags.slot``'s, ``Keyspace.stats_key``'s): keys of up
    to ``MEMO_KEY_BYTES`` only, and at most ``MEMO_KEYS`` of them, then the memo starts over."""
    if len(key) <= MEMO_KEY_BYTES:
        if len(memo) >= MEMO_KEYS:
            memo.clear()
        memo[key] = value


def key_slot(key: bytes) -> int:
    """Redis Cluster's slot of ``key``: CRC16 (XMODEM) of its hash tag — the part between the first ``{`` and
    the first ``}`` after it, when not empty — or of the whole key.

    The braces are found by an index loop, which compiles to C: ``key.find(b"{")`` parses a tuple of arguments
    (~1,000 instructions a call under callgrind) and ``b"{" in key`` first tries the operand as an int and
    drops the TypeError (~2,100); a request computes ten or more slots."""
    size = len(key)
    start = 0
    while start < size and key[start] != _OPEN:
        start += 1
    end = start + 1
    while end < size and key[end] != _CLOSE:
        end += 1
    if end < size and end > start + 1:
        key = key[start + 1 : end]
    return _crc_hqx(key, 0) & (SLOTS - 1)


def common_slot(keys: Sequence[bytes]) -> int | None:
    """The one slot of ``keys`` (None when there are none); CrossSlot when they spread over several."""
    if not keys:
        return None
    slot = key_slot(keys[0])
    for key in keys[1:]:
        if key_slot(key) != slot:
            raise CrossSlot()
    return slot


class SlotTags:
    """What a cluster's server knows of slots: a short brace-free hash tag for every slot, so a key derived from
    another (a model's AI.INFO counters) can be put in the same slot whatever the original key looks like
    (``b"{" + tags.of(slot) + b"}" + …``); and the slots of the keys it saw lately (``slot``)."""

    def __init__(self) -> None:
        found: dict[int, bytes] = {}
        number = 0
        while len(found) < SLOTS:
            tag = b"%x" % number
            found.setdefault(_crc_hqx(tag, 0) & (SLOTS - 1), tag)
            number += 1
        self._tags = tuple(found[slot] for slot in range(SLOTS))
        self._slots: dict[bytes, int] = {}

    def of(self, slot: int) -> bytes:
        return self._tags[slot]

    def slot(self, key: bytes) -> int:
        """``key_slot(key)``, remembered for keys of up to ``MEMO_KEY_BYTES``: a run over a cluster asks for
        the slots of its few keys a dozen times (routing, the write's grouping, the cache), each time as a new
        bytes object of the same value. A lookup hashes the key (~1.5 instructions a byte, once per object)
        where ``key_slot`` costs ~700 a call. At most ``MEMO_KEYS`` keys, then the memo starts over."""
        found = self._slots.get(key)
        if found is not None:
            return found
        slot = key_slot(key)
        remember(self._slots, key, slot)
        return slot

    def common(self, keys: Sequence[bytes]) -> int | None:
        """``common_slot(keys)`` by ``slot``: None when there are none; CrossSlot when they spread."""
        if not keys:
            return None
        slot = self.slot(keys[0])
        for i in range(1, len(keys)):
            if self.slot(keys[i]) != slot:
                raise CrossSlot()
        return slot


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One key specification: where the search begins, and how keys are found from there."""

    begin: str  # "index" | "keyword" | "unknown"
    index: int = 0  # begin index, or where a keyword search starts (negative: from the end, backwards)
    keyword: bytes = b""
    find: str = "range"  # "range" | "keynum" | "unknown"
    lastkey: int = 0
    keystep: int = 1
    limit: int = 0
    keynumidx: int = 0
    firstkey: int = 1
    incomplete: bool = False  # flagged INCOMPLETE: e.g. MIGRATE's key, "" when the KEYS form is used

    def keys(self, argv: Sequence[bytes]) -> list[bytes]:
        found = self._keys(argv)
        return [key for key in found if key] if self.incomplete else found

    def _keys(self, argv: Sequence[bytes]) -> list[bytes]:
        start = self._start(argv)
        if start is None or start >= len(argv):
            return []
        if self.find == "range":
            return list(argv[start : self._range_end(argv, start) + 1 : max(self.keystep, 1)])
        if self.find == "keynum":
            try:
                count = int(argv[start + self.keynumidx])
            except (IndexError, ValueError):
                return []
            first = start + self.firstkey
            return list(argv[first : first + max(count, 0) * self.keystep : max(self.keystep, 1)])
        return []

    def _start(self, argv: Sequence[bytes]) -> int | None:
        if self.begin == "index":
            return self.index
        if self.begin != "keyword":
            return None
        if self.index >= 0:
            positions: Sequence[int] = range(self.index, len(argv))
        else:
            positions = range(len(argv) + self.index, 1, -1)  # backwards, never into the command's name or argv[1]
        for position in positions:
            if argv[position].upper() == self.keyword:
                return position + 1
        return None

    def _range_end(self, argv: Sequence[bytes], start: int) -> int:
        if self.lastkey >= 0:
            return start + self.lastkey
        if self.lastkey == -1 and self.limit > 1:
            return start + (len(argv) - start) // self.limit - 1
        return len(argv) + self.lastkey


@dataclass(frozen=True, slots=True)
class CommandKeys:
    """How to find one command's keys. The two shapes nearly every command has — keys at fixed positions
    (GET, HMGET, SET …) and a key count before the keys (EVAL, EVALSHA) — are taken by one slice."""

    specs: tuple[KeySpec, ...]
    _shape: tuple[str, int, int] = field(init=False, default=("", 0, 0))

    def __post_init__(self) -> None:
        if len(self.specs) != 1 or self.specs[0].begin != "index" or self.specs[0].incomplete:
            return
        spec = self.specs[0]
        if spec.find == "range" and spec.lastkey >= 0 and spec.keystep == 1:
            object.__setattr__(self, "_shape", ("range", spec.index, spec.index + spec.lastkey + 1))
        elif spec.find == "keynum" and (spec.keynumidx, spec.firstkey, spec.keystep) == (0, 1, 1):
            object.__setattr__(self, "_shape", ("keynum", spec.index, 0))

    def keys(self, argv: Sequence[bytes]) -> list[bytes]:
        shape, start, end = self._shape
        if shape == "range":
            return list(argv[start:end])
        if shape == "keynum" and start < len(argv) and argv[start].isdigit():
            return list(argv[start + 1 : start + 1 + int(argv[start])])
        return [key for spec in self.specs for key in spec.keys(argv)]


class KeyFinder:
    """The keys of any command the store knows, from its COMMAND reply (see the module docstring)."""

    def __init__(self, commands: dict[bytes, CommandKeys]) -> None:
        self._commands = commands
        self._with_subcommands = frozenset(name.split(b"|")[0] for name in commands if b"|" in name)

    @classmethod
    def from_command_reply(cls, reply: Any) -> KeyFinder:
        commands: dict[bytes, CommandKeys] = {}
        for entry in reply if isinstance(reply, list) else []:
            _add_entry(commands, entry)
        return cls(commands)

    def keys(self, argv: Sequence[bytes]) -> list[bytes]:
        name = argv[0].lower()
        if len(argv) > 1 and name in self._with_subcommands:
            sub = self._commands.get(name + b"|" + argv[1].lower())
            if sub is not None:
                return sub.keys(argv)
        found = self._commands.get(name)
        return found.keys(argv) if found is not None else []

    def slot(self, argv: Sequence[bytes]) -> int | None:
        """The slot ``argv`` must run in (None: it has no keys); CrossSlot when its keys spread."""
        return common_slot(self.keys(argv))


def _add_entry(commands: dict[bytes, CommandKeys], entry: Any) -> None:
    if not isinstance(entry, list) or len(entry) < 6 or not isinstance(entry[0], bytes):
        return
    name = entry[0].lower()
    specs = [_spec(as_map(raw)) for raw in entry[8]] if len(entry) > 8 and isinstance(entry[8], list) else []
    known = [spec for spec in specs if spec.begin != "unknown"] or _legacy(entry[3], entry[4], entry[5])
    commands[name] = CommandKeys(tuple(known))
    if len(entry) > 9 and isinstance(entry[9], list):
        for sub in entry[9]:
            _add_entry(commands, sub)


def _legacy(first: Any, last: Any, step: Any) -> list[KeySpec]:
    """first/last/step of a store without key specs (last -1: up to the end)."""
    if not isinstance(first, int) or first <= 0 or not isinstance(last, int) or not isinstance(step, int):
        return []
    return [KeySpec("index", first, find="range", lastkey=last - first if last >= 0 else last, keystep=step)]


def _spec(raw: dict[bytes, Any]) -> KeySpec:
    begin = as_map(raw.get(b"begin_search", []))
    find = as_map(raw.get(b"find_keys", []))
    begin_spec = as_map(begin.get(b"spec", []))
    find_spec = as_map(find.get(b"spec", []))
    begin_type = _text(begin.get(b"type"))
    keyword = begin_spec.get(b"keyword", b"")
    index = begin_spec.get(b"index", begin_spec.get(b"startfrom", 0))
    return KeySpec(
        begin=begin_type if begin_type in ("index", "keyword") else "unknown",
        index=index if isinstance(index, int) else 0,
        keyword=keyword.upper() if isinstance(keyword, bytes) else b"",
        find=_text(find.get(b"type")) or "unknown",
        lastkey=_int(find_spec.get(b"lastkey"), 0),
        keystep=_int(find_spec.get(b"keystep"), 1),
        limit=_int(find_spec.get(b"limit"), 0),
        keynumidx=_int(find_spec.get(b"keynumidx"), 0),
        firstkey=_int(find_spec.get(b"firstkey"), 1),
        incomplete=any(flag.lower() == b"incomplete" for flag in raw.get(b"flags", []) if isinstance(flag, bytes)),
    )


def as_map(value: Any) -> dict[bytes, Any]:
    """A RESP3 map, or RESP2's flat list of names and values, as a dict."""
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        return {value[i]: value[i + 1] for i in range(0, len(value) - 1, 2) if isinstance(value[i], bytes)}
    return {}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else ""


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) else default
