"""``COMMAND DOCS`` arguments, read from a row's usage line, so the reference and the reply cannot disagree.

The usage grammar is the one docs/commands.md shows: UPPER-CASE words are tokens, lower-case words are values
(``key`` a key, ``n``/``m``/``t``/``ms``/``dim``/``bytes`` integers, anything else a string), ``[...]`` is
optional, ``(a | b)`` one of, ``a | b`` inside brackets one of, ``x ...`` or ``x [x ...]`` repeats ``x``. A
token takes the values right after it: none (a pure token), one (a value with a token), or several (a block).
The result has Redis 7's shape: ``name``, ``type``, ``key_spec_index``, ``token``, ``flags``, ``arguments``.

Usage: ``arguments("AI.TENSORGET key [META] [BLOB | VALUES]", key_specs)``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from server.commands.keyspecs import KeySpecRow
from server.protocol.reply import SetOf, Status

_WORDS = re.compile(r"\|>|[\[\]()|]|[^\s\[\]()|]+")
_INTEGERS = frozenset({"n", "m", "t", "ms", "dim", "bytes"})
_CLOSERS = frozenset({"]", ")", "|"})
_COUNT_NAMES = {"n": "count", "m": "count"}
_PLACEHOLDERS = frozenset({"count", "ms", "t", "bytes"})


@dataclass(slots=True)
class _Arg:
    """One argument while it is built; ``words`` is its source text, to recognise ``x [x ...]``."""

    name: str
    type: str
    token: str = ""
    flags: list[str] = field(default_factory=list)
    arguments: list[_Arg] = field(default_factory=list)
    words: list[str] = field(default_factory=list)

    def reply(self, specs: Sequence[KeySpecRow], context: str) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.type == "key":
            index = _spec_index(specs, self.token or context)
            if index is not None:
                out["key_spec_index"] = index
        if self.token:
            out["token"] = self.token
        if self.flags:
            out["flags"] = SetOf([Status(flag) for flag in self.flags])
        if self.arguments:
            out["arguments"] = [arg.reply(specs, self.token or context) for arg in self.arguments]
        return out


def _spec_index(specs: Sequence[KeySpecRow], token: str) -> int | None:
    """The spec that finds a key written after ``token``: the spec searching for that keyword, else an
    ``unknown`` spec whose notes name the token; with no token, the first fixed-position spec."""
    if not token:
        return next((i for i, spec in enumerate(specs) if spec.finder.begin == "index"), None)
    keyword = next((i for i, spec in enumerate(specs) if spec.finder.keyword.decode() == token), None)
    if keyword is not None:
        return keyword
    return next((i for i, spec in enumerate(specs)
                 if spec.finder.begin == "unknown" and token in spec.notes.replace(",", " ").split()), None)


def _is_token(word: str) -> bool:
    return word in ("|>", "$") or (word.upper() == word and any(ch.isalpha() for ch in word))


class _Reader:
    """A recursive-descent reader over the usage's words."""

    def __init__(self, usage: str) -> None:
        self.words = _WORDS.findall(usage)[1:]  # without the command's name
        self.pos = 0

    def peek(self, offset: int = 0) -> str:
        at = self.pos + offset
        return self.words[at] if at < len(self.words) else ""

    def alternatives(self) -> list[list[_Arg]]:
        alts = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            alts.append(self.sequence())
        return alts

    def sequence(self) -> list[_Arg]:
        items: list[_Arg] = []
        while self.peek() and self.peek() not in _CLOSERS:
            if self.peek() == "[" and items and self._repeats(items[-1]):
                items[-1].flags.append("multiple")
                continue
            items.append(self.item())
        return items

    def _repeats(self, last: _Arg) -> bool:
        """Whether ``[x ...]`` follows ``x`` (then skipped: the caller marks ``x`` multiple)."""
        n = len(last.words)
        if self.words[self.pos + 1 : self.pos + 1 + n] == last.words and self.peek(n + 1) == "..." \
                and self.peek(n + 2) == "]":
            self.pos += n + 3
            return True
        return False

    def item(self) -> _Arg:
        start, word = self.pos, self.peek()
        if word in ("[", "("):
            self.pos += 1
            arg = _group(self.alternatives(), optional=word == "[")
            self.pos += 1  # the closing bracket
        elif _is_token(word):
            self.pos += 1
            arg = self._token(word)
        else:
            self.pos += 1
            arg = _value(word)
        if self.peek() == "...":
            self.pos += 1
            arg.flags.append("multiple")
        arg.words = self.words[start : self.pos]
        return arg

    def _token(self, token: str) -> _Arg:
        values: list[_Arg] = []
        while True:
            if self.peek() == "[" and values and self._repeats(values[-1]):
                values[-1].flags.append("multiple")
            elif self.peek() and not _is_token(self.peek()) and self.peek() not in _CLOSERS | {"["}:
                values.append(self.item())
            else:
                break
        if not values:
            return _Arg(token.lower(), "pure-token", token)
        if len(values) == 1:  # a placeholder value (n, ms, t, bytes) is named after its token
            only = values[0]
            name = token.lower() if only.name in _PLACEHOLDERS else only.name
            return _Arg(name, only.type, token, only.flags, only.arguments)
        return _Arg(token.lower(), "block", token, arguments=values)


def _value(word: str) -> _Arg:
    kind = "key" if word == "key" else "integer" if word in _INTEGERS else "string"
    return _Arg(_COUNT_NAMES.get(word, word), kind)


def _group(alts: list[list[_Arg]], *, optional: bool) -> _Arg:
    flags = ["optional"] if optional else []
    if len(alts) > 1:
        choices = [alt[0] if len(alt) == 1 else _Arg(alt[0].name, "block", arguments=alt) for alt in alts]
        return _Arg("_".join(choice.name for choice in choices), "oneof", flags=flags, arguments=choices)
    (only,) = alts
    if len(only) == 1:
        only[0].flags[:0] = flags
        return only[0]
    return _Arg(only[0].name, "block", flags=flags, arguments=only)


def arguments(usage: str, specs: Sequence[KeySpecRow]) -> list[dict[str, Any]]:
    """The usage line's arguments as ``COMMAND DOCS`` lists them."""
    reader = _Reader(usage)
    alts = reader.alternatives()
    args = [_group(alts, optional=False)] if len(alts) > 1 else alts[0]
    return [arg.reply(specs, "") for arg in args]
