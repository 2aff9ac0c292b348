"""Front-end conformance of the Python entry points (issue 24): every
parameter of every entry point at a non-default value, against the FP64
reference, numpy and torch, every dtype, prefill and decode.

The parameters are read from each entry point's signature (inspect): every
one that is not a required tensor needs a row in ROWS, so a parameter added
without a row fails test_every_parameter_has_a_row. The keywords taken
through **kwargs come from the lists the code keeps of them.

A row gives one parameter a value (over a context of other keywords) and
says what must follow:
  REF      the call matches the FP64 reference of the row's meaning;
  DIFFERS  that, and its bits differ from the context's call: the value
           reached the kernel (algo, precision, engine);
  SAME     that, and its bits equal the context's (values that must not
           change results: thread counts, tile widths, ignored hints);
  Err(re)  ValueError/TypeError matching re, and nothing written. Values
           just past a native limit prove the value reaches the native
           checks (threads 4097, v_step 257), values at it that they pass.
tests/conformance_test.cc holds the C++ and C APIs to the same table.
"""
import inspect
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import cgdr
import cgdr.torch as cgdr_torch
from _helpers import KINDS_DTYPES, dtype_of, f64, gdr_fp64, kind_of, limit, make, packed_inputs, rel_err

NK, NV, DK, DV = 2, 4, 24, 16
LENS = [13, 0, 70]  # packed sequences, an empty one among them; 70 > 64 tokens: every chunk size shows
BATCH = (2, 20)     # B, T of the batched [B, T, H, K] layout
GIVEN = "<given>"   # a tensor parameter's row value: the harness passes the tensor


class Lazy:
    """A row value made from the call's offsets (cu_seqlens) when it runs."""

    def __init__(self, name, make_value):
        self.name, self.make_value = name, make_value

    def __repr__(self):
        return self.name


SAME_OFFSETS = Lazy("same offsets", lambda cu: cu.copy() if isinstance(cu, np.ndarray) else cu.clone())
def moved(i, by):
    """The offsets with offset i moved by `by` tokens."""
    def make_value(cu):
        other = cu.copy() if isinstance(cu, np.ndarray) else cu.clone()
        other[i] += by
        return other
    return Lazy(f"offset {i} moved by {by}", make_value)


OTHER_OFFSETS = moved(1, 1)
AN_ARRAY = Lazy("an array", lambda cu: np.zeros(NV, np.float32))
AN_TENSOR = Lazy("a tensor", lambda cu: torch.zeros(NV))
SLOTS_1D = Lazy("a 1-D index tensor", lambda cu: torch.zeros(4, dtype=torch.int32))
DUP_SLOTS = Lazy("slots 0, 0, 1", lambda cu: torch.tensor([0, 0, 1], dtype=torch.int32))


class Err:
    def __init__(self, pattern, exc=ValueError):
        self.pattern, self.exc = pattern, exc


REF, DIFFERS, SAME = "ref", "differs", "same"


class Row:
    def __init__(self, param, value, check=REF, ctx=None, plant=None, dtype="f32"):
        self.param, self.value, self.check = param, value, check
        self.ctx = dict(ctx or {})
        self.plant, self.dtype = plant, dtype

    def __repr__(self):
        return f"{self.param}={self.value!r}" + (f" over {self.ctx}" if self.ctx else "") + (
            f" ({self.plant})" if self.plant else "")


# ---------------------------------------------------------------- harnesses

def tolerance(precision, ref, dtype):
    """SPEC 6 and 6c: the dtype's limit; twice it for the split modes; bf16 1.5e-2."""
    lim = limit(ref, dtype)
    if precision == "bf16":
        return max(1.5e-2, 2 * lim)
    return 2 * lim if precision in ("bf16x3", "bf16x4") else lim


def problem(kind, dtype, lens, l2norm, layout, plant=None, state_dtype="f32", g_dtype="f32"):
    """Inputs of SPEC 6 (raw q, k rows when l2norm), packed; the state in `layout`.
    Plants: a NaN value, a g > 0, queries of 3e38 (out overflows, the state
    never reads q), a value of 1e8 at sequence 0's last token with an f16
    state (final_state overflows, out stays f32)."""
    T, B = sum(lens), len(lens)
    x = packed_inputs(np.random.default_rng(7), T, NK, NV, DK, DV, B, raw_qk=l2norm)
    if plant == "nan_value":
        x["v"][1, 1, 3] = np.nan
    elif plant == "g_positive":
        x["g"][0, 2] = 0.25
    elif plant == "huge_query":
        x["q"][3, 0, :] = 3e38
    elif plant == "huge_last_value":
        x["v"][lens[0] - 1, 1, :] = 1e8
        state_dtype = "f16"
    state = x["state"] if layout == "kv" else x["state"].transpose(0, 1, 3, 2)
    t = {n: make(kind, dtype, x[n]) for n in ("q", "k", "v", "beta")}
    t["g"] = make(kind, g_dtype, x["g"])
    t["state"] = make(kind, state_dtype, state)
    return t


