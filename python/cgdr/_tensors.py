"""Adapters between user tensors (numpy arrays, CPU torch tensors) and _cgdr.

Contiguous tensors of a supported dtype are handed to the native layer as
views: numpy arrays through the buffer protocol, torch tensors as
(data_ptr, dtype, shape) so bfloat16 works too. Everything here raises
TypeError for the wrong kind of object or dtype and ValueError for a wrong
layout; shapes and values are checked by the C++ validation.
"""
import os
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


_TORCH_NAMES = {}


def _torch_names():
    if not _TORCH_NAMES:  # built once: every tensor of every call looks its dtype up here
        t = _torch()
        _TORCH_NAMES.update({t.float16: "f16", t.bfloat16: "bf16", t.float32: "f32", t.int32: "i32"})
    return _TORCH_NAMES


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
    if not x.is_cpu:  # is_cpu, not device.type: 0.5 us less per tensor, a dozen per decode call
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
    if not x.is_cpu:
        raise TypeError(f"{name}: expected a CPU tensor, got device {x.device}")
    if not x.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor (it is written in place), got strides {x.stride()}")
    return x.detach() if x.requires_grad else x


def _elements_from(x):
    """Elements of x's memory from its first one on: its own size for a numpy
    array (always C-contiguous here), the rest of its storage for a torch
    tensor (a view of a larger pool reaches the memory between its slots)."""
    if isinstance(x, np.ndarray):
        return int(x.size)
    storage = x.untyped_storage() if hasattr(x, "untyped_storage") else x.storage()  # torch < 2.0: storage()
    return int(storage.nbytes()) // x.element_size() - int(x.storage_offset())


def check_slot_extent(name, x, stride):
    """Slots `stride` elements apart must lie inside x's memory: the native
    layer sees only x's shape and data pointer, so a stride beyond one slot's
    size must not reach past it (ValueError instead)."""
    if x is None or not stride or x.ndim < 1 or x.shape[0] < 2:
        return
    slots = int(x.shape[0])
    size = int(x.size if isinstance(x, np.ndarray) else x.numel())
    slot = size // slots
    need = (slots - 1) * int(stride) + slot
    have = _elements_from(x)
    if int(stride) > slot and need > have:
        raise ValueError(f"state_slot_stride: {slots} slots of {name} {int(stride)} elements apart need {need} "
                         f"elements, its memory holds {have} (a stride beyond one slot, {slot}, needs "
                         "the memory between the slots)")


def is_slot_strided(x):
    """x is a torch view of a pool: slots dense, further apart than one slot."""
    return (is_torch(x) and x.is_cpu and x.ndim >= 2 and not x.is_contiguous()
            and x.narrow(0, 0, 1).is_contiguous() and int(x.stride(0)) >= x[0].numel())


def writable_pool(name, x, state_slot_stride):
    """A state pool written in place, as (pool, slot stride). A torch view
    whose slots lie further apart than one slot, each slot dense (vLLM's
    pools, which keep other state between the slots), is taken as it is and
    its stride read from the view; anything else must be contiguous."""
    if not is_torch(x) or x.ndim < 2 or x.is_contiguous():
        return check_writable(name, x), state_slot_stride
    if not x.is_cpu:
        raise TypeError(f"{name}: expected a CPU tensor, got device {x.device}")
    slot = x[0].numel()
    stride = int(x.stride(0))
    if not x.narrow(0, 0, 1).is_contiguous() or stride < slot:
        raise ValueError(f"{name}: expected a contiguous pool, or a view of one whose slots are dense and at least "
                         f"one slot ({slot} elements) apart (it is written in place), got strides {x.stride()}")
    if state_slot_stride not in (0, stride):
        raise ValueError(f"state_slot_stride: the pool view {name} has its slots {stride} elements apart, "
                         f"got state_slot_stride = {state_slot_stride}")
    return (x.detach() if x.requires_grad else x), stride


def native(name, x):
    """The argument _cgdr expects for x (which must stay referenced by the caller)."""
    if x is None or isinstance(x, tuple):  # a tuple: a view native_as made
        return x
    if isinstance(x, np.ndarray):
        dtype_name(name, x)  # TypeError with the tensor's name before the native layer sees it
        return x
    return (x.data_ptr(), dtype_name(name, x), tuple(x.shape))


def native_as(name, x, shape):
    """native(x) seen with another shape of the same elements (e.g. [1, N, ...]
    as [N, ...]) without making a view tensor (a few microseconds each): x
    must be a contiguous torch tensor (contiguous_input's or check_writable's)."""
    return (x.data_ptr(), dtype_name(name, x), tuple(shape))


