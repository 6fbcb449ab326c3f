"""The read-run-verify loop's rules (server/ai/attempts.py), one place for every run command."""

from __future__ import annotations

import asyncio

import pytest

from backends.errors import AIError
from server.ai.attempts import FIRST_TRY, Attempt, TryAgain, again_or_raise, attempted, run_again
from server.ai.stored import LOAD_TRIES, ChangedWhileLoading

CHANGED = ChangedWhileLoading("ERR model key changed while the model was being loaded, try again")
MISSING = AIError("ERR model key is empty")


def test_an_object_stored_again_while_loading_is_read_again_from_the_store_load_tries_in_all() -> None:
    tried, chain = FIRST_TRY, []
    while (following := tried.after_pre_run_error(CHANGED, doubtful=False)) is not None:
        chain.append(following)
        tried = following
    assert chain == [Attempt(fresh=True, loads=n) for n in range(2, LOAD_TRIES + 1)]
    assert Attempt(again=True).after_load_change() == Attempt(again=True, loads=2)  # a run done again stays so


def test_an_error_before_the_run_is_confirmed_by_the_store_once() -> None:
    assert FIRST_TRY.after_pre_run_error(MISSING, doubtful=True) == Attempt(fresh=True)
    assert FIRST_TRY.after_pre_run_error(MISSING, doubtful=False) is None  # e.g. the store is unavailable
    assert Attempt(fresh=True).after_pre_run_error(MISSING, doubtful=True) is None
    assert Attempt(again=True).after_pre_run_error(MISSING, doubtful=True) is None


def test_a_stale_write_runs_once_more_on_what_the_store_holds() -> None:
    assert FIRST_TRY.after_stale() == Attempt(again=True) and Attempt(again=True).from_store
    assert Attempt(again=True).after_stale() is None
    assert not FIRST_TRY.from_store and Attempt(fresh=True).from_store


def test_attempted_runs_each_try_asked_for_until_one_answers() -> None:
    seen: list[Attempt] = []

    async def one_try(tried: Attempt) -> str:
        seen.append(tried)
        if tried == FIRST_TRY:
            again_or_raise(MISSING, tried.after_pre_run_error(MISSING, doubtful=True))
        if not tried.again:
            await run_again(tried)
        return "answered"

    assert asyncio.run(attempted(one_try)) == "answered"
    assert seen == [FIRST_TRY, Attempt(fresh=True), Attempt(again=True)]


def test_the_last_try_answers_its_error() -> None:
    async def always_changed(tried: Attempt) -> str:
        again_or_raise(CHANGED, tried.after_load_change())

    with pytest.raises(ChangedWhileLoading):
        asyncio.run(attempted(always_changed))
    with pytest.raises(TryAgain):
        again_or_raise(MISSING, Attempt(fresh=True))
