"""KV snapshots as bytes, without pickle: a msgpack header followed by the raw tensor bytes.

Payload layout (little-endian)::

    b"HKVC" | u32 header length | msgpack SnapshotHeader | tensor bytes (C order)

The tensor is the ``KVBlock`` data ``[layers, 2, kv_heads, num_tokens, head_dim]`` in the model's
dtype. The header repeats the engine fingerprint; ``restore_block`` refuses a snapshot whose
fingerprint is not the importing engine's (``CacheMismatchError``), and malformed bytes with
``ValueError``. Decoding yields a CPU block; the engine moves it to its device.
"""

from __future__ import annotations

import struct

import msgspec
import numpy as np
import torch

from heddle.workers.engines.base import CacheMismatchError, CacheSnapshot
from heddle.workers.engines.torch_engine.kv import KVBlock

MAGIC = b"HKVC"
FORMAT_VERSION = 1
_LENGTH = struct.Struct("<I")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class SnapshotHeader(msgspec.Struct, frozen=True, kw_only=True):
    format_version: int = FORMAT_VERSION
    trajectory_id: str
    fingerprint: str
    dtype: str
    shape: list[int]
    token_ids: list[int]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(SnapshotHeader)


def snapshot_block(trajectory_id: str, block: KVBlock, fingerprint: str) -> CacheSnapshot:
    """Serialise ``block`` (any device) to a ``CacheSnapshot``."""
    data = block.data.detach().to("cpu").contiguous()
    header = SnapshotHeader(
        trajectory_id=trajectory_id,
        fingerprint=fingerprint,
        dtype=str(data.dtype).removeprefix("torch."),
        shape=list(data.shape),
        token_ids=list(block.token_ids),
    )
    header_bytes = _ENCODER.encode(header)
    tensor_bytes = data.view(torch.uint8).numpy().tobytes()
    payload = b"".join((MAGIC, _LENGTH.pack(len(header_bytes)), header_bytes, tensor_bytes))
    return CacheSnapshot(
        trajectory_id=trajectory_id,
        num_tokens=block.num_tokens,
        fingerprint=fingerprint,
        payload=payload,
    )


def restore_block(snapshot: CacheSnapshot, expected_fingerprint: str) -> KVBlock:
    """The snapshot's KV as a CPU block, after checking it belongs to ``expected_fingerprint``."""
    check_fingerprint(snapshot.fingerprint, expected_fingerprint)
    header, offset = _read_header(snapshot.payload)
    check_fingerprint(header.fingerprint, expected_fingerprint)
    if header.trajectory_id != snapshot.trajectory_id:
        raise ValueError(
            f"snapshot of trajectory {snapshot.trajectory_id!r} carries KV of "
            f"{header.trajectory_id!r}"
        )
    return KVBlock(tuple(header.token_ids), _read_tensor(header, snapshot.payload, offset))


def check_fingerprint(found: str, expected: str) -> None:
    if found != expected:
        raise CacheMismatchError(
            f"KV cache from model {found} cannot be used by an engine running {expected}: "
            "caches move only between engines with the same model weights, dtype and KV layout"
        )


def _read_header(payload: bytes) -> tuple[SnapshotHeader, int]:
    start = len(MAGIC) + _LENGTH.size
    if len(payload) < start or payload[: len(MAGIC)] != MAGIC:
        raise ValueError("not a heddle KV snapshot (bad magic bytes)")
    (header_len,) = _LENGTH.unpack_from(payload, len(MAGIC))
    try:
        header = _DECODER.decode(payload[start : start + header_len])
    except msgspec.DecodeError as exc:
        raise ValueError(f"corrupt KV snapshot header: {exc}") from None
    if header.format_version != FORMAT_VERSION:
        raise ValueError(f"KV snapshot format {header.format_version}, expected {FORMAT_VERSION}")
    return header, start + header_len


def _read_tensor(header: SnapshotHeader, payload: bytes, offset: int) -> torch.Tensor:
    dtype = _DTYPES.get(header.dtype)
    if dtype is None or len(header.shape) != 5 or header.shape[3] != len(header.token_ids):
        raise ValueError(f"KV snapshot of dtype {header.dtype} and shape {header.shape} is invalid")
    num_bytes = int(np.prod(header.shape)) * torch.empty((), dtype=dtype).element_size()
    if len(payload) - offset != num_bytes:
        raise ValueError(
            f"KV snapshot holds {len(payload) - offset} tensor bytes, expected {num_bytes}"
        )
    if num_bytes == 0:
        return torch.empty(header.shape, dtype=dtype)
    raw = np.frombuffer(payload, dtype=np.uint8, count=num_bytes, offset=offset).copy()
    return torch.from_numpy(raw).view(dtype).reshape(header.shape)
