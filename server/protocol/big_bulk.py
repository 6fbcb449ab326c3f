"""A big bulk argument received in place: the bytes object it becomes is filled as the bytes arrive.

A 602 KB tensor used to be copied twice in our process before any command saw it: the event loop copies each read
into a new ``bytes``, and the parts were joined at the end. Here the argument's final ``bytes`` is made first, at
its full size, and every later read lands in it (``free`` is handed to the event loop as the read buffer:
``server/frontend/bulk_reader.py``). Only the part that came in the read that announced the bulk is copied.

``io.BytesIO`` is the way to a writable ``bytes``: ``getbuffer`` is a writable view of the very bytes object that
``getvalue`` then hands out without a copy (CPython 3.11 to 3.13), once the view is released. Were ``getvalue`` to
copy, the result would be the same bytes, one copy slower.

    bulk = BigBulk(first_part, size)     # first_part: what of it the announcing read held
    bulk.take(data)  /  bulk.free() then bulk.received(n)
    if bulk.complete(): arg = bulk.value()
    else, when its client is gone: bulk.discard()
"""

from __future__ import annotations

import io


class BigBulk:
    """One bulk of ``size`` bytes being received; ``filled`` of them are there."""

    __slots__ = ("_file", "_handed", "_view", "filled", "size")

    def __init__(self, first_part: bytes | bytearray | memoryview, size: int) -> None:
        self._file = io.BytesIO()
        self._file.write(first_part)
        self.filled = len(first_part)
        self.size = size
        if self.filled < size:
            self._file.seek(size - 1)
            self._file.write(b"\0")  # the bytes object at its full size (the gap zero-filled once)
        self._view = self._file.getbuffer()
        self._handed: memoryview | None = None  # the last view ``free`` handed out, let go with ``_view``

    def complete(self) -> bool:
        return self.filled >= self.size

    def take(self, data: bytes | memoryview) -> int:
        """Copy what this bulk still needs of ``data`` into it; how many bytes that was."""
        count = min(len(data), self.size - self.filled)
        self._view[self.filled : self.filled + count] = data[:count]
        self.filled += count
        return count

    def free(self) -> memoryview:
        """Where the next bytes of the bulk go: a read straight into it (``received`` then counts them)."""
        self._handed = self._view[self.filled :]
        return self._handed

    def received(self, count: int) -> None:
        self.filled += count

    def discard(self) -> None:
        """The bulk will never complete (its client is gone): the view is let go now. Left to the garbage
        collector, the connection's cycle would finalize the BytesIO while its view still exists, and
        ``close`` there raises BufferError (printed as an ignored exception). A view handed out for a read
        that failed may sit in that cycle too (in the failed read's traceback): it is let go as well."""
        self._release_views()

    def value(self) -> bytes:
        """The argument, once complete: the bytes object the reads filled, not a copy of it."""
        self._release_views()
        return self._file.getvalue()

    def _release_views(self) -> None:
        handed, self._handed = self._handed, None
        if handed is not None:
            try:
                handed.release()
            except BufferError:  # still held for a read: it lets go when the read ends
                pass
        self._view.release()
