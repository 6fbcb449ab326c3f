"""Models as Redis values: one hash per model, with a marker field, metadata, a content digest and the blob.

Layout (field → value, all bulk strings)::

    __redisai__      "model"            marker: a hash without it is not ours (WRONGTYPE)
    format           "1"
    backend          TORCH | ONNX | TF | TFLITE
    device           as typed by the client (e.g. "cpu", "GPU:0")
    tag              bytes ("" when none)
    batchsize        decimal
    minbatchsize     decimal
    minbatchtimeout  decimal (ms)
    inputs           JSON list of input names
    outputs          JSON list of output names
    digest           sha256 hex of the blob (followed, for a model stored with INPUTS/OUTPUTS names, by
                     its backend and those names: the same TF graph stored with other output nodes computes
                     something else): loaded handles are cached by it, and a run's write checks it, so a model
                     replaced by another server or client is reloaded, never served stale
    blob             the serialized model, exactly the bytes given at store time
    run_info         the key the object was stored under (server/store/atomic.py): AI.INFO answers its
                     counters only under that name (after a RENAME: "cannot find run info for key")
    calls, duration, samples, errors
                     its AI.INFO counters (decimal), written by each run's store script and zeroed when
                     the object is stored again (absent until its first run)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final

from backends import errors as msgs
from backends.device import Device, parse_device_lenient
from backends.errors import AIError

MARKER_FIELD: Final = b"__redisai__"
MODEL_MARKER: Final = b"model"
SCRIPT_MARKER: Final = b"script"
GRAPH_MARKER: Final = b"graph"  # a stored graph (server/commands/graph_store.py)
MODEL_META_FIELDS: Final = (MARKER_FIELD, b"backend", b"device", b"tag", b"batchsize", b"minbatchsize",
                             b"minbatchtimeout", b"inputs", b"outputs", b"digest")


@dataclass(frozen=True, slots=True)
class ModelMeta:
    """Everything about a stored model but its blob."""

    backend: str
    device: Device
    tag: bytes
    batchsize: int
    minbatchsize: int
    minbatchtimeout: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    digest: str


def blob_digest(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def model_digest(blob: bytes, backend: str, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> str:
    """What identifies a stored model's version (the layout's ``digest``): its blob's, unless it names its
    inputs and outputs (TF), which then count too — a run's write compares only this (server/store/atomic.py)."""
    if not inputs and not outputs:
        return blob_digest(blob)
    named = hashlib.sha256(blob)
    named.update(b"\0" + json.dumps([backend, list(inputs), list(outputs)]).encode())
    return named.hexdigest()


def model_hash_fields(meta: ModelMeta, blob: bytes) -> list[bytes]:
    """HSET arguments (field, value, …) for a model."""
    pairs: list[tuple[bytes, bytes]] = [
        (MARKER_FIELD, MODEL_MARKER),
        (b"format", b"1"),
        (b"backend", meta.backend.encode()),
        (b"device", meta.device.text.encode()),
        (b"tag", meta.tag),
        (b"batchsize", str(meta.batchsize).encode()),
        (b"minbatchsize", str(meta.minbatchsize).encode()),
        (b"minbatchtimeout", str(meta.minbatchtimeout).encode()),
        (b"inputs", json.dumps(list(meta.inputs)).encode()),
        (b"outputs", json.dumps(list(meta.outputs)).encode()),
        (b"digest", meta.digest.encode()),
        (b"blob", blob),
    ]
    return [part for pair in pairs for part in pair]


def check_marker(reply: Any, marker: bytes, exists: Any) -> bool:
    """Interpret ``HGET key __redisai__`` next to ``EXISTS key``: False when the key is missing, WRONGTYPE
    when it holds anything else than our kind of object (a string, a list, a user's own hash)."""
    if not exists:
        return False
    if isinstance(reply, AIError) or reply != marker:
        raise AIError(msgs.WRONGTYPE_MSG)
    return True


def decode_model_meta(values: Any, exists: Any) -> ModelMeta | None:
    """Decode ``HMGET key *MODEL_META_FIELDS`` next to ``EXISTS key``: None when there is no such key,
    WRONGTYPE when the key is not a model."""
    if not exists:
        return None
    if isinstance(values, AIError) or not isinstance(values, list) or values[0] != MODEL_MARKER:
        raise AIError(msgs.WRONGTYPE_MSG)
    try:
        _, backend, device, tag, batch, minbatch, mintimeout, inputs, outputs, digest = values
        return ModelMeta(
            backend=backend.decode(), device=parse_device_lenient(device), tag=tag or b"", batchsize=int(batch),
            minbatchsize=int(minbatch), minbatchtimeout=int(mintimeout), inputs=tuple(json.loads(inputs)),
            outputs=tuple(json.loads(outputs)), digest=digest.decode(),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        raise AIError(msgs.WRONGTYPE_MSG) from exc


# --- scripts ------------------------------------------------------------------------------------------------------
# A script is one hash too (field → value, all bulk strings):
#
#     __redisai__      "script"           marker (SCRIPT_MARKER)
#     format           "1"
#     device           as typed by the client (e.g. "CPU", "gpu:0")
#     tag              bytes ("" when none)
#     entry_points     JSON list of the ENTRY_POINTS names ([] for AI.SCRIPTSET scripts)
#     digest           sha256 hex of the source: compiled scripts are cached by (device, digest)
#     source           the TorchScript source, exactly the bytes given at store time
#     run_info         as a model's: the name it was stored under
#     calls, duration, samples, errors   its AI.INFO counters, as a model's

SCRIPT_META_FIELDS: Final = (MARKER_FIELD, b"device", b"tag", b"entry_points", b"digest")


@dataclass(frozen=True, slots=True)
class ScriptMeta:
    """Everything about a stored script but its source."""

    device: Device
    tag: bytes
    entry_points: tuple[str, ...]
    digest: str


def script_hash_fields(meta: ScriptMeta, source: bytes) -> list[bytes]:
    """HSET arguments (field, value, …) for a script."""
    pairs: list[tuple[bytes, bytes]] = [
        (MARKER_FIELD, SCRIPT_MARKER),
        (b"format", b"1"),
        (b"device", meta.device.text.encode()),
        (b"tag", meta.tag),
        (b"entry_points", json.dumps(list(meta.entry_points)).encode()),
        (b"digest", meta.digest.encode()),
        (b"source", source),
    ]
    return [part for pair in pairs for part in pair]


def decode_script_meta(values: Any, exists: Any) -> ScriptMeta | None:
    """Decode ``HMGET key *SCRIPT_META_FIELDS`` next to ``EXISTS key``: None when there is no such key,
    WRONGTYPE when the key is not a script."""
    if not exists:
        return None
    if isinstance(values, AIError) or not isinstance(values, list) or values[0] != SCRIPT_MARKER:
        raise AIError(msgs.WRONGTYPE_MSG)
    try:
        _, device, tag, entry_points, digest = values
        return ScriptMeta(device=parse_device_lenient(device), tag=tag or b"",
                          entry_points=tuple(str(name) for name in json.loads(entry_points)), digest=digest.decode())
    except (ValueError, TypeError, AttributeError) as exc:
        raise AIError(msgs.WRONGTYPE_MSG) from exc
