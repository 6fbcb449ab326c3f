"""What a script step does on its worker: call one function of a compiled script.

Used by a single AI.SCRIPTEXECUTE / AI.SCRIPTRUN (a one-op run) and by the DAG engine's script ops alike. The
compiled script and the host come from the server layer (server/commands/script.py: ``load_script`` and
``LoopScriptHost``); this module imports neither torch nor the server, so ``import server`` stays light.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backends.script_backend import CompiledScript, ScriptHost


class ScriptWork:
    """Runs ``function`` of ``script`` on its inputs (a ``Work`` for a script step).

    ``entry_point``: the function is one of the script's ENTRY_POINTS (called as ``fn(tensors, keys, args)``);
    else it is called with the legacy positional convention and ``keys``/``args`` are ignored. ``n_outputs``:
    how many tensors the result must flatten to (0: the result is ignored). ``host``: what the script's
    ``redis.execute`` and ``redisAI.model_execute`` reach; ``CompiledScript.run`` binds it to the worker thread
    (a ``threading.local``, see backends/script_backend.py) for exactly the duration of the call.
    """

    def __init__(self, script: CompiledScript, function: str, *, entry_point: bool, n_outputs: int,
                 keys: Sequence[bytes] = (), args: Sequence[bytes] = (), host: ScriptHost | None = None) -> None:
        self.script = script
        self.function = function
        self.entry_point = entry_point
        self.n_outputs = n_outputs
        self.keys = tuple(keys)
        self.args = tuple(args)
        self.host = host
        self.stop = threading.Event()

    def __call__(self, inputs: list[Any]) -> list[Any]:
        return self.script.run(self.function, inputs, entry_point=self.entry_point, keys=self.keys, args=self.args,
                               n_outputs=self.n_outputs, host=self.host, stop=self.stop)

    def interrupt(self) -> None:
        """The run was given up (dag/watchdog.py): the script's next redis/redisAI call raises, ending it."""
        self.stop.set()
