"""DAG engine: parsing, key renaming, run-infos, per-device queues and workers."""

import backends  # noqa: F401  (first: it installs the REDISAI_PURE_PYTHON finder before any compiled module loads)
