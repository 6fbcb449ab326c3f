"""Pure parsers of the script commands, deprecated SCRIPTSET/SCRIPTRUN included (no store access).

Checks run in RedisAI 1.2.7's order; the first failing check wins. Where RedisAI interleaves a keyspace
lookup (SCRIPTEXECUTE/SCRIPTRUN look the script up between the arity check and the rest), the caller does
the lookup between ``check_scriptexecute_arity``/``check_scriptrun_arity`` and ``parse_scriptexecute``/
``parse_scriptrun``.

The DAG engine reuses the execute parsers for its ops (each takes the op's own argv, op name first):

* ``|> AI.SCRIPTEXECUTE …`` → ``parse_scriptexecute(argv, standalone=False)`` (inside a DAG the first scope
  may be any of KEYS/INPUTS/ARGS/OUTPUTS, and nothing at all is fine);
* ``|> AI.SCRIPTRUN …`` → ``parse_scriptrun(argv)``.

Both return a ``ScriptExecuteRequest``; a DAG answers ``ERR TIMEOUT not allowed within a DAG command`` when
its ``timeout_ms`` is not None (RedisAI checks that after the whole op parsed, so a bad TIMEOUT value is
``ERR Invalid value for TIMEOUT`` first).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends import errors as msgs
from backends.device import Device, parse_device_lenient
from backends.errors import AIError, parse_strict_int, wrong_arity
from dag.parse import parse_timeout
from server.commands.args import ArgCursor, final_timeout, parse_ac_int


@dataclass(frozen=True, slots=True)
class ScriptStoreRequest:
    """AI.SCRIPTSTORE / AI.SCRIPTSET, parsed (``entry_points`` is empty for SCRIPTSET)."""

    key: bytes
    device: Device
    tag: bytes
    entry_points: tuple[str, ...]
    source: bytes


@dataclass(frozen=True, slots=True)
class ScriptExecuteRequest:
    """AI.SCRIPTEXECUTE / AI.SCRIPTRUN (or the DAG op of either), parsed.

    ``keys`` and ``args`` are handed to entry-point functions as ``List[str]``; ``inputs`` are tensor keys
    (or DAG names), ``outputs`` the keys (or names) the flattened results go to. SCRIPTRUN has no KEYS/ARGS.
    """

    key: bytes
    function: str
    keys: tuple[bytes, ...]
    inputs: tuple[bytes, ...]
    args: tuple[bytes, ...]
    outputs: tuple[bytes, ...]
    timeout_ms: int | None


def _text(raw: bytes) -> str:
    return raw.decode(errors="replace")


def _c_source(raw: bytes) -> bytes:
    """RedisAI keeps the SOURCE as a C string: whatever follows an embedded NUL is lost (and not stored)."""
    return raw.split(b"\0", 1)[0]


def parse_script_device(raw: bytes) -> Device:
    """The torch backend's device rule for scripts: anything starting with ``CPU`` (``CPUxyz`` is a CPU,
    as in RedisAI), ``GPU`` or ``GPU:<n>``; else ``ERR unsupported device``."""
    upper = raw.upper()
    if not (upper.startswith(b"CPU") or upper == b"GPU" or upper.startswith(b"GPU:")):
        raise AIError(msgs.UNSUPPORTED_DEVICE_MSG)
    return parse_device_lenient(raw)


def parse_scriptstore(argv: list[bytes]) -> ScriptStoreRequest:
    """AI.SCRIPTSTORE key device [TAG tag] ENTRY_POINTS n fn... SOURCE src   (arguments after src are ignored)"""
    if len(argv) < 8:
        raise wrong_arity(_text(argv[0]))
    cursor = ArgCursor(argv, 3)
    tag = cursor.next() if cursor.match(b"TAG") and cursor.left else b""
    if not cursor.match(b"ENTRY_POINTS"):
        raise AIError(msgs.SCRIPT_MISSING_ENTRY_POINTS_MSG)
    count = parse_ac_int(cursor.next()) if cursor.left else None
    if count is None:
        raise AIError(msgs.SCRIPT_ENTRY_POINTS_COUNT_MSG)
    if count < 0 or cursor.left < count:  # a negative count reads every token in C, then runs out
        raise AIError(msgs.SCRIPT_MISSING_ENTRY_POINTS_MSG)
    names = tuple(_text(name) for name in cursor.take(count))
    if not (cursor.match(b"SOURCE") and cursor.left):
        raise AIError(msgs.SCRIPT_MISSING_SOURCE_MSG)
    source = _c_source(cursor.next())
    return ScriptStoreRequest(argv[1], parse_script_device(argv[2]), tag, names, source)


def parse_scriptset(argv: list[bytes]) -> ScriptStoreRequest:
    """AI.SCRIPTSET key device [TAG tag] SOURCE src   (deprecated: functions use the positional convention)"""
    if len(argv) not in (5, 7):
        raise wrong_arity(_text(argv[0]))
    cursor = ArgCursor(argv, 3)
    tag = cursor.next() if cursor.match(b"TAG") and cursor.left else b""
    if not (cursor.match(b"SOURCE") and cursor.left):
        raise AIError(msgs.SCRIPT_MISSING_SOURCE_MSG)
    source = _c_source(cursor.next())
    return ScriptStoreRequest(argv[1], parse_script_device(argv[2]), tag, (), source)


def parse_scriptget_flags(argv: list[bytes]) -> tuple[bool, bool]:
    """AI.SCRIPTGET key [META] [SOURCE] → (meta, source); unknown tokens are ignored, as 1.2.7 does."""
    if not 2 <= len(argv) <= 4:
        raise wrong_arity(_text(argv[0]))
    flags = {a.upper() for a in argv[2:]}
    meta, source = b"META" in flags, b"SOURCE" in flags
    if not meta and not source:
        return True, True
    return meta, source


# --- AI.SCRIPTEXECUTE ---------------------------------------------------------------------------------------------

_COUNT_MESSAGES = {
    b"INPUTS": msgs.SCRIPTEXECUTE_INPUTS_COUNT_MSG,
    b"ARGS": msgs.SCRIPTEXECUTE_ARGS_COUNT_MSG,
    b"OUTPUTS": msgs.SCRIPTEXECUTE_OUTPUTS_COUNT_MSG,
}


def check_scriptexecute_arity(argv: list[bytes]) -> None:
    """The hard-coded arity text (always upper case), checked before the script lookup."""
    if len(argv) < 3:
        raise AIError(msgs.SCRIPTEXECUTE_ARITY_MSG)


def _keys_scope(cursor: ArgCursor) -> tuple[bytes, ...]:
    """``KEYS n key...`` (cursor after KEYS): RedisAI validates the slice from the KEYS token to the end."""
    if 1 + cursor.left < 3:
        raise AIError(msgs.KEYS_MISSING_ARGS_MSG)
    count = parse_strict_int(cursor.next())
    if count is None or count <= 0:
        raise AIError(msgs.KEYS_INVALID_COUNT_MSG)
    if cursor.left < count:
        raise AIError(msgs.KEYS_COUNT_MISMATCH_MSG)
    return tuple(cursor.take(count))


def _counted_scope(cursor: ArgCursor, scope: bytes) -> tuple[bytes, ...]:
    """``INPUTS|ARGS|OUTPUTS n item...`` (cursor after the keyword); a negative count reads as 0, as in C."""
    if not cursor.left:
        raise AIError(msgs.SCRIPTEXECUTE_MISSING_COUNT_MSG)
    count = parse_strict_int(cursor.next())
    if count is None:
        raise AIError(_COUNT_MESSAGES[scope])
    count = max(count, 0)
    if cursor.left < count:
        raise AIError(msgs.SCRIPTEXECUTE_SCOPE_MISMATCH_FMT.format(scope=scope.decode().lower()))
    return tuple(cursor.take(count))


def parse_scriptexecute(argv: list[bytes], *, standalone: bool = True) -> ScriptExecuteRequest:
    """AI.SCRIPTEXECUTE key function [KEYS n key...] [INPUTS n key...] [ARGS n arg...] [OUTPUTS m key...]
    [TIMEOUT ms]

    Scopes in any order, each at most once; standalone, the first must be KEYS or INPUTS (also when nothing
    follows the function, where RedisAI reads past its arguments). ``standalone=False`` is the DAG op's rule.
    """
    check_scriptexecute_arity(argv)
    cursor = ArgCursor(argv, 3)
    first = (cursor.peek() or b"").upper()
    if standalone and first not in (b"KEYS", b"INPUTS"):
        raise AIError(msgs.SCRIPTEXECUTE_FIRST_SCOPE_MSG)
    scopes: dict[bytes, tuple[bytes, ...]] = {}
    timeout: int | None = None
    while cursor.left:
        token = cursor.next()
        keyword = token.upper()
        if keyword == b"TIMEOUT":
            timeout = final_timeout(cursor, msgs.SCRIPTEXECUTE_NO_TIMEOUT_VALUE_MSG, msgs.SCRIPTEXECUTE_TRAILING_MSG)
            break
        if keyword not in (b"KEYS", b"INPUTS", b"ARGS", b"OUTPUTS"):
            raise AIError(msgs.SCRIPTEXECUTE_UNEXPECTED_FMT.format(arg=_text(token)))
        if keyword in scopes:
            raise AIError(msgs.SCRIPTEXECUTE_DUPLICATE_SCOPE_FMT.format(scope=keyword.decode()))
        scopes[keyword] = _keys_scope(cursor) if keyword == b"KEYS" else _counted_scope(cursor, keyword)
    return ScriptExecuteRequest(argv[1], _text(argv[2]), scopes.get(b"KEYS", ()), scopes.get(b"INPUTS", ()),
                                scopes.get(b"ARGS", ()), scopes.get(b"OUTPUTS", ()), timeout)


# --- AI.SCRIPTRUN (deprecated) ------------------------------------------------------------------------------------


def check_scriptrun_arity(argv: list[bytes]) -> None:
    """The hard-coded arity text (always upper case), checked before the script lookup."""
    if len(argv) < 3:
        raise AIError(msgs.SCRIPTRUN_ARITY_MSG)


@dataclass(slots=True)
class _RunScan:
    """Where AI.SCRIPTRUN's token scan stands: before INPUTS/OUTPUTS, in one of them, and what it saw."""

    section: bytes = b""  # b"", b"INPUTS" or b"OUTPUTS"
    inputs_done: bool = False
    variadic: bool = False
    timeout: int | None = None

    def keyword(self, keyword: bytes) -> None:
        if keyword == b"INPUTS":
            if self.inputs_done:
                raise AIError(msgs.SCRIPTRUN_INPUTS_SECTION_MSG)
            if self.section == b"INPUTS":
                raise AIError(msgs.SCRIPTRUN_INPUTS_KEYWORD_MSG)
        elif self.section == b"OUTPUTS":
            raise AIError(msgs.SCRIPTRUN_OUTPUTS_KEYWORD_MSG)
        else:
            self.inputs_done = True
        self.section = keyword

    def dollar(self) -> None:
        if self.section != b"INPUTS":
            raise AIError(msgs.SCRIPTRUN_VARIADIC_OUTSIDE_MSG)
        if self.variadic:
            raise AIError(msgs.SCRIPTRUN_VARIADIC_TWICE_MSG)
        self.variadic = True

    def set_timeout(self, raw: bytes | None) -> None:
        if self.timeout is not None:
            raise AIError(msgs.SCRIPTRUN_TIMEOUT_TWICE_MSG)
        self.timeout = parse_timeout(raw, msgs.INVALID_TIMEOUT_MSG)  # a trailing TIMEOUT reads past argv in C


