"""A restricted unpickler for LeRobot's async-inference payloads.

LeRobot sends `pickle.dumps` of its dataclasses; a plain `pickle.loads` of client bytes runs
whatever callable the bytes name (CVE-2026-25874). This unpickler resolves a global only from
an allow-list, each entry mapped onto the node's own code:

* LeRobot's `TimedObservation`, `TimedAction`, `RemotePolicyConfig` (both module paths) and
  `PolicyFeature` / `FeatureType` -> the plain classes of `lerobot_types.py`;
* numpy's array, dtype and scalar rebuilders (numpy 1 and 2 paths) -> wrappers that admit only
  plain numeric, bool and string dtypes (no object or void dtypes: those carry pointers or
  nested pickles);
* torch's tensor rebuilders -> a numpy array; the storage bytes go through torch's own
  `weights_only` loader, never a full `torch.load`.

Everything else is refused (`RefusedPickle`, with the global's name) before it is called. The
unpickler is Python's pure-Python one so that `BUILD` (state applied to an object) can be
checked too: it only applies state to the allow-listed classes, arrays and dtypes.
"""

from __future__ import annotations

import collections
import io
import pickle
from typing import Any

import numpy as np

from vla_server.frontend.lerobot_grpc import lerobot_types as lt

HELPERS_MODULES = ("lerobot.async_inference.helpers", "lerobot.scripts.server.helpers")
_HELPERS_CLASSES: dict[str, type] = {
    "TimedObservation": lt.TimedObservation,
    "TimedAction": lt.TimedAction,
    "RemotePolicyConfig": lt.RemotePolicyConfig,
}
# numpy dtype kinds an array or scalar may have: bool, ints, floats, complex, str, bytes.
_NUMERIC_KINDS = frozenset("biufcUS")


class RefusedPickle(pickle.UnpicklingError):
    """The payload names a global outside the allow-list, or misuses an allowed one."""


class _NdarrayToken:
    """What `numpy.ndarray` resolves to: only `_reconstruct` accepts it; it cannot be called."""

    def __new__(cls, *args: Any) -> _NdarrayToken:
        raise RefusedPickle("numpy.ndarray may not be called")


def _checked_dtype(value: Any) -> np.dtype:
    if not isinstance(value, np.dtype) or value.kind not in _NUMERIC_KINDS or value.hasobject:
        raise RefusedPickle(f"numpy dtype {value!r} is not a plain numeric or string dtype")
    return value


def _dtype(spec: Any, align: Any = False, copy: Any = False) -> np.dtype:
    if not isinstance(spec, str):
        raise RefusedPickle("numpy.dtype takes a type string here")
    try:
        return _checked_dtype(np.dtype(spec))
    except TypeError as e:
        raise RefusedPickle(f"numpy dtype {spec!r}: {e}") from None


def _reconstruct(subtype: Any, shape: Any, code: Any) -> np.ndarray:
    if subtype is not _NdarrayToken:
        raise RefusedPickle("numpy _reconstruct builds plain ndarrays only")
    return np.ndarray((0,), dtype=np.uint8)  # its state arrives through BUILD (checked there)


def _scalar(dtype: Any, data: Any = b"") -> Any:
    dtype = _checked_dtype(dtype)
    if not isinstance(data, bytes) or len(data) != dtype.itemsize:
        raise RefusedPickle("numpy scalar data must be bytes of the dtype's size")
    return np.frombuffer(data, dtype=dtype)[0]


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    dtype = _checked_dtype(dtype)
    if not isinstance(buf, bytes | bytearray) or order not in ("C", "F"):
        raise RefusedPickle("numpy _frombuffer takes a bytes buffer and order C or F")
    return np.frombuffer(bytes(buf), dtype=dtype).reshape(_shape(shape), order=order)


