"""The AI parts of INFO: ``INFO ai`` (also in ``INFO modules`` and ``INFO everything``) and our lines of
``INFO commandstats``.

``INFO ai`` follows RedisAI's module sections (REDISAI-REFERENCE.md §2.16: ``ai_versions``,
``ai_load_time_configs``, ``ai_backends_info``, ``ai_cpu``, every field prefixed ``ai_``) and adds two of
ours: ``ai_queues`` (devices, queue lengths, worker threads, busy time, executed steps) and ``ai_runs``
(stored models and scripts, runs and errors since start). Runtime versions are reported only for backends
already loaded: INFO never imports torch or onnxruntime.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from server.config import REDISAI_COMPAT_VERSION, VERSION

if TYPE_CHECKING:
    from server.ai.state import AIState
    from server.commands.context import ServerContext

Fields = list[tuple[str, object]]

RDB_ENCODING_VERSION = 4  # RedisAI 1.2.7's; our values are plain strings and hashes (docs/tensor-format.md)
# RedisAI's INFO names of the runtimes (ai_<label>_version).
_RUNTIME_LABELS: Mapping[str, str] = MappingProxyType({"TF": "TensorFlow", "TFLITE": "TensorFlowLite", "TORCH": "Torch",
                                                       "ONNX": "onnxruntime"})


def render(title: str, fields: Fields) -> str:
    return f"# {title}\r\n" + "".join(f"{key}:{value}\r\n" for key, value in fields)


def ai_sections(ctx: ServerContext, stored: tuple[int, int]) -> list[str]:
    """Every ``# ai_*`` section, rendered; ``stored``: the models and scripts in the caller's database."""
    ai = ctx.ai
    return [
        render("ai_versions", [("ai_RedisAI_version", REDISAI_COMPAT_VERSION), ("ai_low_level_API_version", 1),
                               ("ai_rdb_version", RDB_ENCODING_VERSION), ("ai_redisai_server_version", VERSION)]),
        render("ai_git", [("ai_git_sha", f"redisai-server-{VERSION}")]),
        render("ai_load_time_configs", _load_time_configs(ai)),
        render("ai_backends_info", _backends_info(ai)),
        render("ai_cpu", _cpu(ai)),
        render("ai_queues", _queues(ai)),
        render("ai_runs", _runs(ai, stored)),
        render("ai_cache", _cache(ctx)),
    ]


def _load_time_configs(ai: AIState) -> Fields:
    settings = ai.settings
    return [
        ("ai_threads_per_queue", ai.queues.threads_per_queue),
        ("ai_inter_op_parallelism", settings.inter_op_threads),
        ("ai_intra_op_parallelism", settings.intra_op_threads),
        ("ai_model_execution_timeout", settings.execution_timeout_ms),
        ("ai_script_execution_timeout", ai.queues.watchdog.script_limit_ms),
        ("ai_inline_op_us", ai.inline.max_us),
        ("ai_backend_memory_limit", settings.backend_memory_limit),
        ("ai_model_chunk_size", settings.model_chunk_size),
        ("ai_backendspath", _one_line(settings.backends_path)),
    ]


def _one_line(text: str) -> str:
    """A value set by a client (AI.CONFIG BACKENDSPATH) as printable INFO text: no line breaks, no surrogates."""
    raw = text.encode(errors="surrogateescape").decode(errors="replace")
    return raw.replace("\r", " ").replace("\n", " ")


def _backends_info(ai: AIState) -> Fields:
    loaded = ai.backends.loaded()
    fields: Fields = [(f"ai_{_RUNTIME_LABELS.get(name, name)}_version", version) for name, version in loaded.items()]
    fields.append(("ai_backends_loaded", ",".join(loaded)))
    fields.append(("ai_backends_available", ",".join(ai.backends.available())))
    return fields


def _cpu(ai: AIState) -> Fields:
    """RedisAI's ai_cpu fields: the process, its children (the embedded store is one once it has ended and
    been reaped), the main (event-loop) thread — INFO runs on it — and each device worker thread."""
    fields: Fields = []
    for label, who in (("self", resource.RUSAGE_SELF), ("children", resource.RUSAGE_CHILDREN),
                       ("main_thread", resource.RUSAGE_THREAD)):
        usage = resource.getrusage(who)
        fields += [(f"ai_{label}_used_cpu_sys", f"{usage.ru_stime:.6f}"),
                   (f"ai_{label}_used_cpu_user", f"{usage.ru_utime:.6f}")]
    for device, seconds in ai.queues.thread_cpu_seconds():
        fields += [(f"{queue_field_name(device)}_bthread_n{i}_used_cpu_total", f"{cpu:.6f}")
                   for i, cpu in enumerate(seconds, start=1)]
    return fields


def queue_field_name(device: str) -> str:
    """``CPU`` → ``ai_queue_CPU``, ``GPU:0`` → ``ai_queue_GPU_0`` (a ``:`` would split an INFO line)."""
    return "ai_queue_" + _printable(device).replace(":", "_")


def _printable(text: str) -> str:
    """Device names come from clients (SCRIPTSTORE takes any CPU… spelling): no CR/LF or other control
    characters may reach an INFO line, or a client could forge INFO fields."""
    return "".join(ch if ch.isprintable() and ch not in ",=" else "_" for ch in text)


def _queues(ai: AIState) -> Fields:
    queues = list(ai.queues.queues.values())
    threads = {queue.name: ai.queues.threads_for(queue.name) for queue in queues}
    watchdog = ai.queues.watchdog
    fields: Fields = [("ai_devices", ",".join(_printable(q.name) for q in queues)),
                      ("ai_worker_threads", sum(threads.values())),
                      ("ai_workers_abandoned", watchdog.abandoned),  # to ops that overran (dag/watchdog.py)
                      ("ai_workers_stuck", watchdog.stuck)]
    for queue in queues:
        fields.append((queue_field_name(queue.name), f"device={_printable(queue.name)},length={len(queue)},"
                       f"threads={threads[queue.name]},"
                       f"busy_sec={queue.busy_seconds:.6f},executed={queue.executed},"
                       f"batched_requests={queue.batched_requests}"))
    return fields


def _runs(ai: AIState, stored: tuple[int, int]) -> Fields:
    return [
        ("ai_models", stored[0]),
        ("ai_scripts", stored[1]),
        ("ai_runs", ai.runs),
        ("ai_run_errors", ai.run_errors),
        ("ai_inline_runs", ai.inline.inline_runs),
    ]


def _cache(ctx: ServerContext) -> Fields:
    cache = ctx.store.cache
    hits, misses, entries = cache.stats()
    return [("ai_cache_budget_bytes", cache.budget), ("ai_cache_used_bytes", cache.used),
            ("ai_cache_hits", hits), ("ai_cache_misses", misses),
            ("ai_cache_entries", entries)]


def commandstats_lines(ctx: ServerContext) -> list[str]:
    """``cmdstat_<name>:calls=..,usec=..,usec_per_call=..,failed_calls=..`` for each of our commands called."""
    lines = []
    for name, stat in sorted(ctx.stats.commands.items()):
        per_call = stat.usec / stat.calls if stat.calls else 0.0
        lines.append(f"cmdstat_{name.lower()}:calls={stat.calls},usec={stat.usec},usec_per_call={per_call:.2f},"
                     f"failed_calls={stat.failed}")
    return lines
