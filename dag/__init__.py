"""DAG engine: parsing, key renaming, run-infos, per-device queues and workers."""
