"""The DAG command's header and op split, AI.DAGRUN's included, with RedisAI's checks: pure, no store.

``AI.DAGEXECUTE [LOAD n key...] [PERSIST n key...] [KEYS n key...] [ROUTING key] [TIMEOUT ms] |> op |> op...``

The header clauses may come in any order, each once, all before the first ``|>``. RedisAI reads LOAD keys
from the keyspace while it walks the header, so a missing LOAD key is reported before a header error that
comes after the LOAD clause. To keep this function pure, it stops at the first header error and returns it
(``error``) together with the LOAD keys seen before it; the caller reads those keys first and raises their
errors, then this one. ``KEYS`` is accepted as a routing declaration (as ROUTING; the 1.2 docs list it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from backends import errors as msgs
from backends.errors import AIError, parse_strict_int

OP_SEPARATOR: Final = b"|>"


@dataclass(frozen=True, slots=True)
class DagKind:
    """Which DAG command: its name, whether it is read-only, whether it is the deprecated 1.0 form."""

    name: str
    read_only: bool
    deprecated: bool


DAGEXECUTE: Final = DagKind("AI.DAGEXECUTE", read_only=False, deprecated=False)
DAGEXECUTE_RO: Final = DagKind("AI.DAGEXECUTE_RO", read_only=True, deprecated=False)
DAGRUN: Final = DagKind("AI.DAGRUN", read_only=False, deprecated=True)
DAGRUN_RO: Final = DagKind("AI.DAGRUN_RO", read_only=True, deprecated=True)


class DagHeader:
    """The parsed header and the raw argv of every op (each starting with the op's command name). One a
    request: a plain class, whose ``__init__`` mypyc compiles (a dataclass's runs interpreted)."""

    __slots__ = ("_seen", "error", "keys", "load", "ops", "persist", "routing", "timeout_ms")

    def __init__(self, load: list[bytes] | None = None, ops: list[list[bytes]] | None = None) -> None:
        self.load: list[bytes] = [] if load is None else load
        self.persist: list[bytes] = []
        self.keys: list[bytes] = []
        self.routing: bytes | None = None
        self.timeout_ms: int | None = None
        self.ops: list[list[bytes]] = [] if ops is None else ops
        self.error: AIError | None = None
        self._seen: set[bytes] = set()


def check_arity(argv: list[bytes], kind: DagKind) -> None:
    if kind.deprecated and len(argv) < 4:
        raise AIError(msgs.DAG_WRONG_ARITY_FMT.format(cmd=kind.name))
    if not kind.deprecated and len(argv) < 6:
        raise AIError(msgs.DAG_MISSING_ARGS_FMT.format(cmd=kind.name))


def _counted(argv: list[bytes], pos: int, missing: str, bad_count: str) -> tuple[list[bytes], int]:
    """``KEYWORD n item...`` starting at ``pos``: the items there are, up to n (``|>`` gets no special
    treatment, as in RedisAI), and n. Fewer than n is the caller's mismatch error, after what RedisAI checks
    item by item (a LOAD key's read, a PERSIST name repeated)."""
    if len(argv) - pos < 3:
        raise AIError(missing)
    count = parse_strict_int(argv[pos + 1])
    if count is None or count <= 0:
        raise AIError(bad_count)
    return argv[pos + 2 : pos + 2 + count], count


def _require_all(items: list[bytes], count: int, mismatch: str) -> None:
    if len(items) < count:
        raise AIError(mismatch)


def _load(header: DagHeader, argv: list[bytes], pos: int) -> int:
    """LOAD: the keys there are are kept even when too few follow, so the caller reads them first and a
    missing one is reported before the count mismatch, as RedisAI loads each key before it counts."""
    header.load, count = _counted(argv, pos, msgs.DAG_LOAD_MISSING_ARGS_MSG, msgs.DAG_LOAD_COUNT_MSG)
    _require_all(header.load, count, msgs.DAG_LOAD_MISMATCH_MSG)
    return pos + 2 + count


def _persist(argv: list[bytes], pos: int, kind: DagKind) -> list[bytes]:
    if kind.read_only:
        raise AIError(msgs.DAG_PERSIST_RO_MSG)
    names, count = _counted(argv, pos, msgs.DAG_PERSIST_MISSING_ARGS_MSG, msgs.DAG_PERSIST_COUNT_MSG)
    if len(set(names)) != len(names):  # RedisAI checks each name as it goes: before the count
        raise AIError(msgs.DAG_PERSIST_UNIQUE_MSG)
    _require_all(names, count, msgs.DAG_PERSIST_MISMATCH_MSG)
    return names


def parse_timeout(raw: bytes | None, missing: str, *, zero_means_none: bool = False) -> int | None:
    """TIMEOUT's value in ms, as every AI command reads it (the one copy of the rule): ``missing`` when the
    clause has no value, ``Invalid value for TIMEOUT`` unless it is a strict integer above 0.

    ``zero_means_none``: the DAG header's kept quirk, where 0 and negative values mean no timeout."""
    if raw is None:
        raise AIError(missing)
    value = parse_strict_int(raw)
    if value is None or (value <= 0 and not zero_means_none):
        raise AIError(msgs.INVALID_TIMEOUT_MSG)
    return value if value > 0 else None


def _timeout(argv: list[bytes], pos: int) -> int | None:
    """The header's ``TIMEOUT ms``: 0 and negative values are accepted and mean no timeout (quirk kept)."""
    raw = argv[pos + 1] if pos + 1 < len(argv) else None
    return parse_timeout(raw, msgs.NO_TIMEOUT_VALUE_MSG, zero_means_none=True)


def collect_op(argv: list[bytes], pos: int) -> list[bytes]:
    """The op starting at ``pos``: every argument up to the next ``|>`` (AI.GRAPHSTORE splits its ops so too)."""
    end = pos
    while end < len(argv) and argv[end] != OP_SEPARATOR:
        end += 1
    return argv[pos:end]


def _header_clause(header: DagHeader, argv: list[bytes], pos: int, kind: DagKind) -> int:
    """Parse the clause at ``pos``; return the position after it."""
    word = argv[pos].upper()
    if word in header._seen or header.ops:
        raise AIError(msgs.DAG_UNEXPECTED_ARG_FMT.format(arg=argv[pos].decode(errors="replace")))
    header._seen.add(word)
    if word == b"LOAD":
        return _load(header, argv, pos)
    if word == b"PERSIST":
        header.persist = _persist(argv, pos, kind)
        return pos + 2 + len(header.persist)
    if word == b"KEYS":
        header.keys, count = _counted(argv, pos, msgs.DAG_KEYS_MISSING_ARGS_MSG, msgs.DAG_KEYS_COUNT_MSG)
        _require_all(header.keys, count, msgs.DAG_KEYS_MISMATCH_MSG)
        return pos + 2 + count
    if word == b"ROUTING":
        if pos + 1 >= len(argv):
            raise AIError(msgs.DAG_ROUTING_MISSING_MSG)
        header.routing = argv[pos + 1]
        return pos + 2
    header.timeout_ms = _timeout(argv, pos)
    return pos + 2


_CLAUSES: Final = (b"LOAD", b"PERSIST", b"KEYS", b"ROUTING", b"TIMEOUT")


def parse_header(argv: list[bytes], kind: DagKind) -> DagHeader:
    """Walk the header and split the ops. Arity errors raise; any later error is returned in ``error``."""
    check_arity(argv, kind)
    header = DagHeader()
    pos = 1
    try:
        while pos < len(argv):
            if argv[pos] == OP_SEPARATOR and pos < len(argv) - 1:
                header.ops.append(collect_op(argv, pos + 1))
                pos += 1 + len(header.ops[-1])
            elif argv[pos].upper() in _CLAUSES:
                pos = _header_clause(header, argv, pos, kind)
            else:
                raise AIError(msgs.DAG_UNEXPECTED_ARG_FMT.format(arg=argv[pos].decode(errors="replace")))
        if not kind.deprecated and not (header.load or header.persist or header.routing is not None
                                       or header.keys):
            raise AIError(msgs.DAG_NEEDS_KEYWORD_MSG)
        if not header.ops:
            raise AIError(msgs.DAG_EMPTY_MSG)
    except AIError as exc:
        header.error = exc
    return header


def op_name(op_argv: list[bytes]) -> bytes:
    return op_argv[0].upper() if op_argv else b""
