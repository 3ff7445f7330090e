"""The safetensors format, written and read without the ``safetensors`` package.

A file is an 8-byte little-endian header length N, N bytes of JSON, then the tensors'
raw little-endian bytes back to back. The header maps each name to ``{"dtype", "shape",
"data_offsets": [begin, end]}`` (offsets into the byte buffer after the header) and
``"__metadata__"`` to a dict of strings (https://github.com/huggingface/safetensors).
The header is padded with spaces to a multiple of 8 bytes, as the reference writer does,
so every tensor starts aligned.

Complex tensors are not in the format: :func:`save_safetensors` stores a complex tensor
``name`` as its real view (``torch.view_as_real``: a trailing axis of 2, re and im)
under ``name + COMPLEX_SUFFIX`` and lists the names in the metadata entry
``COMPLEX_KEY`` (a JSON list); :func:`load_safetensors` undoes it.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import torch

__all__ = ["save_safetensors", "load_safetensors", "safetensors_bytes", "COMPLEX_SUFFIX"]

COMPLEX_SUFFIX = ".complex_as_real"
COMPLEX_KEY = "complex_as_real"

#: torch dtype -> the format's name and the little-endian numpy dtype of its bytes
_DTYPES = {
    torch.float64: ("F64", "<f8"),
    torch.float32: ("F32", "<f4"),
    torch.float16: ("F16", "<f2"),
    torch.bfloat16: ("BF16", "<i2"),
    torch.int64: ("I64", "<i8"),
    torch.int32: ("I32", "<i4"),
    torch.int16: ("I16", "<i2"),
    torch.int8: ("I8", "i1"),
    torch.uint8: ("U8", "u1"),
    torch.bool: ("BOOL", "u1"),
}
_BY_NAME = {name: (dtype, np_dtype) for dtype, (name, np_dtype) in _DTYPES.items()}


def _raw(t: torch.Tensor, np_dtype: str) -> bytes:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    elif t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return np.ascontiguousarray(t.numpy()).astype(np_dtype, copy=False).tobytes()


def safetensors_bytes(tensors: dict[str, torch.Tensor], metadata: dict | None = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors`` (complex ones as real views)."""
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    complex_names = []
    header: dict = {}
    chunks, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name!r} is a {type(t).__name__}, not a tensor")
        if t.is_complex():
            complex_names.append(name)
            t, name = torch.view_as_real(t.detach().resolve_conj()), name + COMPLEX_SUFFIX
        if t.dtype not in _DTYPES:
            raise TypeError(
                f"{name!r} has dtype {t.dtype}, which safetensors cannot hold; supported: "
                f"{', '.join(sorted(str(d) for d in _DTYPES))} and complex (as real views)"
            )
        kind, np_dtype = _DTYPES[t.dtype]
        raw = _raw(t, np_dtype)
        header[name] = {
            "dtype": kind,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    if complex_names:
        meta[COMPLEX_KEY] = json.dumps(complex_names)
    if meta:
        header = {"__metadata__": meta, **header}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def save_safetensors(
    tensors: dict[str, torch.Tensor], path: str | os.PathLike, metadata: dict | None = None
) -> bytes:
    """Write ``tensors`` to ``path`` (not atomically: the caller renames); returns the bytes."""
    data = safetensors_bytes(tensors, metadata)
    Path(path).write_bytes(data)
    return data


def load_safetensors(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict]:
    """``(tensors, metadata)`` of a safetensors file; complex tensors stored by
    :func:`save_safetensors` come back complex."""
    data = Path(path).read_bytes()
    if len(data) < 8:
        raise ValueError(f"{str(path)!r} is not a safetensors file: {len(data)} bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{str(path)!r} is not a safetensors file: header of {n} bytes")
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n :]
    out = {}
    for name, info in header.items():
        dtype, np_dtype = _BY_NAME[info["dtype"]]
        begin, end = info["data_offsets"]
        arr = np.frombuffer(body[begin:end], dtype=np_dtype).reshape(info["shape"])
        t = torch.from_numpy(arr.astype(arr.dtype.newbyteorder("=")))  # native order, a copy
        if dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        elif dtype == torch.bool:
            t = t.to(torch.bool)
        out[name] = t
    for name in json.loads(meta.get(COMPLEX_KEY, "[]")):
        out[name] = torch.view_as_complex(out.pop(name + COMPLEX_SUFFIX).contiguous())
    return out, dict(meta)
