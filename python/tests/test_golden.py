"""cgdr.golden and cgdr.compare (docs/golden.md): golden data and the verdict
by Ascend's precision standard, as the torch-npu test scripts call them."""
import re

import numpy as np
import pytest
import torch

import cgdr
from _helpers import f64, gdr_fp64, make, packed_inputs, rel_err

LENS = [200, 0, 137]
SHAPE = dict(Nk=2, Nv=4, Dk=32, Dv=32)


def case(kind="torch", dtype="bf16"):
    rng = np.random.default_rng(5)
    T = sum(LENS)
    x = packed_inputs(rng, T, SHAPE["Nk"], SHAPE["Nv"], SHAPE["Dk"], SHAPE["Dv"], len(LENS))
    x["g"] = rng.uniform(-1.0, 0.0, (T, SHAPE["Nv"]))  # the operator's documented domain
    state = x["state"].transpose(0, 1, 3, 2)  # vk layout
    return dict(query=make(kind, dtype, x["q"]), key=make(kind, dtype, x["k"]), value=make(kind, dtype, x["v"]),
                beta=make(kind, dtype, x["beta"]), g=make(kind, "f32", x["g"]),
                initial_state=make(kind, dtype, state), seq_lens=LENS)


@pytest.mark.parametrize("kind,dtype", [("numpy", "f16"), ("numpy", "f32"), ("torch", "bf16"), ("torch", "f16")])
def test_golden_kinds_dtypes_and_fp64(kind, dtype):
    c = case(kind, dtype)
    r = cgdr.golden(**c)
    gold, bench = r["golden"], r["benchmark"]
    assert set(r) == {"golden", "benchmark"}
    for name in ("out", "final_state"):
        assert isinstance(gold[name], np.ndarray if kind == "numpy" else torch.Tensor)
        assert gold[name].dtype == (np.float32 if kind == "numpy" else torch.float32)
        assert bench[name].dtype == c["query"].dtype  # the NPU's dtypes
    assert tuple(gold["out"].shape) == (sum(LENS), 4, 32)
    assert tuple(gold["final_state"].shape) == (3, 4, 32, 32)
    # golden is cgdr's exact path: SPEC 6's f32 limit against FP64.
    ref_out, ref_state = gdr_fp64(c["query"], c["key"], c["value"], c["beta"], c["g"], c["initial_state"], LENS)
    assert rel_err(gold["out"], ref_out) <= 2e-5
    assert rel_err(gold["final_state"], ref_state) <= 2e-5


def test_benchmark_passes_and_faults_fail():
    c = case()
    report = cgdr.compare(*(lambda r: (r["golden"], r["benchmark"], r["benchmark"]))(cgdr.golden(**c)),
                          seq_lens=LENS, level="L2")
    assert report["pass"] is True
    where = {"dropped-state": "out", "tail-mask": "final_state", "swapped-heads": "out", "g-sign": "out"}
    for fault, tensor in where.items():
        r = cgdr.golden(**c, fault=fault)
        report = cgdr.compare(r["golden"], r["benchmark"], r["actual"], seq_lens=LENS, level="L0")
        assert report["pass"] is False, fault
        assert report["tensors"][tensor]["levels"]["L0"]["pass"] is False, fault
    # The breakdown names the swapped heads.
    r = cgdr.golden(**c, fault="swapped-heads")
    heads = cgdr.compare(r["golden"], r["benchmark"], r["actual"])["tensors"]["out"]["heads"]
    worst = sorted(heads, key=lambda h: -float(h["rmse_ratio"]))[:2]
    assert {h["head"] for h in worst} == {0, 1}


def test_fp16_operands_use_the_emulation():
    c = case("torch", "f16")
    r = cgdr.golden(**c)  # f16 queries: f16 operands
    e = cgdr.golden(**c, operands="bf16")
    rep = cgdr.compare(r["golden"], e["benchmark"], r["benchmark"], seq_lens=LENS)
    for t in rep["tensors"].values():
        assert t["actual"]["rmse"] < 0.5 * t["benchmark"]["rmse"]  # f16 products: 3 more significand bits
    with pytest.raises(ValueError, match="the kernels have bf16 operands only"):
        cgdr.golden(**c, operands="f16", engine="kernels")


def test_compare_metrics_by_hand():
    g = np.array([1.0, -2.0, 0.5, 0.001, 4.0], dtype=np.float32).reshape(1, 1, 5)
    x = np.array([1.0 + 2**-7, -2.0, 0.5 - 2**-7, 0.00125, 4.5], dtype=np.float32).reshape(1, 1, 5)
    rep = cgdr.compare({"out": g}, {"out": g}, (x,), dtype="bf16")
    a = rep["tensors"]["out"]["actual"]
    rel = [2**-7 / 1.001, 0.0, 2**-7 / 0.501, 0.5 / 4.001]  # |x - g| / (|g| + 1e-3); 0.001 < 2^-8 is a small value
    assert a["mare"] == pytest.approx(max(rel), rel=1e-12)
    assert a["mere"] == pytest.approx(sum(rel) / 4, rel=1e-12)
    assert a["rmse"] == pytest.approx(np.sqrt((2 * 2**-14 + 0.25) / 4), rel=1e-12)
    assert a["small_value_errors"] == 1 and a["small_values"] == 1
    assert a["max_abs_error"] == 0.5 and a["max_abs_index"] == [0, 0, 4]
    # The benchmark is exact: the ratios divide by the floor, bf16's unit roundoff 2^-8.
    assert rep["tensors"]["out"]["ratio"]["mare"] == pytest.approx(max(rel) / 2**-8, rel=1e-12)
    assert rep["pass"] is False and "final_state" not in rep["tensors"]


def test_bad_arguments():
    c = case()
    with pytest.raises(ValueError, match="fault: expected one of"):
        cgdr.golden(**c, fault="typo")
    with pytest.raises(ValueError, match="operands: expected 'bf16' or 'f16'"):
        cgdr.golden(**c, operands="fp8")
    # The options of every entry point (issue 19): short errors, NaN refused, never pybind's argument dump.
    for kwargs, want in (({"threads": 2**40}, "threads: expected None (all cores) or an int in [1, 4096]"),
                         ({"scale": float("nan")}, "scale: expected a finite non-zero number")):
        with pytest.raises(ValueError, match=re.escape(want)) as e:
            cgdr.golden(**c, **kwargs)
        assert len(str(e.value)) < 200, str(e.value)
    r = cgdr.golden(**c)
    with pytest.raises(ValueError, match=re.escape("threads: expected None")):
        cgdr.compare(r["golden"], r["benchmark"], r["benchmark"], threads=0)
    with pytest.raises(ValueError, match="level: expected 'L0', 'L1' or 'L2', got 'L9'"):
        cgdr.compare(r["golden"], r["benchmark"], r["benchmark"], level="L9")
    with pytest.raises(ValueError, match="seq_lens: expected the lengths to sum to T = 337"):
        cgdr.compare(r["golden"], r["benchmark"], r["benchmark"], seq_lens=[1, 2, 3])
    with pytest.raises(ValueError, match="'out' has shape"):
        cgdr.compare(r["golden"], r["benchmark"], {"out": r["benchmark"]["out"][:10]})
    with pytest.raises(ValueError, match="expected a mapping with 'out'"):
        cgdr.compare(r["golden"], r["benchmark"], {"o": 1})
    with pytest.raises(TypeError, match="expected numpy dtype float16 or float32, got float64"):
        cgdr.compare(r["golden"], r["benchmark"], (f64(r["benchmark"]["out"]),))