def reference(t, lens, sem):
    return gdr_fp64(t["q"], t["k"], t["v"], t["beta"], t["g"] if sem["g"] else None,
                    t["state"] if sem["init"] else None, lens, scale=sem["scale"], l2norm=sem["l2norm"],
                    layout=sem["layout"], eps=sem.get("eps", 1e-6))


def given(kw, name, default=None):
    return kw.get(name, default) == GIVEN


class Result:
    """What a call returned, packed to [T, Nv, Dv] / [N, Nv, ...] float64, with its reference."""

    def __init__(self, out, state, ref_out, ref_state, objects, lens, want_state_dtype):
        self.out, self.state, self.ref_out, self.ref_state = out, state, ref_out, ref_state
        self.objects, self.lens, self.want_state_dtype = objects, lens, want_state_dtype


class Prefill:
    """An entry point in fla's layout ([B, T, H, K], cu_seqlens packs B = 1) or
    the packed one; `meaning(kw)` says what its keywords mean."""

    def __init__(self, name, fn, required, kinds, base, meaning, layout="bthk", final_dtype=None, kwargs_names=(),
                 batch=BATCH):
        self.name, self.fn, self.required, self.kinds = name, fn, set(required), kinds
        self.base, self.meaning, self.layout = dict(base), meaning, layout
        self.final_dtype, self.kwargs_names, self.batch = final_dtype, tuple(kwargs_names), batch

    def tensors(self, kind, dtype, kw, plant=None, **dtypes):
        sem = self.meaning(kw)
        lens = LENS if (self.layout == "tnd" or sem["packed"]) else [self.batch[1]] * self.batch[0]
        return problem(kind, dtype, lens, sem["l2norm"], sem["layout"], plant, **dtypes), lens, sem

    def buffers(self, t, lens, sem, kw, B, T):
        """The caller's out= / final_state= buffers a GIVEN row asks for, filled with 7s."""
        kind, bufs = kind_of(t["q"]), {}
        if given(kw, "out"):
            shape = (sum(lens), NV, DV) if self.layout == "tnd" else (B, T, NV, DV)
            bufs["out"] = make(kind, dtype_of(t["q"]), np.full(shape, 7.0))
        if given(kw, "final_state"):
            dims = (NV, DK, DV) if sem["layout"] == "kv" else (NV, DV, DK)
            N = len(lens) if (self.layout == "tnd" or sem["packed"]) else B
            bufs["final_state"] = make(kind, self.final_dtype(t, sem), np.full((N,) + dims, 7.0))
        return bufs

    def call(self, t, lens, sem, kw):
        kind = kind_of(t["q"])
        args = {k: v for k, v in kw.items() if v is not GIVEN}
        g = t["g"] if sem["g"] else None
        init = t["state"] if sem["init"] else None
        if self.layout == "tnd":
            args.pop("g", None)
            args.pop("initial_state", None)
            bufs = self.buffers(t, lens, sem, kw, 1, sum(lens))
            return self.returned(bufs, self.fn(t["q"], t["k"], t["v"], t["beta"], init, lens, g=g, **args, **bufs))
        B, T = (1, sum(lens)) if sem["packed"] else self.batch
        bt = lambda x: None if x is None else x.reshape((B, T) + tuple(x.shape[1:]))
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        cu = torch.from_numpy(cu) if kind == "torch" else cu
        if sem["packed"] and not isinstance(args.get("cu_seqlens"), Lazy):
            args["cu_seqlens"] = cu
        args = {k: v.make_value(cu) if isinstance(v, Lazy) else v for k, v in args.items()}
        for name in ("g", "initial_state"):
            args.pop(name, None)
        if "initial_state" in inspect.signature(self.fn).parameters:
            args["initial_state"] = init
        bufs = self.buffers(t, lens, sem, kw, B, T)
        return self.returned(bufs, self.fn(bt(t["q"]), bt(t["k"]), bt(t["v"]), bt(g), bt(t["beta"]), **args, **bufs))

    @staticmethod
    def returned(bufs, result):
        """result, after checking that the caller's buffers are what came back."""
        for i, name in enumerate(("out", "final_state")):
            if name in bufs:
                assert result[i] is bufs[name], f"{name}= is not the tensor returned"
        return result

    def run(self, t, lens, sem, kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # transpose_state_layout (as fla)
            o, s = self.call(t, lens, sem, kw)
        out = f64(o).reshape(sum(lens), NV, DV)
        ref_out, ref_state = reference(t, lens, sem)
        want = None
        if sem["final"]:
            want = self.final_dtype(t, sem)
        return Result(out, None if s is None else f64(s), ref_out, ref_state, (o, s), lens, want)


class Step:
    """A decode entry point: N = 4 rows on a pool of 5, indices [3, -1, 0, 4]
    (row 1 skipped, pool rows 1 and 2 untouched); its reference is the
    prefill of 4 one-token sequences from the states the live rows name."""
    INDEX = [3, -1, 0, 4]

    def __init__(self, name, fn, required, kinds, base, meaning):
        self.name, self.fn, self.required, self.kinds = name, fn, set(required), kinds
        self.base, self.meaning, self.kwargs_names = dict(base), meaning, ()

    def tensors(self, kind, dtype, kw, plant=None, state_dtype="f32", g_dtype="f32"):
        sem = self.meaning(kw)
        t = problem(kind, dtype, [1, 1, 1, 1], sem["l2norm"], sem["layout"], plant, state_dtype, g_dtype)
        fill = problem("numpy", "f32", [1] * 5, False, sem["layout"])["state"].astype(np.float64)
        for n, i in enumerate(self.INDEX):
            if i >= 0:
                fill[i] = f64(t["state"])[n]
        t["pool"] = make(kind, dtype_of(t["state"]), fill)
        return t, [1, 1, 1, 1], sem

    def call(self, t, lens, sem, kw):
        args = {k: v.make_value(None) if isinstance(v, Lazy) else v
                for k, v in kw.items() if v is not GIVEN and k != "g"}
        if given(kw, "out"):
            args["out"] = make(kind_of(t["q"]), dtype_of(t["q"]), np.full((4, NV, DV), 7.0))
        g = t["g"] if sem["g"] else None
        idx = np.array(self.INDEX, np.int32)
        idx = torch.from_numpy(idx) if kind_of(t["q"]) == "torch" else idx
        o = self.fn(t["q"], t["k"], t["v"], t["beta"], t["pool"], idx, g=g, **args)
        if given(kw, "out"):
            assert o is args["out"], "out= is not the array returned"
        return o

    def run(self, t, lens, sem, kw):
        before = f64(t["pool"]).copy()
        t = dict(t, pool=t["pool"].copy() if isinstance(t["pool"], np.ndarray) else t["pool"].clone())
        o = self.call(t, lens, sem, kw)
        pool = f64(t["pool"])
        np.testing.assert_array_equal(pool[[1, 2]], before[[1, 2]])  # rows no index names
        assert np.all(f64(o)[1] == 0), "the skipped row's out is not zero"
        live = [n for n, i in enumerate(self.INDEX) if i >= 0]
        sem = dict(sem, init=True)
        ref_out, ref_state = reference(t, lens, sem)
        out = f64(o).copy()
        out[1] = ref_out[1]  # no reference for a skipped row (checked zero above)
        state = np.stack([pool[self.INDEX[n]] if n in live else ref_state[n] for n in range(4)])
        return Result(out, state, ref_out, ref_state, (o, t["pool"]), lens, dtype_of(t["pool"]))


def fla_meaning(kw):
    v_first = bool(kw.get("state_v_first") or kw.get("transpose_state_layout"))
    return dict(layout=kw.get("state_layout") or ("vk" if v_first else "kv"), l2norm=kw.get("use_qk_l2norm_in_kernel", False),
                scale=kw.get("scale"), g=given(kw, "g", GIVEN), init=given(kw, "initial_state"),
                final=bool(kw.get("output_final_state")),
                packed=given(kw, "cu_seqlens") or isinstance(kw.get("cu_seqlens"), Lazy),
                precision=kw.get("precision", "auto"), eps=kw.get("qk_l2norm_eps", 1e-6))


def tnd_meaning(kw):
    return dict(layout=kw.get("state_layout", "vk"), l2norm=kw.get("use_qk_l2norm_in_kernel", False),
                scale=kw.get("scale"), g=given(kw, "g"), init=given(kw, "initial_state"),
                final=kw.get("output_final_state", True), packed=True, precision=kw.get("precision", "auto"),
                eps=kw.get("qk_l2norm_eps", 1e-6))


def step_meaning(kw):
    layout = kw.get("state_layout", "vk" if kw.get("state_v_first") else "kv")
    return dict(layout=layout, l2norm=kw.get("use_qk_l2norm_in_kernel", False), scale=kw.get("scale"),
                g=given(kw, "g"), init=True, final=True, packed=True, precision="fp32",
                eps=kw.get("qk_l2norm_eps", 1e-6))


def state_dtype_or(default):
    return lambda t, sem: dtype_of(t["state"]) if sem["init"] else (default or dtype_of(t["q"]))


ENTRIES = {
    "tnd": Prefill("chunk_gated_delta_rule_tnd", cgdr.chunk_gated_delta_rule_tnd,
                   ["query", "key", "value", "beta", "seq_lens"], ("numpy", "torch"),
                   {"g": GIVEN, "initial_state": GIVEN}, tnd_meaning, layout="tnd", final_dtype=state_dtype_or(None)),
    "fla": Prefill("chunk_gated_delta_rule", cgdr.chunk_gated_delta_rule, ["q", "k", "v", "beta"], ("numpy", "torch"),
                   {"initial_state": GIVEN, "output_final_state": True, "cu_seqlens": GIVEN}, fla_meaning,
                   final_dtype=state_dtype_or("f32"),
                   kwargs_names=sorted(cgdr._FLA_UNSUPPORTED) + sorted(cgdr._FLA_IGNORED) + sorted(cgdr._FLA_GATE) + ["transpose_state_layout",
                                                                                               "head_first"]),
    "step": Step("recurrent_step", cgdr.recurrent_step, ["query", "key", "value", "beta", "state_pool", "state_indices"],
                 ("numpy", "torch"), {"g": GIVEN}, step_meaning),
    "torch.chunk": Prefill("cgdr.torch.chunk_gated_delta_rule", cgdr_torch.chunk_gated_delta_rule,
                           ["q", "k", "v", "beta"], ("torch",),
                           {"initial_state": GIVEN, "output_final_state": True, "cu_seqlens": GIVEN}, fla_meaning,
                           final_dtype=state_dtype_or("f32")),
    "torch.step": Step("cgdr.torch.recurrent_step", cgdr_torch.recurrent_step,
                       ["query", "key", "value", "beta", "state_pool", "state_indices"], ("torch",), {"g": GIVEN},
                       step_meaning),
    "dropin.chunk": Prefill("torch_chunk_gated_delta_rule", cgdr_torch.torch_chunk_gated_delta_rule,
                            ["query", "key", "value", "g", "beta"], ("torch",), {}, fla_meaning,
                            final_dtype=lambda t, sem: "f32", kwargs_names=["cu_seqlens", "position_ids"]),
    "dropin.recurrent": Prefill("torch_recurrent_gated_delta_rule", cgdr_torch.torch_recurrent_gated_delta_rule,
                                ["query", "key", "value", "g", "beta"], ("torch",), {}, fla_meaning,
                                final_dtype=lambda t, sem: "f32", kwargs_names=["cu_seqlens", "position_ids"],
                                batch=(3, 1)),  # one token: the decode step on a pool of B states
}

# ---------------------------------------------------------------- the rows

ALGO_ROWS = [Row("algo", a, DIFFERS, ctx={"algo": "chunk16" if a == "chunk64" else "chunk64"})
             for a in ("recurrent", "chunk16", "chunk32", "chunk64", "chunk128")] + [
    Row("algo", "auto", REF, ctx={"algo": "chunk64"})]
VECTOR_BF16X3 = {"precision": "bf16x3", "algo": "chunk16", "engine": "vector"}
NATIVE_OPTION_ROWS = [
    Row("threads", 1, SAME), Row("threads", 3, SAME), Row("threads", 4096, SAME),
    Row("threads", 4097, Err(r"threads: expected None \(all cores\) or an int in \[1, 4096\], got 4097")),
    Row("threads", 0, Err(r"threads: expected None \(all cores\) or an int in \[1, 4096\], got 0")),
    *ALGO_ROWS,
    Row("precision", "fp32", DIFFERS, ctx={"algo": "chunk16", "engine": "amx-emu"}, dtype="f16"),
    *[Row("precision", p, DIFFERS, ctx={"algo": "chunk16", "engine": "vector"}) for p in ("bf16", "bf16x3", "bf16x4")],
    Row("precision", "auto", SAME, ctx={"algo": "chunk16", "precision": "fp32"}),  # f32 inputs: fp32
    # f16 inputs on a tile engine: auto is bf16x3 there, not fp32 (SPEC 6c).
    Row("precision", "auto", DIFFERS, ctx={"algo": "chunk16", "engine": "amx-emu", "precision": "fp32"}, dtype="f16"),
    Row("precision", "fp16", Err(r"precision: expected one of auto, fp32")),
    Row("engine", "vector", DIFFERS, ctx=dict(VECTOR_BF16X3, engine="amx-emu")),
    Row("engine", "amx-emu", DIFFERS, ctx=VECTOR_BF16X3),
    Row("engine", "amx", REF, ctx=VECTOR_BF16X3), Row("engine", "auto", REF, ctx=VECTOR_BF16X3),
    Row("engine", "tiles", Err(r"engine: expected one of auto, vector, amx, amx-emu")),
    Row("v_step", 16, SAME), Row("v_step", 256, SAME),
    Row("v_step", 257, Err(r"options\.v_step: expected 0 \(auto\) \.\. 256, got 257")),
    Row("dk_bucket", -1, REF), Row("dk_bucket", 64, REF), Row("dk_bucket", 128, REF),
    Row("dk_bucket", 72, Err(r"options\.dk_bucket: expected 0 \(auto\), -1 \(generic\) or one of 64, 80, 96, 128 >= "
                             r"Dk = 24, got 72")),
    Row("check_values", True, SAME),
    Row("check_values", True, Err(r"value: non-finite value nan at index \[1, 1, 3\]"), plant="nan_value"),
    Row("check_values", True, Err(r"g: expected log-decay <= 0, got 0\.25"), plant="g_positive"),
    Row("check_values", True, Err(r"^out: non-finite value .* computed from finite inputs"), plant="huge_query"),
    Row("check_values", True, Err(r"^final_state: non-finite value -?inf at index \[0, 1, "), plant="huge_last_value"),
]
# The eps of the q/k norm: read only with use_qk_l2norm_in_kernel (its meaning: test_vllm_dropins.py's FP64 runs).
EPS_ROWS = [Row("qk_l2norm_eps", 1e-2, DIFFERS, ctx={"use_qk_l2norm_in_kernel": True}),
            Row("qk_l2norm_eps", 1e-2, SAME),
            Row("qk_l2norm_eps", 0, Err(r"qk_l2norm_eps: expected a finite number > 0, got 0"))]
# Caller's buffers (out=, final_state=): the same bits, written into them.
BUFFER_ROWS = [Row("out", GIVEN, SAME), Row("final_state", GIVEN, SAME, ctx={"output_final_state": True}),
               Row("final_state", GIVEN, SAME, ctx={"output_final_state": True, "initial_state": GIVEN}),
               Row("final_state", GIVEN, Err(r"final_state: given with output_final_state=False"),
                   ctx={"output_final_state": False})]
COMMON_ROWS = EPS_ROWS + BUFFER_ROWS + [
               Row("scale", 0.37, DIFFERS), Row("scale", -0.5), Row("scale", None, DIFFERS, ctx={"scale": 0.37}),
               Row("scale", 0, Err(r"scale: expected a finite non-zero number or None")),
               Row("use_qk_l2norm_in_kernel", True, REF), Row("initial_state", None, REF)]

ROWS = {
    "tnd": COMMON_ROWS + NATIVE_OPTION_ROWS + [
        Row("state_layout", "kv", REF), Row("state_layout", "xy", Err(r"state_layout: expected 'kv'")),
        Row("g", None, REF), Row("output_final_state", False, REF),
        # Serving (docs/SPEC.md 6d): their meaning is held by python/tests/test_serving.py; here each reaches its check.
        Row("a", AN_ARRAY, Err(r"A_log: required with the raw gate a")),
        Row("A_log", AN_ARRAY, Err(r"A_log: given without the raw gate a")),
        Row("dt_bias", AN_ARRAY, Err(r"A_log: given without the raw gate a")),
        Row("use_beta_sigmoid", False, SAME),
        # KDA's bounded gate (docs/SPEC.md 10; its meaning: python/tests/test_kda.py): needs the raw gate a.
        Row("gate_lower_bound", -5.0, Err(r"options\.gate_lower_bound: given without the raw gate")),
        Row("gate_lower_bound", 1.0, Err(r"gate_lower_bound: expected None or a finite number < 0, got 1\.0")),
        Row("state_indices", [0, 0, 1], Err(r"state_indices: expected distinct non-negative indices")),
        Row("state_slot_stride", 1, Err(r"options\.state_slot_stride: expected 0 \(dense\) or")),
        Row("checkpoint_every", -1, Err(r"checkpoint_every: expected 0 \(none\) or a positive token count, got -1"))],
    "fla": COMMON_ROWS + NATIVE_OPTION_ROWS + [
        Row("g", None, REF), Row("output_final_state", False, REF),
        Row("state_v_first", True, REF), Row("state_layout", "vk", REF),
        Row("state_layout", "kv", Err(r"state_layout: state_v_first=True means 'vk'"), ctx={"state_v_first": True}),
        Row("transpose_state_layout", True, REF),
        Row("cu_seqlens", None, REF),
        *[Row("cu_seqlens", moved(-1, by), Err(rf"cu_seqlens: expected the last offset to be T = {sum(LENS)}, "
                                             rf"got {sum(LENS) + by}")) for by in (-1, 1)],
        Row("cu_seqlens_cpu", SAME_OFFSETS, SAME), Row("cu_seqlens_cpu", OTHER_OFFSETS, Err(r"cu_seqlens_cpu: expected the same")),
        Row("chunk_indices", AN_ARRAY, SAME),
        Row("use_beta_sigmoid_in_kernel", False, SAME),  # True: python/tests/test_serving.py (the FP64 gate)
        Row("allow_neg_eigval", True, Err(r"allow_neg_eigval: not supported by cgdr")),
        Row("cp_context", object(), Err(r"cp_context: not supported by cgdr")),
        Row("use_gate_in_kernel", True, Err(r"A_log: required with the raw gate a")),
        Row("head_first", False, Err(r"head_first: removed from fla")),
        Row("chunk_size", 16, SAME), Row("chunk_size", 128, Err(r"chunk_size: expected 16, 32 or 64")),
        Row("A_log", AN_ARRAY, SAME), Row("dt_bias", AN_ARRAY, SAME),
        # KDA's bounded gate (python/tests/test_kda.py): read only with use_gate_in_kernel, as fla.
        Row("lower_bound", -5.0, SAME),
        Row("lower_bound", 0.0, Err(r"lower_bound: expected None or a finite number < 0, got 0\.0"),
            ctx={"use_gate_in_kernel": True}),
        # Pools and checkpoints (docs/SPEC.md 6d; their meaning: python/tests/test_serving.py), in sglang's name.
        Row("initial_state_indices", [0, 0, 1], Err(r"initial_state_indices: expected distinct non-negative indices")),
        Row("initial_state_indices", [0, 1], Err(r"initial_state_indices: expected N = 3 slots \(one per sequence\)")),
        Row("state_slot_stride", 1, Err(r"options\.state_slot_stride: expected 0 \(dense\) or")),
        Row("checkpoint_every", 0, SAME),
        Row("checkpoint_every", -1, Err(r"checkpoint_every: expected 0 \(none\) or a positive token count, got -1"))],
    "step": EPS_ROWS + [Row("scale", 0.37, DIFFERS), Row("scale", -0.5), Row("use_qk_l2norm_in_kernel", True, REF),
             Row("state_layout", "vk", REF), Row("g", None, REF), Row("out", GIVEN, SAME),
             Row("threads", 1, SAME), Row("threads", 4096, SAME),
             Row("threads", 4097, Err(r"threads: expected None \(all cores\) or an int in \[1, 4096\], got 4097")),
             Row("check_values", True, SAME),
             Row("check_values", True, Err(r"value: non-finite value nan at index \[1, 1, 3\]"), plant="nan_value"),
             # Serving (docs/SPEC.md 6d), held to their meaning by python/tests/test_serving.py.
             Row("a", AN_ARRAY, Err(r"A_log: required with the raw gate a")),
             Row("A_log", AN_ARRAY, Err(r"A_log: given without the raw gate a")),
             Row("dt_bias", AN_ARRAY, Err(r"A_log: given without the raw gate a")),
             Row("use_beta_sigmoid", False, SAME), Row("output_states", False, SAME),
             Row("gate_lower_bound", -5.0, Err(r"options\.gate_lower_bound: given without the raw gate")),
             Row("gate_lower_bound", -0.0, Err(r"gate_lower_bound: expected None or a finite number < 0")),
             Row("dst_indices", [0, 1, 2], Err(r"dst_indices: expected a 2-D sequence of integers")),
             Row("state_slot_stride", 1, Err(r"options\.state_slot_stride: expected 0 \(dense\) or"))],
    "torch.chunk": BUFFER_ROWS + [Row("scale", 0.37, DIFFERS), Row("initial_state", None, REF), Row("output_final_state", False, REF),
                    Row("use_qk_l2norm_in_kernel", True, REF), Row("state_v_first", True, REF), Row("g", None, REF),
                    Row("cu_seqlens", None, REF),
                    # Serving (docs/SPEC.md 6d; their meaning: python/tests/test_torch_ops.py, test_serving.py).
                    Row("use_gate_in_kernel", True, Err(r"A_log: required with the raw gate a")),
                    Row("A_log", AN_TENSOR, SAME), Row("dt_bias", AN_TENSOR, SAME),
                    Row("use_beta_sigmoid_in_kernel", False, SAME),
                    Row("initial_state_indices", DUP_SLOTS,
                        Err(r"initial_state_indices: expected distinct non-negative indices")),
                    Row("state_slot_stride", 1, Err(r"options\.state_slot_stride: expected 0 \(dense\) or")),
                    Row("checkpoint_every", 0, SAME),
                    Row("checkpoint_every", -1,
                        Err(r"checkpoint_every: expected 0 \(none\) or a positive token count"))],
    "torch.step": [Row("scale", 0.37, DIFFERS), Row("use_qk_l2norm_in_kernel", True, REF), Row("state_v_first", True, REF),
                   Row("g", None, REF),
                   Row("a", AN_TENSOR, Err(r"A_log: required with the raw gate a")),
                   Row("A_log", AN_TENSOR, Err(r"A_log: given without the raw gate a")),
                   Row("dt_bias", AN_TENSOR, Err(r"A_log: given without the raw gate a")),
                   Row("use_beta_sigmoid", False, SAME), Row("output_states", False, SAME),
                   Row("dst_indices", SLOTS_1D, Err(r"dst_indices: expected a 2-D sequence of integers")),
                   Row("state_slot_stride", 1, Err(r"options\.state_slot_stride: expected 0 \(dense\) or"))],
    "dropin.chunk": [Row("chunk_size", 16, SAME), Row("chunk_size", 0, Err(r"chunk_size: expected a positive int")),
                     Row("initial_state", GIVEN, REF), Row("output_final_state", True, REF),
                     Row("use_qk_l2norm_in_kernel", True, REF), Row("cu_seqlens", GIVEN, REF),
                     Row("position_ids", None, SAME)],
    "dropin.recurrent": [Row("initial_state", GIVEN, REF), Row("output_final_state", True, REF),
                         Row("use_qk_l2norm_in_kernel", True, REF), Row("cu_seqlens", GIVEN, REF),
                         Row("position_ids", None, SAME)],
}


# ---------------------------------------------------------------- the tests

def row_cases():
    for ep, rows in ROWS.items():
        for row in rows:
            yield pytest.param(ep, row, id=f"{ep}-{row!r}")


def first_kind(entry):
    return entry.kinds[0]


def check_result(r, sem, dtype, kind):
    o = r.objects[0]
    assert kind_of(o) == kind and dtype_of(o) == dtype, "out: wrong kind or dtype"
    assert rel_err(r.out, r.ref_out) <= tolerance(sem["precision"], r.ref_out, dtype), "out"
    if not sem["final"]:
        assert r.state is None, "a final state nobody asked for"
        return
    assert r.state is not None, "no final state"
    state_dtype = dtype_of(r.objects[1])
    assert state_dtype == r.want_state_dtype, f"final state dtype {state_dtype}, expected {r.want_state_dtype}"
    assert rel_err(r.state, r.ref_state) <= tolerance(sem["precision"], r.ref_state, state_dtype), "final state"


@pytest.mark.parametrize("ep,row", list(row_cases()))
def test_row(ep, row):
    e = ENTRIES[ep]
    kind = first_kind(e)
    kw = {**e.base, **row.ctx, row.param: row.value}
    t, lens, sem = e.tensors(kind, row.dtype, kw, row.plant)
    if isinstance(row.check, Err):
        pool = f64(t["pool"]).copy() if "pool" in t else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            with pytest.raises(row.check.exc, match=row.check.pattern) as err:
                e.call(t, lens, sem, kw)
        assert "\n" not in str(err.value), "one line"
        if pool is not None:
            np.testing.assert_array_equal(f64(t["pool"]), pool)  # nothing written
        return
    r = e.run(t, lens, sem, kw)
    check_result(r, sem, row.dtype, kind)
    if row.check in (DIFFERS, SAME):
        ctx_kw = dict(e.base, **row.ctx)
        c = e.run(t, lens, e.meaning(ctx_kw), ctx_kw)
        same = np.array_equal(r.out, c.out) and (r.state is None) == (c.state is None) and (
            r.state is None or np.array_equal(r.state, c.state))
        assert same == (row.check == SAME), "same bits as without it" if same else "other bits than without it"


@pytest.mark.parametrize("ep", list(ENTRIES))
@pytest.mark.parametrize("kind,dtype", KINDS_DTYPES)
def test_every_dtype(ep, kind, dtype):
    """Inputs of each kind and dtype, with states and g of every dtype the kind has."""
    e = ENTRIES[ep]
    if kind not in e.kinds:
        pytest.skip(f"{e.name} takes {' and '.join(e.kinds)} tensors")
    others = ("f16", "f32") if kind == "numpy" else ("f16", "bf16", "f32")
    kw = dict(e.base, output_final_state=True, initial_state=GIVEN)
    if "output_final_state" not in inspect.signature(e.fn).parameters:
        kw.pop("output_final_state")
    for state_dtype in others:
        for g_dtype in others:
            t, lens, sem = e.tensors(kind, dtype, kw, state_dtype=state_dtype, g_dtype=g_dtype)
            r = e.run(t, lens, sem, kw)
            check_result(r, sem, dtype, kind)


@pytest.mark.parametrize("ep", list(ENTRIES))
def test_every_parameter_has_a_row(ep):
    """The entry point's own parameters (and the keywords it takes through
    **kwargs) against the rows: a parameter without a row fails here."""
    e = ENTRIES[ep]
    params = inspect.signature(e.fn).parameters
    named = {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    assert e.required <= named, f"required tensors {e.required - named} are not parameters"
    for n in e.required:
        assert params[n].default is inspect.Parameter.empty, f"{n} has a default: give it a row instead"
    want = (named - e.required) | set(e.kwargs_names)
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        assert e.kwargs_names, f"{e.name} takes **kwargs: list the keywords it reads"
    has = {r.param for r in ROWS[ep]}
    assert sorted(want - has) == [], f"parameters of {e.name} without a row"
    assert sorted(has - want) == [], f"rows for parameters {e.name} does not have"


def options_fields():
    """The fields of cgdr::Options, read from include/cgdr/cgdr.hpp."""
    header = (Path(__file__).resolve().parents[2] / "include" / "cgdr" / "cgdr.hpp").read_text()
    body = re.search(r"struct Options \{(.*?)\n\};", header, re.S).group(1)
    return re.findall(r"^\s*[\w:]+ (\w+) = ", body, re.M)


# The public name of each option where it differs from the C++ field's.
PUBLIC_NAME = {"use_qk_l2norm": "use_qk_l2norm_in_kernel", "gate_lower_bound": "lower_bound"}  # fla's (KDA) name


@pytest.mark.parametrize("ep", ["tnd", "fla"])
def test_every_cpp_option_reaches_python(ep):
    """Every field of cgdr::Options is an argument of the native prefill and a
    parameter of both prefill entry points (whose rows then hold it to its
    meaning)."""
    fields = options_fields()
    assert len(fields) >= 10, f"cannot read struct Options of cgdr.hpp: {fields}"
    native = cgdr._cgdr.prefill.__doc__
    params = inspect.signature(ENTRIES[ep].fn).parameters
    for name in fields:
        assert re.search(rf"\b{name}: ", native), f"_cgdr.prefill has no argument {name}"
        public = PUBLIC_NAME.get(name, name)
        assert public in params or name in params or f"{public}_in_kernel" in params or (
            name == "state_layout" and "state_v_first" in params), \
            f"{ENTRIES[ep].name} has no parameter for Options::{name}"


def strided(x):
    """x's values in a non-contiguous view: every other element of a doubled tensor."""
    return torch.stack([x, x], dim=-1)[..., 0] if isinstance(x, torch.Tensor) else np.stack([x, x], axis=-1)[..., 0]


@pytest.mark.parametrize("ep", list(ENTRIES))
def test_strided_inputs_give_the_same_bits(ep):
    """Every tensor input as a non-contiguous view (the state pool aside: it
    is written in place) gives the bits of the contiguous call."""
    e = ENTRIES[ep]
    kw = dict(e.base, initial_state=GIVEN) if "initial_state" in inspect.signature(e.fn).parameters else dict(e.base)
    t, lens, sem = e.tensors("torch", "f32", kw)
    views = {n: x if n == "pool" else strided(x) for n, x in t.items()}
    assert not any(x.is_contiguous() for n, x in views.items() if n != "pool")
    want, got = e.run(t, lens, sem, kw), e.run(views, lens, sem, kw)
    np.testing.assert_array_equal(got.out, want.out)
    assert (got.state is None) == (want.state is None)
    if want.state is not None:
        np.testing.assert_array_equal(got.state, want.state)
