"""openpi's msgpack-numpy wire format (as `openpi_client.msgpack_numpy` reads and writes it).

A numpy array travels as the map `{b"__ndarray__": True, b"data": raw bytes, b"dtype":
dtype.str, b"shape": [...]}` and a numpy scalar as `{b"__npgeneric__": True, b"data": value,
b"dtype": dtype.str}`; everything else is plain msgpack. Decoding trusts nothing: only bool,
integer, float and fixed-width string dtypes are rebuilt (an object dtype over raw bytes would be
pointers), and the byte count must match the shape. The markers and their fields are read as
bin (openpi's) or str keys (SGLang's `unpack_msgpack` accepts both, so its clients may send
either).
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np

_ARRAY, _SCALAR = b"__ndarray__", b"__npgeneric__"
_SAFE_KINDS = frozenset("biufUS")


class WireFormatError(ValueError):
    """A frame that is not valid msgpack-numpy."""


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in _SAFE_KINDS:
            raise TypeError(f"cannot send a numpy array of dtype {obj.dtype}")
        return {_ARRAY: True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {_SCALAR: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot send a {type(obj).__name__}")


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_encode)


def _dtype(text: Any) -> np.dtype:
    try:
        dtype = np.dtype(text.decode() if isinstance(text, bytes) else text)
    except (TypeError, ValueError, UnicodeDecodeError) as e:
        raise WireFormatError(f"bad numpy dtype {text!r}") from e
    if dtype.kind not in _SAFE_KINDS or dtype.fields is not None:
        raise WireFormatError(f"numpy dtype {dtype} is not accepted")
    return dtype


def _get(d: dict[Any, Any], name: bytes) -> Any:
    return d[name] if name in d else d.get(name.decode())


def _array(d: dict[Any, Any]) -> np.ndarray:
    dtype = _dtype(_get(d, b"dtype"))
    shape, data = _get(d, b"shape"), _get(d, b"data")
    if not isinstance(shape, list | tuple) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise WireFormatError(f"bad numpy shape {shape!r}")
    if not isinstance(data, bytes) or len(data) != math.prod(shape) * dtype.itemsize:
        size = len(data) if isinstance(data, bytes) else None
        raise WireFormatError(f"numpy array of shape {list(shape)} {dtype} has {size} data bytes")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _object_hook(d: dict[Any, Any]) -> Any:
    if _get(d, _ARRAY):
        return _array(d)
    if _get(d, _SCALAR):
        return _dtype(_get(d, b"dtype")).type(_get(d, b"data"))
    return d


def unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, object_hook=_object_hook)
    except WireFormatError:
        raise
    except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as e:
        raise WireFormatError(f"not a msgpack frame: {e}") from None
