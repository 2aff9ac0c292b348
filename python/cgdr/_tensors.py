"""Adapters between user tensors (numpy arrays, CPU torch tensors) and _cgdr.

Contiguous tensors of a supported dtype are handed to the native layer as
views: numpy arrays through the buffer protocol, torch tensors as
(data_ptr, dtype, shape) so bfloat16 works too. Everything here raises
TypeError for the wrong kind of object or dtype and ValueError for a wrong
layout; shapes and values are checked by the C++ validation.
"""
import sys

import numpy as np

_NUMPY_NAMES = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.int32): "i32"}
_NUMPY_DTYPES = {"f16": np.float16, "f32": np.float32, "i32": np.int32}
FLOAT_NAMES = ("f16", "bf16", "f32")


def _torch():
    # torch is optional: a torch tensor can only reach us if torch is imported.
    return sys.modules.get("torch")


def is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def kind_of(name, x):
    """'numpy' or 'torch'; TypeError for anything else."""
    if isinstance(x, np.ndarray):
        return "numpy"
    if is_torch(x):
        return "torch"
    raise TypeError(f"{name}: expected a numpy array or a torch tensor, got {type(x).__module__}.{type(x).__name__}")


def common_kind(**tensors):
    """The one kind shared by all the given (non-None) tensors."""
    kinds = {name: kind_of(name, x) for name, x in tensors.items() if x is not None}
    if len(set(kinds.values())) > 1:
        listing = ", ".join(f"{n}: {k}" for n, k in kinds.items())
        raise TypeError(f"expected all tensors to be numpy arrays or all to be torch tensors, got {listing}")
    return next(iter(kinds.values()))


def _torch_names():
    t = _torch()
    return {t.float16: "f16", t.bfloat16: "bf16", t.float32: "f32", t.int32: "i32"}


def dtype_name(name, x):
    """cgdr's name of x's dtype ('f16', 'bf16', 'f32', 'i32'); TypeError if unsupported."""
    if isinstance(x, np.ndarray):
        got = _NUMPY_NAMES.get(x.dtype)
        if got is None:
            raise TypeError(f"{name}: expected numpy dtype float16 or float32, got {x.dtype}")
        return got
    got = _torch_names().get(x.dtype)
    if got is None:
        raise TypeError(f"{name}: expected torch dtype float16, bfloat16 or float32, got {x.dtype}")
    return got


def float_dtype_name(name, x):
    got = dtype_name(name, x)
    if got not in FLOAT_NAMES:
        raise TypeError(f"{name}: expected a floating-point tensor (float16, bfloat16 or float32), got int32")
    return got


def check_rank(name, x, rank, dims):
    if x.ndim != rank:
        raise ValueError(f"{name}: expected rank {rank} {dims}, got rank {x.ndim} {list(x.shape)}")


def contiguous_input(name, x):
    """x itself if it is already usable, else a contiguous copy (inputs only)."""
    if isinstance(x, np.ndarray):
        return np.require(x, requirements=["C_CONTIGUOUS", "ALIGNED"])
    if x.device.type != "cpu":
        raise TypeError(f"{name}: expected a CPU tensor, got device {x.device}")
    if x.requires_grad:
        x = x.detach()  # cgdr does not record autograd graphs; a detached view costs nothing
    return x if x.is_contiguous() else x.contiguous()


def check_writable(name, x):
    """Outputs and in-place states are written where they are: no copies."""
    if isinstance(x, np.ndarray):
        if not x.flags.c_contiguous:
            raise ValueError(f"{name}: expected a C-contiguous array (it is written in place), got strides {x.strides}")
        if not x.flags.writeable:
            raise ValueError(f"{name}: expected a writable array, got a read-only one")
        return x
    if x.device.type != "cpu":
        raise TypeError(f"{name}: expected a CPU tensor, got device {x.device}")
    if not x.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor (it is written in place), got strides {x.stride()}")
    return x.detach() if x.requires_grad else x


def check_slot_extent(name, x, stride):
    """Slots `stride` elements apart must lie inside x: the native layer sees
    only x's shape, and every tensor here is contiguous, so a stride beyond
    one slot's size would reach past x's memory (ValueError instead)."""
    if x is None or not stride or x.ndim < 1 or x.shape[0] < 2:
        return
    slots = int(x.shape[0])
    size = int(x.size if isinstance(x, np.ndarray) else x.numel())
    slot = size // slots
    need = (slots - 1) * int(stride) + slot
    if int(stride) > slot and need > size:
        raise ValueError(f"state_slot_stride: {slots} slots of {name} {int(stride)} elements apart need {need} "
                         f"elements, the contiguous tensor holds {size} (a stride beyond one slot, {slot}, needs "
                         "the memory between the slots)")


def native(name, x):
    """The argument _cgdr expects for x (which must stay referenced by the caller)."""
    if x is None:
        return None
    if isinstance(x, np.ndarray):
        dtype_name(name, x)  # TypeError with the tensor's name before the native layer sees it
        return x
    return (x.data_ptr(), dtype_name(name, x), tuple(x.shape))


def empty(kind, shape, dtype):
    if kind == "numpy":
        if dtype == "bf16":
            raise TypeError("numpy has no bfloat16; use float16/float32 arrays or torch tensors")
        return np.empty(shape, dtype=_NUMPY_DTYPES[dtype])
    t = _torch()
    return t.empty(shape, dtype={"f16": t.float16, "bf16": t.bfloat16, "f32": t.float32}[dtype])


def zeros(kind, shape, dtype):
    out = empty(kind, shape, dtype)
    out[...] = 0
    return out


def int32_vector(name, x, ndim=1):
    """x (list, numpy or torch integers) as an ndim-D (1-D by default) C-contiguous int32 numpy array."""
    if is_torch(x):
        if x.device.type != "cpu":
            raise TypeError(f"{name}: expected a CPU tensor, got device {x.device}")
        x = x.detach().numpy()
    arr = np.asarray(x)
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D sequence of integers, got shape {list(arr.shape)}")
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=np.int32)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}: expected integers, got dtype {arr.dtype}")
    if arr.dtype != np.int32:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < np.iinfo(np.int32).min or hi > np.iinfo(np.int32).max:
            raise ValueError(f"{name}: values must fit in int32, got range [{lo}, {hi}]")
        arr = arr.astype(np.int32)
    return np.ascontiguousarray(arr)
