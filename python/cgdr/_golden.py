"""Golden data and the precision verdict for NPU ports of the operator
(docs/golden.md): the functions behind `cgdr golden` and `cgdr compare`, for
the torch-npu test scripts that check a kernel against CPU results.
"""
import json

from . import _cgdr
from . import _tensors as _t
from ._options import _scale, _threads

_FAULTS = (None, "dropped-state", "tail-mask", "swapped-heads", "g-sign")


def _state_shape(layout, B, Nv, Dk, Dv):
    return (B, Nv, Dk, Dv) if layout == "kv" else (B, Nv, Dv, Dk)


def golden(query, key, value, beta, seq_lens, g=None, initial_state=None, *, scale=None, state_layout="vk",
           use_qk_l2norm=False, operands=None, engine="auto", fault=None, threads=None):
    """The golden and benchmark results of one case, as `cgdr golden` writes them.

    Tensors as the NPU consumed them, in the packed form (SPEC 2): query, key
    [T, Nk, Dk]; value [T, Nv, Dv]; beta and g [T, Nv]; initial_state
    [B, Nv, Dv, Dk] (state_layout "vk") or [B, Nv, Dk, Dv] ("kv") or None;
    seq_lens: B lengths summing to T. numpy float16/float32 arrays or CPU torch
    float16/bfloat16/float32 tensors; results come back as the same kind.

    Returns {"golden": {"out", "final_state"}, "benchmark": {...}} and, with
    `fault`, "actual":
      golden     float32: cgdr's exact path (FP32 products and state).
      benchmark  the NPU's precision profile: products on `operands` ("bf16",
                 or "f16"; default f16 for float16 queries, else bf16) with FP32
                 accumulation, C = 64, the state FP32 between chunks; out in
                 query's dtype, final_state in initial_state's (query's if None).
      actual     the benchmark with a planted NPU kernel bug ("dropped-state",
                 "tail-mask", "swapped-heads", "g-sign"), to see compare fail.
    engine: "auto" (the kernels for bf16, the emulation for f16), "kernels" or "emulation".
    """
    if fault not in _FAULTS:
        raise ValueError(f"fault: expected one of {', '.join(str(f) for f in _FAULTS)}, got {fault!r}")
    kind = _t.common_kind(query=query, key=key, value=value, beta=beta, g=g, initial_state=initial_state)
    _t.check_rank("query", query, 3, "[T, Nk, Dk]")
    _t.check_rank("value", value, 3, "[T, Nv, Dv]")
    T, _, Dk = query.shape
    Nv, Dv = value.shape[1], value.shape[2]
    lens = _t.int32_vector("seq_lens", seq_lens)
    layout = state_layout if state_layout in ("vk", "kv") else None
    if layout is None:
        raise ValueError(f"state_layout: expected 'vk' or 'kv', got {state_layout!r}")
    qd = _t.float_dtype_name("query", query)
    init = _t.contiguous_input("initial_state", initial_state) if initial_state is not None else None
    sd = _t.float_dtype_name("initial_state", init) if init is not None else qd
    if operands is None:
        operands = "f16" if qd == "f16" else "bf16"
    sshape = _state_shape(layout, int(lens.shape[0]), Nv, Dk, Dv)

    def result(out_dtype, state_dtype):
        return {"out": _t.empty(kind, (T, Nv, Dv), out_dtype), "final_state": _t.empty(kind, sshape, state_dtype)}

    res = {"golden": result("f32", "f32"), "benchmark": result(qd, sd)}
    if fault is not None:
        res["actual"] = result(qd, sd)
    ins = [_t.contiguous_input(n, x) for n, x in (("query", query), ("key", key), ("value", value), ("beta", beta))]
    gc = _t.contiguous_input("g", g) if g is not None else None

    def native_pair(name):
        r = res.get(name)
        if r is None:
            return (None, None)
        return (_t.native(name + "['out']", r["out"]), _t.native(name + "['final_state']", r["final_state"]))

    _cgdr.golden(*(_t.native(n, x) for n, x in zip(("query", "key", "value", "beta"), ins)), _t.native("g", gc),
                 _t.native("initial_state", init), lens, native_pair("golden"), native_pair("benchmark"),
                 native_pair("actual"), _scale(scale), bool(use_qk_l2norm), layout,
                 _threads(threads), operands, engine, fault or "none")
    return res


def _pair(name, r):
    """(out, final_state) of a result given as a mapping or a tuple; final_state may be None."""
    if isinstance(r, dict):
        if "out" not in r:
            raise ValueError(f"{name}: expected a mapping with 'out' (and 'final_state'), got keys {sorted(r)}")
        out, state = r["out"], r.get("final_state")
    elif isinstance(r, (tuple, list)) and len(r) in (1, 2):
        out, state = r[0], (r[1] if len(r) == 2 else None)
    else:
        raise TypeError(f"{name}: expected {{'out': ..., 'final_state': ...}} or (out, final_state), got {type(r).__name__}")
    tensors = []
    for part, x in (("out", out), ("final_state", state)):
        label = f"{name}['{part}']"
        if x is None:
            tensors.append(None)
            continue
        _t.kind_of(label, x)
        _t.float_dtype_name(label, x)
        tensors.append(_t.contiguous_input(label, x))
    return tensors


def compare(golden, benchmark, actual, *, seq_lens=None, level="L1", dtype=None, eps=1e-3, state_layout="vk",
            threads=None):
    """The verdict on an NPU result by Ascend's precision standard, as `cgdr compare --json`.

    golden, benchmark, actual: {"out": ..., "final_state": ...} (cgdr.golden's
    entries) or (out, final_state); numpy or CPU torch tensors of any float
    dtype; actual's final_state may be None (out is judged alone).
    seq_lens: the B sequence lengths, for the per-sequence breakdown.
    level: "L0", "L1" (default) or "L2", the level of report["pass"].
    dtype: the NPU output dtype whose thresholds apply ("bf16", "f16", "f32";
    default: the actual's or benchmark's 16-bit dtype).

    Returns a dict: "pass", "level", and per tensor ("out", "final_state") the
    metrics of "actual" and "benchmark" (mare, mere, rmse, small_value_errors,
    cosine_similarity, max_abs_error/index, max_rel_error/index), their
    "ratio"s, "levels" {L0, L1, L2: {pass, why}}, and the "sequences", "heads"
    and worst chunks or states where the error concentrates.
    """
    tensors = [_pair(n, r) for n, r in (("golden", golden), ("benchmark", benchmark), ("actual", actual))]
    natives = [tuple(_t.native(f"{n}['{p}']", x) for p, x in zip(("out", "final_state"), pair))
               for n, pair in zip(("golden", "benchmark", "actual"), tensors)]
    lens = [] if seq_lens is None else [int(x) for x in _t.int32_vector("seq_lens", seq_lens)]
    report = _cgdr.compare(natives[0], natives[1], natives[2], lens, str(level), "" if dtype is None else str(dtype),
                           float(eps), state_layout, _threads(threads))
    return json.loads(report)
