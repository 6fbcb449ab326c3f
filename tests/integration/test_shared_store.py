"""Several servers on one store answer the same: AI.INFO counters and the _MODELSCAN/_SCRIPTSCAN lists live in
the store, and follow its keyspace whoever changes it."""

from __future__ import annotations

import redis

from tests.models import torch_add
from tests.scripts import SCRIPT
from tests.support import wait_until

Clients = tuple[redis.Redis, redis.Redis, redis.Redis]


def _info(conn: redis.Redis, key: str) -> dict[bytes, object]:
    reply = conn.execute_command("AI.INFO", key)
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _scan(conn: redis.Redis, command: str) -> set[bytes]:
    return {entry[0] for entry in conn.execute_command(command)}


def test_a_model_stored_through_one_server_has_its_run_info_on_every_server(shared_store: Clients) -> None:
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "TAG", "v1", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    assert _info(theirs, "m")[b"calls"] == 0 and _info(theirs, "m")[b"tag"] == b"v1"
    for conn in (ours, theirs, theirs):
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    for conn in (ours, theirs):
        info = _info(conn, "m")
        assert (info[b"calls"], info[b"samples"], info[b"errors"]) == (3, 6, 0)
    assert theirs.execute_command("AI.INFO", "m", "RESETSTAT") == b"OK"
    assert _info(ours, "m")[b"calls"] == 0


def test_scans_list_what_any_server_stored_and_follow_the_keyspace(shared_store: Clients) -> None:
    ours, theirs, direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m1", "TORCH", "CPU", "TAG", "t1", "BLOB", torch_add())
    theirs.execute_command("AI.MODELSTORE", "m2", "TORCH", "CPU", "BLOB", torch_add())
    theirs.execute_command("AI.SCRIPTSTORE", "s1", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    for conn in (ours, theirs):
        assert _scan(conn, "AI._MODELSCAN") == {b"m1", b"m2"}
        assert _scan(conn, "AI._SCRIPTSCAN") == {b"s1"}
    assert [b"m1", b"t1"] in ours.execute_command("AI._MODELSCAN")
    direct.delete("m1")
    assert _scan(ours, "AI._MODELSCAN") == {b"m2"}
    direct.rename("m2", "moved")
    assert _scan(theirs, "AI._MODELSCAN") == set()
    direct.flushall()
    assert _scan(ours, "AI._SCRIPTSCAN") == set()


def test_a_run_through_a_renamed_key_counts_nowhere(shared_store: Clients) -> None:
    """RedisAI keeps run info by the stored name: after RENAME neither name answers AI.INFO."""
    ours, _theirs, direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    direct.rename("m", "n")
    ours.execute_command("AI.MODELEXECUTE", "n", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    for name in ("m", "n"):
        try:
            ours.execute_command("AI.INFO", name)
        except redis.ResponseError as exc:
            assert str(exc) == "cannot find run info for key"
        else:
            raise AssertionError(f"AI.INFO {name} answered after RENAME")


def _no_run_info(conn: redis.Redis, key: str) -> bool:
    try:
        conn.execute_command("AI.INFO", key)
    except redis.ResponseError as exc:
        return str(exc) == "cannot find run info for key"
    return False


def _ai_models(conn: redis.Redis) -> int:
    return int(conn.info("ai")["ai_models"])


def test_every_way_a_key_goes_away_is_followed_by_every_server(shared_store: Clients) -> None:
    """FLUSHDB, UNLINK, expiry, a plain SET over the key, RENAME: done straight on the store, behind both servers'
    backs; neither scan lists the key afterwards, AI.INFO answers for neither name, INFO counts nothing."""
    ours, theirs, direct = shared_store
    ways = {
        "unlinked": lambda key: direct.unlink(key),
        "expired": lambda key: direct.pexpire(key, 1),
        "overwritten": lambda key: direct.set(key, "plain"),
        "renamed": lambda key: direct.rename(key, "{" + key + "}elsewhere"),
    }
    for key in ways:
        theirs.execute_command("AI.MODELSTORE", key, "TORCH", "CPU", "BLOB", torch_add())
        ours.execute_command("AI.SCRIPTSTORE", key + "-s", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    for conn in (ours, theirs):
        assert _scan(conn, "AI._MODELSCAN") == {key.encode() for key in ways}
        assert _info(conn, "expired")[b"type"] == b"MODEL" and _ai_models(conn) == len(ways)
    for key, remove in ways.items():
        remove(key)
        remove(key + "-s")
    assert wait_until(lambda: direct.exists("expired", "expired-s") == 0)
    for conn in (ours, theirs):
        assert _scan(conn, "AI._MODELSCAN") == set() and _scan(conn, "AI._SCRIPTSCAN") == set()
        for key in ways:
            assert _no_run_info(conn, key) and _no_run_info(conn, key + "-s")
            assert _no_run_info(conn, "{" + key + "}elsewhere")
        assert _ai_models(conn) == 0
    theirs.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    ours.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    direct.flushdb()
    for conn in (ours, theirs):
        assert _scan(conn, "AI._MODELSCAN") == set() and _scan(conn, "AI._SCRIPTSCAN") == set()
        assert _no_run_info(conn, "m") and _no_run_info(conn, "s")


def test_a_key_that_holds_another_object_now_has_no_old_counters(shared_store: Clients) -> None:
    """A model deleted behind our back (its counters left in the store), then another model renamed onto its
    key: the key holds a model again, but not the one those counters were for. Neither the scan nor AI.INFO
    may present them (RedisAI keeps run info by the stored name: the moved model is known by its old one)."""
    ours, theirs, direct = shared_store
    ours.execute_command("AI.MODELSTORE", "old", "TORCH", "CPU", "TAG", "t-old", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    ours.execute_command("AI.MODELEXECUTE", "old", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    theirs.execute_command("AI.MODELSTORE", "new", "TORCH", "CPU", "TAG", "t-new", "BLOB", torch_add())
    direct.delete("old")
    direct.rename("new", "old")
    for conn in (ours, theirs):
        assert _no_run_info(conn, "old") and _no_run_info(conn, "new")
        assert conn.execute_command("AI._MODELSCAN") == []
        assert _ai_models(conn) == 0
    ours.execute_command("AI.MODELSTORE", "old", "TORCH", "CPU", "BLOB", torch_add())  # stored again: counted anew
    assert _info(theirs, "old")[b"calls"] == 0 and _scan(theirs, "AI._MODELSCAN") == {b"old"}