def _shape(shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise RefusedPickle("an array shape must be a tuple of non-negative ints")
    return shape


def _codecs_encode(text: Any, encoding: Any = "utf-8") -> bytes:
    # How protocol 2 writes a bytes object: encode(latin-1 text, "latin1").
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise RefusedPickle("_codecs.encode is only admitted for latin-1 bytes")
    return text.encode("latin1")


def _ordered_dict(*args: Any) -> collections.OrderedDict:
    if args:
        raise RefusedPickle("OrderedDict is only admitted empty (a tensor's backward hooks)")
    return collections.OrderedDict()


def _load_storage(data: Any) -> Any:
    """A tensor's storage bytes (torch's legacy format) through torch's weights-only loader."""
    import torch

    if not isinstance(data, bytes):
        raise RefusedPickle("a tensor storage must be bytes")
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:
        raise RefusedPickle(f"tensor storage refused by torch's weights-only loader: {e}") from None


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> np.ndarray:
    import torch

    if not isinstance(storage, torch.TypedStorage | torch.UntypedStorage):
        raise RefusedPickle("_rebuild_tensor_v2 takes a storage")
    tensor = torch._utils._rebuild_tensor(storage, int(offset), _shape(size), _shape(stride))
    array = tensor.detach().cpu().numpy().copy()
    _checked_dtype(array.dtype)
    return array


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    # How protocols 0 and 1 write a dataclass: copyreg._reconstructor(cls, object, None).
    if cls not in _HELPERS_CLASSES.values() and cls is not lt.PolicyFeature:
        raise RefusedPickle("copyreg._reconstructor only rebuilds the LeRobot classes")
    if base is not object or state is not None:
        raise RefusedPickle("copyreg._reconstructor only with object and no state")
    return cls.__new__(cls)


_NUMPY: dict[str, Any] = {
    "_reconstruct": _reconstruct,
    "scalar": _scalar,
    "_frombuffer": _frombuffer,
}
SAFE_GLOBALS: dict[tuple[str, str], Any] = {
    **{(f"numpy.{core}.multiarray", n): f for core in ("core", "_core") for n, f in _NUMPY.items()},
    **{(f"numpy.{core}.numeric", "_frombuffer"): _frombuffer for core in ("core", "_core")},
    ("numpy", "ndarray"): _NdarrayToken,
    ("numpy", "dtype"): _dtype,
    ("lerobot.configs.types", "PolicyFeature"): lt.PolicyFeature,
    ("lerobot.configs.types", "FeatureType"): lt.FeatureType,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch.storage", "_load_from_bytes"): _load_storage,
    ("collections", "OrderedDict"): _ordered_dict,
    ("_codecs", "encode"): _codecs_encode,
    # Protocols 0 to 2 write Python 2 names for these two (pickle's fix_imports).
    **{(m, "_reconstructor"): _reconstructor for m in ("copyreg", "copy_reg")},
    **{(m, "object"): object for m in ("builtins", "__builtin__")},
}


class RestrictedUnpickler(pickle._Unpickler):  # type: ignore[name-defined]
    """Loads one payload; `helpers_module` is the LeRobot module path it named (replies are
    pickled under the same one, so an older client can load them)."""

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.helpers_module: str | None = None

    def find_class(self, module: str, name: str) -> Any:
        if module in HELPERS_MODULES and name in _HELPERS_CLASSES:
            self.helpers_module = module
            return _HELPERS_CLASSES[name]
        found = SAFE_GLOBALS.get((module, name))
        if found is None:
            raise RefusedPickle(f"global {module}.{name} is not allowed")
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("persistent ids are not allowed")

    def load_build(self) -> None:
        state = self.stack.pop()
        target = self.stack[-1]
        if isinstance(target, lt._Plain):
            target.__setstate__(state)
        elif isinstance(target, np.ndarray):
            target.__setstate__(_array_state(state))
        elif isinstance(target, np.dtype):
            target.__setstate__(_dtype_state(state))
        else:
            raise RefusedPickle(f"state may not be set on a {type(target).__name__}")

    dispatch[pickle.BUILD[0]] = load_build


def _array_state(state: Any) -> tuple[Any, ...]:
    """ndarray's pickled state (version, shape, dtype, fortran, raw bytes), checked."""
    if not isinstance(state, tuple) or len(state) != 5:
        raise RefusedPickle("unexpected ndarray state")
    version, shape, dtype, fortran, raw = state
    dtype = _checked_dtype(dtype)
    count = int(np.prod(_shape(shape), dtype=np.int64))
    if not isinstance(raw, bytes | bytearray) or len(raw) != count * dtype.itemsize:
        raise RefusedPickle("ndarray data must be bytes of the array's size")
    return (version, shape, dtype, bool(fortran), raw)


def _dtype_state(state: Any) -> tuple[Any, ...]:
    """A plain dtype's pickled state: no subarray, names or fields (those build struct dtypes)."""
    if not isinstance(state, tuple) or len(state) < 5 or any(v is not None for v in state[2:5]):
        raise RefusedPickle("only plain dtypes are allowed (no fields or subarrays)")
    return state


def restricted_loads(data: bytes) -> tuple[Any, str | None]:
    """The payload's object and the LeRobot module path it named. Raises `RefusedPickle` for
    a disallowed global, and pickle/Type/Value errors for malformed bytes."""
    unpickler = RestrictedUnpickler(data)
    obj = unpickler.load()
    return obj, unpickler.helpers_module
