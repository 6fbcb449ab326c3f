"""The read-run-verify loop every run goes through (AI.MODELEXECUTE, AI.SCRIPTEXECUTE, AI.DAGEXECUTE,
AI.GRAPHEXECUTE), written once.

    return await attempted(lambda tried: one_try(client, argv, tried))

A try reads what the run needs (from the coherent cache, and the stamped tensor copies, when ``tried`` allows
it), runs, and writes its outputs with the checks the cache calls for. When what it read turns out to have
changed underneath, it raises ``TryAgain`` with the next attempt, which ``Attempt`` decides:

* ``after_load_change``: the object was stored again between its metadata and its payload
  (``ChangedWhileLoading``): both are read again, ``LOAD_TRIES`` times in all, from the store itself;
* ``after_pre_run_error``: an error found before the run on what may be an older version (cached metadata,
  a model stored again meanwhile) is answered only once a read of the store itself finds it too;
* ``after_stale``: the output write found a cached model or input changed (STALEMODEL / STALEINPUT): the
  run is done once more on what the store holds, unchecked, and not counted again in AI.INFO.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, NoReturn, TypeVar

from backends import errors as msgs
from backends.errors import AIError
from server.ai.stored import LOAD_TRIES, ChangedWhileLoading

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Attempt:
    """Which try of a run this is. ``again``: after STALEMODEL / STALEINPUT; ``fresh``: after an error found
    before the run that must be confirmed by the store; ``loads``: the reads so far that found an object stored
    again while it was being loaded."""

    again: bool = False
    fresh: bool = False
    loads: int = 1

    @property
    def from_store(self) -> bool:
        """Read the store itself, not the cache: the run then writes whatever is stored while it runs."""
        return self.again or self.fresh

    def after_load_change(self) -> Attempt | None:
        """Read metadata and payload again (None: ``LOAD_TRIES`` reached, the error is answered)."""
        if self.loads >= LOAD_TRIES:
            return None
        return Attempt(again=self.again, fresh=not self.again, loads=self.loads + 1)

    def after_pre_run_error(self, exc: AIError, doubtful: bool) -> Attempt | None:
        """The next try after ``exc`` came before the run, or None to answer it. ``doubtful``: it may be an
        older version's (found on cached metadata; the caller knows)."""
        if isinstance(exc, ChangedWhileLoading):
            return self.after_load_change()
        if self.again or self.fresh or not doubtful:
            return None
        return Attempt(fresh=True, loads=self.loads)

    def after_stale(self) -> Attempt | None:
        """Run once more on what the store holds (None: this was that run already)."""
        return None if self.again else Attempt(again=True)


FIRST_TRY: Final = Attempt()


class TryAgain(Exception):
    """Raised by a try: run ``attempt`` next (``attempted`` catches it)."""

    def __init__(self, attempt: Attempt) -> None:
        super().__init__(attempt)
        self.attempt = attempt


def again_or_raise(exc: AIError, following: Attempt | None) -> NoReturn:
    """``TryAgain(following)``, or ``exc`` itself when there is no next try."""
    if following is None:
        raise exc
    raise TryAgain(following)


async def run_again(tried: Attempt) -> NoReturn:
    """A single op's ``again`` (server/ai/single_op.py): the write found a cached model or input changed."""
    following = tried.after_stale()
    if following is None:
        raise AIError(msgs.INTERNAL_MSG.format(detail="a run done again was asked to run again"))
    raise TryAgain(following)


async def attempted(one_try: Callable[[Attempt], Awaitable[T]]) -> T:
    """``one_try(Attempt())``, then each attempt it asks for with ``TryAgain``, until one answers."""
    tried = FIRST_TRY
    while True:
        try:
            return await one_try(tried)
        except TryAgain as retry:
            tried = retry.attempt