# New outputs of at least this many bytes are advised onto transparent huge
# pages (advise_huge_pages); smaller ones fault in quickly enough.
HUGE_PAGE_MIN_BYTES = 4 << 20


def env_switch(name, default):
    """The on/off switch in environment variable `name`: True for "1", False
    for "0", `default` where it is unset or empty; ValueError naming the
    variable and its value for anything else, so that a misspelt switch
    ("false", "off") is not read as the default without a word."""
    value = os.environ.get(name, "")
    if value == "":
        return default
    if value not in ("0", "1"):
        raise ValueError(f"{name}: expected 0 (off) or 1 (on), got {value!r}")
    return value == "1"


def advise_huge_pages(x):
    """x, a new torch output cgdr allocated and has not touched yet, advised
    onto transparent huge pages (madvise MADV_HUGEPAGE on its whole pages)
    when it holds HUGE_PAGE_MIN_BYTES or more, unless CGDR_HUGE_PAGES=0. The
    kernel then writes it without a page fault per 4 KiB: faulting a KDA
    prefill's 64 MiB `out` in cost ~20 ms of a 210 ms call (docs/python.md).
    Only a hint: where THP is off nothing changes. numpy advises its own
    large arrays (since 1.22), torch only under THP_MEM_ALLOC_ENABLE=1.
    Returns x; ValueError for a CGDR_HUGE_PAGES other than 0 or 1 (env_switch),
    raised before the call writes anything."""
    if not is_torch(x) or not env_switch("CGDR_HUGE_PAGES", True):
        return x
    nbytes = x.numel() * x.element_size()  # torch < 2.1 has no Tensor.nbytes
    if nbytes >= HUGE_PAGE_MIN_BYTES:
        from . import _cgdr
        _cgdr.advise_huge_pages(x.data_ptr(), nbytes)
    return x


def empty(kind, shape, dtype):
    """A new output (advise_huge_pages)."""
    if kind == "numpy":
        if dtype == "bf16":
            raise TypeError("numpy has no bfloat16; use float16/float32 arrays or torch tensors")
        return np.empty(shape, dtype=_NUMPY_DTYPES[dtype])
    t = _torch()
    return advise_huge_pages(t.empty(shape, dtype={"f16": t.float16, "bf16": t.bfloat16, "f32": t.float32}[dtype]))


def output(name, x, kind, shape, dtype):
    """A caller's buffer for an output (out=, final_state=), or a new one when
    x is None: the kind, shape and dtype the call would allocate, writable and
    contiguous, else TypeError/ValueError naming it, before anything is written."""
    if x is None:
        return empty(kind, shape, dtype)
    if kind_of(name, x) != kind:
        raise TypeError(f"{name}: expected a {'numpy array' if kind == 'numpy' else 'torch tensor'} as the inputs, "
                        f"got a {kind_of(name, x)} one")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {list(shape)}, got {list(x.shape)}")
    got = dtype_name(name, x)
    if got != dtype:
        raise TypeError(f"{name}: expected dtype {dtype} (the call's result), got {got}")
    return check_writable(name, x)


def scaled_sigmoid(x, scale):
    """scale * sigmoid(x) in FP32, stored in x's dtype (a new tensor of x's kind)."""
    if isinstance(x, np.ndarray):
        return (np.float32(scale) / (np.float32(1) + np.exp(-x.astype(np.float32)))).astype(x.dtype)
    return (_torch().sigmoid(x.float()) * scale).to(x.dtype)


def zeros(kind, shape, dtype):
    out = empty(kind, shape, dtype)
    out[...] = 0
    return out


def int32_vector(name, x, ndim=1):
    """x (list, numpy or torch integers) as an ndim-D (1-D by default) C-contiguous int32 numpy array."""
    if is_torch(x):
        if not x.is_cpu:
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


def int32_native(name, x, ndim=1):
    """int32_vector's result, as _cgdr takes it: a contiguous CPU int32 torch
    tensor of ndim dimensions goes as it is (no numpy round trip: a decode
    call is a few microseconds of work), anything else through int32_vector."""
    if is_torch(x) and x.is_cpu and x.ndim == ndim and x.dtype == _torch().int32 and x.is_contiguous():
        return (x.data_ptr(), "i32", tuple(x.shape))
    return int32_vector(name, x, ndim)
