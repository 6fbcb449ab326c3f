"""What an invalidation push does to a database's cache entries (server/store/cache.py): a tensor's entry is
dropped; an object's metadata entry is kept, unconfirmed, and serves only checked reads (a run, whose write
checks the model's digest) for CONFIRM_WITHIN_S after its push, then none until it is read again."""

from __future__ import annotations

from server.store.cache import CONFIRM_WITHIN_S, Budget, DatabaseCache
from server.store.upstream import StoreAddress

META = (b"HMGET", b"m", b"__redisai__", b"digest")
TENSOR = (b"GET", b"t")


def _cache_with_both() -> DatabaseCache:
    """A database cache holding a model's metadata and a tensor (no store is reached: nothing is read)."""
    cache = DatabaseCache(StoreAddress(), 0, Budget(1 << 20))
    cache.remember(META, b"m", [b"model", b"d1"], 100)
    cache.remember(TENSOR, b"t", b"value", 100)
    return cache


def test_a_push_drops_a_tensor_and_leaves_metadata_to_checked_reads_only() -> None:
    cache = _cache_with_both()
    assert cache.holds(META) and cache.holds(TENSOR) and cache.confirmed(META)
    cache._invalidate([b"m", b"t"])
    assert not cache.holds(TENSOR, checked=True)
    assert not cache.confirmed(META)
    assert not cache.holds(META) and cache.lookup(META) == (False, None)  # a reply to a client: read again
    assert cache.holds(META, checked=True) and cache.lookup(META, checked=True) == (True, [b"model", b"d1"])


def test_an_unconfirmed_entry_serves_checked_reads_for_a_while_only() -> None:
    cache = _cache_with_both()
    cache._invalidate([b"m"])
    cache._unconfirmed[META] -= CONFIRM_WITHIN_S  # its push came that long ago
    assert not cache.holds(META, checked=True) and cache.lookup(META, checked=True) == (False, None)
    cache.reading_again(META)  # the first run after that reads it again: the others use it meanwhile
    assert cache.holds(META, checked=True) and not cache.holds(META) and not cache.confirmed(META)


def test_a_fresh_read_confirms_and_a_write_of_ours_or_a_flush_drops_it() -> None:
    cache = _cache_with_both()
    cache._invalidate([b"m"])
    cache.remember(META, b"m", [b"model", b"d2"], 100)  # read again over the tracking connection
    assert cache.confirmed(META) and cache.lookup(META) == (True, [b"model", b"d2"])
    cache._invalidate([b"m"])
    cache.forget(b"m")  # a write this server sends
    assert not cache.holds(META, checked=True) and cache.confirmed(META)
    cache.remember(META, b"m", [b"model", b"d2"], 100)
    cache._invalidate([b"m"])
    cache._invalidate(None)  # FLUSHALL / FLUSHDB
    assert not cache.holds(META, checked=True) and cache.confirmed(META)
