"""The store layer: where every key lives.

* ``process`` / ``embedded``: the default store, a valkey-server child we own on a private unix socket;
* ``redis`` / ``upstream``: any Redis or Valkey behind ``--redis-url`` (and the embedded one, spoken to alike);
* ``keyspace``: the one async interface AI commands use to read and write keys;
* ``atomic``: the check-and-write Lua scripts the store runs in one step.

Nothing here imports from the command handlers or the connection.
"""