def parse_scriptrun(argv: list[bytes]) -> ScriptExecuteRequest:
    """AI.SCRIPTRUN key function [TIMEOUT ms] [INPUTS key... [$ key...]] [OUTPUTS key...]   (deprecated)

    1.2.7's loose scan: TIMEOUT anywhere, INPUTS optional, ``$`` checked and otherwise ignored, as RedisAI 1.2
    does (the function's signature decides how tensors bind).
    """
    check_scriptrun_arity(argv)
    scan = _RunScan()
    inputs: list[bytes] = []
    outputs: list[bytes] = []
    cursor = ArgCursor(argv, 3)
    while cursor.left:
        token = cursor.next()
        keyword = token.upper()
        if keyword == b"TIMEOUT":
            scan.set_timeout(cursor.next() if cursor.left else None)
        elif keyword in (b"INPUTS", b"OUTPUTS"):
            scan.keyword(keyword)
        elif token == b"$":
            scan.dollar()
        elif scan.section == b"INPUTS":
            inputs.append(token)
        elif scan.section == b"OUTPUTS":
            outputs.append(token)
        else:
            raise AIError(msgs.SCRIPTRUN_UNRECOGNIZED_MSG)
    return ScriptExecuteRequest(argv[1], _text(argv[2]), (), tuple(inputs), (), tuple(outputs), scan.timeout)
