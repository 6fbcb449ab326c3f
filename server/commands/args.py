"""Argument helpers shared by the AI command parsers: RedisAI's three number parsers and a cursor.

RedisAI uses three, chosen per argument: strict-int (Redis ``string2ll``: an optional ``-``, digits, no
leading zeros, int64), ac-uint/ac-int (rmutil ArgsCursor: strict-int, else an integral double such as ``2.0``
or ``1e3``; ac-uint refuses negatives) and strict-double (Redis ``getDoubleFromObject``: the whole string,
``inf`` accepted, ``nan`` refused).
"""

from __future__ import annotations

import math
from typing import Final

from backends.errors import AIError, parse_strict_int
from dag.parse import parse_timeout

LLONG_MAX: Final = 2**63 - 1


def parse_ac_int(raw: bytes) -> int | None:
    value = parse_strict_int(raw)
    if value is not None:
        return value
    try:
        number = float(raw)
    except ValueError:
        return None
    if not math.isfinite(number) or number != int(number) or raw.strip() != raw:
        return None
    return int(number)


def parse_ac_uint(raw: bytes) -> int | None:
    value = parse_ac_int(raw)
    if value is None or value < 0 or value > LLONG_MAX:
        return None
    return value


class ArgCursor:
    """A read position over a command's arguments (mini-redis ``Parse``, RedisAI ``ArgsCursor``)."""

    def __init__(self, args: list[bytes], start: int = 0) -> None:
        self.args = args
        self.pos = start

    @property
    def left(self) -> int:
        return len(self.args) - self.pos

    def peek(self) -> bytes | None:
        return self.args[self.pos] if self.pos < len(self.args) else None

    def next(self) -> bytes:
        value = self.args[self.pos]
        self.pos += 1
        return value

    def match(self, keyword: bytes) -> bool:
        """Consume the next argument if it is ``keyword`` (case-insensitive)."""
        token = self.peek()
        if token is not None and token.upper() == keyword:
            self.pos += 1
            return True
        return False

    def take(self, count: int) -> list[bytes]:
        values = self.args[self.pos : self.pos + count]
        self.pos += count
        return values

    def rest(self) -> list[bytes]:
        return self.take(self.left)


def final_timeout(cursor: ArgCursor, missing: str, trailing_fmt: str) -> int | None:
    """``TIMEOUT ms`` as a command's last clause (the cursor just after TIMEOUT), shared by MODELEXECUTE and
    SCRIPTEXECUTE: ``missing`` without a value; anything after it is ``trailing_fmt`` (``{arg}``: that token)."""
    value = parse_timeout(cursor.next() if cursor.left else None, missing)
    if cursor.left:
        raise AIError(trailing_fmt.format(arg=cursor.next().decode(errors="replace")))
    return value
