"""Per-model cost estimates, held only while the model lives (dag/inline.py's table of CPU µs per run).

Usage: ``table.costs(model)`` (None until ``table.costs_for(model)`` made one) → ``{input size class: µs}``.

A ``weakref.WeakKeyDictionary`` did this before; its ``get`` and ``setdefault`` are interpreted stdlib code
that builds a new weak reference per call, and the inline policy asks twice per run. Here the table is keyed
by the object's id, the entry holds a weak reference to check that the id still names the same object, and
the reference's callback drops the entry when the model is freed.
"""

from __future__ import annotations

import weakref
from typing import Any


class CostTable:
    """object → {size class: µs} (see the module docstring)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[weakref.ref[Any], dict[int, float]]] = {}

    def costs(self, owner: Any) -> dict[int, float] | None:
        """The estimates kept for ``owner``, if any."""
        entry = self._by_id.get(id(owner))
        if entry is None or entry[0]() is not owner:
            return None
        return entry[1]

    def costs_for(self, owner: Any) -> dict[int, float]:
        """The estimates kept for ``owner``, made empty when there are none; TypeError when ``owner`` cannot be
        weakly referenced (such an object is never measured)."""
        found = self.costs(owner)
        if found is not None:
            return found
        ident = id(owner)
        found = {}
        self._by_id[ident] = (weakref.ref(owner, lambda ref: self._drop(ident, ref)), found)
        return found

    def _drop(self, ident: int, ref: weakref.ref[Any]) -> None:
        entry = self._by_id.get(ident)
        if entry is not None and entry[0] is ref:  # not a newer object that was given the same id
            del self._by_id[ident]

    def __len__(self) -> int:
        return len(self._by_id)
