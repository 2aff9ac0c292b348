"""cgdr.chunk_gated_delta_rule (fla layout) and cgdr.chunk_gated_delta_rule_tnd
against the FP64 reference, for numpy and torch inputs of every dtype, odd
head sizes, 1-token tails, varlen, grouped heads and both state layouts."""
import numpy as np
import pytest
import torch

import cgdr
from _helpers import KINDS_DTYPES, dtype_of, f64, gdr_fp64, kind_of, limit, make, packed_inputs, rel_err

DK, DV = 7, 9  # odd on purpose: every SIMD loop has a tail


def to_bt(x, B, T):
    """Packed [B*T, ...] float64 -> [B, T, ...]."""
    return x.reshape((B, T) + x.shape[1:])


@pytest.mark.parametrize("kind,dtype", KINDS_DTYPES)
@pytest.mark.parametrize("layout", ["kv", "vk"])
def test_fla_layout_batch(kind, dtype, layout):
    """[B, T, H, K] inputs, B = 2, T = 65 (a 64-token chunk and a 1-token
    tail), GQA HV = 2 H, initial state, l2norm in the kernel."""
    rng = np.random.default_rng(11)
    B, T, H, HV = 2, 65, 2, 4
    x = packed_inputs(rng, B * T, H, HV, DK, DV, B, raw_qk=True)
    state = x["state"] if layout == "kv" else x["state"].transpose(0, 1, 3, 2)
    q, k, v, beta = (make(kind, dtype, to_bt(x[n], B, T)) for n in ("q", "k", "v", "beta"))
    g = make(kind, "f32", to_bt(x["g"], B, T))
    init = make(kind, "f32", state)
    o, fs = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=init, output_final_state=True,
                                        use_qk_l2norm_in_kernel=True, state_layout=layout)
    assert kind_of(o) == kind and dtype_of(o) == dtype and tuple(o.shape) == (B, T, HV, DV)
    assert dtype_of(fs) == "f32" and tuple(fs.shape) == tuple(init.shape)
    flat = lambda a: f64(a).reshape((B * T,) + tuple(a.shape[2:]))
    ref_o, ref_s = gdr_fp64(flat(q), flat(k), flat(v), flat(beta), flat(g), init, [T] * B, l2norm=True, layout=layout)
    assert rel_err(f64(o).reshape(B * T, HV, DV), ref_o) <= limit(ref_o, dtype)
    assert rel_err(fs, ref_s) <= 2e-5
    np.testing.assert_array_equal(f64(init), make("numpy", "f32", state).astype(np.float64))  # input untouched


@pytest.mark.parametrize("kind,dtype", KINDS_DTYPES)
def test_fla_varlen_cu_seqlens(kind, dtype):
    """Sequences packed along T with cu_seqlens (lengths 1, 64, 0, 65, 3),
    no initial state: the final state is float32 as in fla."""
    rng = np.random.default_rng(12)
    lens = [1, 64, 0, 65, 3]
    T, H, HV = sum(lens), 1, 2
    x = packed_inputs(rng, T, H, HV, DK, DV, len(lens))
    q, k, v, beta = (make(kind, dtype, x[n][None]) for n in ("q", "k", "v", "beta"))
    g = make(kind, "f32", x["g"][None])
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    if kind == "torch":
        cu = torch.from_numpy(cu)
    o, fs = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, cu_seqlens=cu)
    assert tuple(o.shape) == (1, T, HV, DV) and dtype_of(o) == dtype
    assert dtype_of(fs) == "f32" and tuple(fs.shape) == (len(lens), HV, DK, DV)
    ref_o, ref_s = gdr_fp64(f64(q)[0], f64(k)[0], f64(v)[0], f64(beta)[0], f64(g)[0], None, lens, layout="kv")
    assert rel_err(f64(o)[0], ref_o) <= limit(ref_o, dtype)
    assert rel_err(fs, ref_s) <= 2e-5
    assert np.all(f64(fs)[2] == 0)  # the empty sequence keeps its (zero) state


@pytest.mark.parametrize("kind,dtype", KINDS_DTYPES)
@pytest.mark.parametrize("layout", ["vk", "kv"])
def test_tnd_form(kind, dtype, layout):
    """The seeds' packed form: final_state in initial_state's dtype, g
    optional, explicit scale, HV = 2 H."""
    rng = np.random.default_rng(13)
    lens = [17, 1, 33]
    T, Nk, Nv = sum(lens), 2, 4
    x = packed_inputs(rng, T, Nk, Nv, DK, DV, len(lens))
    state = x["state"] if layout == "kv" else x["state"].transpose(0, 1, 3, 2)
    q, k, v, beta = (make(kind, dtype, x[n]) for n in ("q", "k", "v", "beta"))
    init = make(kind, dtype, state)
    out, fs = cgdr.chunk_gated_delta_rule_tnd(q, k, v, beta, init, lens, g=None, scale=0.4, state_layout=layout)
    assert kind_of(out) == kind and dtype_of(out) == dtype and dtype_of(fs) == dtype
    ref_o, ref_s = gdr_fp64(q, k, v, beta, None, init, lens, scale=0.4, layout=layout)
    assert rel_err(out, ref_o) <= limit(ref_o, dtype)
    assert rel_err(fs, ref_s) <= limit(ref_s, dtype)


@pytest.mark.parametrize("kind,dtype", [("numpy", "f16"), ("torch", "bf16")])
def test_tnd_without_initial_state(kind, dtype):
    """No initial state: zeros, and the final state takes query's dtype."""
    rng = np.random.default_rng(14)
    x = packed_inputs(rng, 10, 1, 1, DK, DV, 1)
    q, k, v, beta, g = (make(kind, dtype, x[n]) for n in ("q", "k", "v", "beta", "g"))
    out, fs = cgdr.chunk_gated_delta_rule_tnd(q, k, v, beta, None, np.array([10], np.int32), g=g)
    assert dtype_of(fs) == dtype and tuple(fs.shape) == (1, 1, DV, DK)
    ref_o, ref_s = gdr_fp64(q, k, v, beta, g, None, [10])
    assert rel_err(out, ref_o) <= limit(ref_o, dtype)
    assert rel_err(fs, ref_s) <= limit(ref_s, dtype)
    out2, none = cgdr.chunk_gated_delta_rule_tnd(q, k, v, beta, None, [10], g=g, output_final_state=False)
    assert none is None
    np.testing.assert_array_equal(f64(out2), f64(out))


def test_bf16_fla_without_final_state_has_no_state():
    rng = np.random.default_rng(15)
    x = packed_inputs(rng, 5, 1, 1, DK, DV, 1)
    q, k, v, beta, g = (make("torch", "bf16", x[n][None]) for n in ("q", "k", "v", "beta", "g"))
    o, fs = cgdr.chunk_gated_delta_rule(q, k, v, g, beta)
    assert fs is None and o.dtype == torch.bfloat16


def test_bitwise_same_for_any_thread_count():
    rng = np.random.default_rng(16)
    x = packed_inputs(rng, 300, 2, 4, 32, 24, 3)
    args = [make("numpy", "f32", x[n]) for n in ("q", "k", "v", "beta")]
    init = make("numpy", "f32", x["state"].transpose(0, 1, 3, 2))
    runs = [cgdr.chunk_gated_delta_rule_tnd(*args, init, [100, 150, 50], g=make("numpy", "f32", x["g"]), threads=t)
            for t in (1, 2, 3)]
    for o, s in runs[1:]:
        np.testing.assert_array_equal(o, runs[0][0])
        np.testing.assert_array_equal(s, runs[0][1])


def test_non_contiguous_inputs_are_accepted():
    """Strided inputs are copied to contiguous ones; the result is the same."""
    rng = np.random.default_rng(17)
    x = packed_inputs(rng, 12, 1, 2, DK, DV, 1)
    q = torch.from_numpy(x["q"]).float()
    q_strided = torch.from_numpy(np.repeat(x["q"], 2, axis=0)).float()[::2]  # every other row of a doubled tensor
    assert not q_strided.is_contiguous()
    rest = [torch.from_numpy(x[n]).float() for n in ("k", "v", "beta")]
    a, _ = cgdr.chunk_gated_delta_rule_tnd(q, *rest, None, [12])
    b, _ = cgdr.chunk_gated_delta_rule_tnd(q_strided, *rest, None, [12])
    assert torch.equal(a, b)


def test_zero_copy_inputs_are_not_modified_and_gil_released():
    """Inputs are read in place (never written) and other Python threads run
    while the native call computes."""
    import threading
    import time
    rng = np.random.default_rng(18)
    x = packed_inputs(rng, 8192, 2, 8, 128, 128, 1)  # ~6.4 GFLOP: tens of ms on one core
    arrays = [make("numpy", "f32", x[n]) for n in ("q", "k", "v", "beta", "g")]
    copies = [a.copy() for a in arrays]
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    th = threading.Thread(target=ticker)
    th.start()
    time.sleep(0.01)
    try:
        t0 = time.perf_counter()
        cgdr.chunk_gated_delta_rule_tnd(*arrays[:4], None, [8192], g=arrays[4], threads=1)
        t1 = time.perf_counter()
    finally:
        stop.set()
        th.join()
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c)
    inside = [t for t in ticks if t0 + 0.002 < t < t1 - 0.002]
    # A held GIL allows no tick inside at all; a released one ~1 per ms. One
    # tick is the proof, so a loaded machine that delays the ticker cannot fail it.
    if t1 - t0 < 0.03:
        pytest.skip(f"the call took {t1 - t0:.3f} s: too short to observe the ticker")
    assert len(inside) >= 1, f"{len(inside)} ticks during a {t1 - t0:.3f} s call"


@pytest.mark.parametrize("engine", ["vector", "amx-emu"])
@pytest.mark.parametrize("precision,tol", [("fp32", 2e-5), ("bf16", 1.5e-2), ("bf16x3", 4e-5), ("bf16x4", 4e-5),
                                           ("auto", 2e-5)])
def test_precision_modes(precision, tol, engine):
    """precision= and engine= on both prefill entry points: each mode within
    its tolerance of the FP64 reference (tests/precision_test.cc and
    tests/amx_test.cc state the same ones); auto on f32 inputs is fp32."""
    rng = np.random.default_rng(21)
    lens = [65, 1, 33]
    T, H, HV = sum(lens), 2, 4
    x = packed_inputs(rng, T, H, HV, DK, DV, len(lens))
    q, k, v, beta, g = (make("numpy", "f32", x[n]) for n in ("q", "k", "v", "beta", "g"))
    init = make("numpy", "f32", x["state"].transpose(0, 1, 3, 2))  # vk
    out, fs = cgdr.chunk_gated_delta_rule_tnd(q, k, v, beta, init, lens, g=g, algo="chunk16", precision=precision,
                                              engine=engine)
    ref_o, ref_s = gdr_fp64(f64(q), f64(k), f64(v), f64(beta), f64(g), init, lens, layout="vk")
    assert rel_err(f64(out), ref_o) <= tol
    assert rel_err(fs, ref_s) <= tol
    o2, _ = cgdr.chunk_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], cu_seqlens=np.cumsum([0] + lens),
                                        precision=precision, algo="chunk16", engine=engine)
    assert o2.shape == (1, T, HV, DV)
    with pytest.raises(ValueError, match="precision"):
        cgdr.chunk_gated_delta_rule_tnd(q, k, v, beta, init, lens, g=g, precision="fp16")
    with pytest.raises(ValueError, match="engine"):
        cgdr.chunk_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], engine="tiles")


def test_engine_changes_the_bits_of_bf16x3():
    """engine= reaches the kernel: bf16x3 on the emulated tiles and on the
    vector units are both accurate but not the same bits."""
    rng = np.random.default_rng(22)
    lens = [70]
    x = packed_inputs(rng, sum(lens), 2, 4, DK, DV, len(lens))
    q, k, v, beta, g = (make("numpy", "f32", x[n]) for n in ("q", "k", "v", "beta", "g"))
    runs = [cgdr.chunk_gated_delta_rule_tnd(q, k, v, beta, None, lens, g=g, algo="chunk64", precision="bf16x3",
                                            engine=e)[0] for e in ("vector", "amx-emu")]
    assert not np.array_equal(runs[0], runs[1])


def _vm_flags(address):
    """The VmFlags of the mapping that holds address (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if not head.endswith(":"):  # a mapping's first line: "lo-hi perms ..."
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def _thp_available():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not _thp_available(), reason="the kernel has no transparent huge pages")
def test_new_large_outputs_are_advised_onto_huge_pages(monkeypatch):
    """A new torch output of 64 MiB (a mapping of its own) is advised onto
    transparent huge pages ('hg' in its VmFlags) before its first touch, and
    not with CGDR_HUGE_PAGES=0 (torch alone advises nothing without
    THP_MEM_ALLOC_ENABLE=1)."""
    from cgdr import _tensors
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    n = 32 << 20  # bf16: 64 MiB, above glibc's largest mmap threshold (32 MiB)
    assert "hg" in _vm_flags(_tensors.empty("torch", (n,), "bf16").data_ptr() + 4096)
    monkeypatch.setenv("CGDR_HUGE_PAGES", "0")
    assert "hg" not in _vm_flags(_tensors.empty("torch", (n,), "bf16").data_ptr() + 4096)


def test_huge_page_switch_takes_0_or_1_and_refuses_the_rest(monkeypatch):
    """CGDR_HUGE_PAGES unset or empty keeps the advice on, 0 and 1 are read as
    written, and any other value is a ValueError naming the variable and the
    value, raised as the output is made (before the kernel writes it)."""
    from cgdr import _tensors
    for value, expected in (("", True), ("1", True), ("0", False)):
        monkeypatch.setenv("CGDR_HUGE_PAGES", value)
        assert _tensors.env_switch("CGDR_HUGE_PAGES", True) is expected
    monkeypatch.delenv("CGDR_HUGE_PAGES")
    assert _tensors.env_switch("CGDR_HUGE_PAGES", True) is True
    for value in ("no", "false", "2", " 0"):
        monkeypatch.setenv("CGDR_HUGE_PAGES", value)
        with pytest.raises(ValueError, match=f"CGDR_HUGE_PAGES: expected 0 \\(off\\) or 1 \\(on\\), got '{value}'"):
            _tensors.empty("torch", (8,), "f32")
    x = packed_inputs(np.random.default_rng(5), 4, 1, 1, DK, DV, 1)
    q, k, v, beta, g = (make("torch", "f32", x[n][None]) for n in ("q", "k", "v", "beta", "g"))
    with pytest.raises(ValueError, match="CGDR_HUGE_PAGES"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta)


def test_prefill_outputs_it_allocates_go_through_the_advice(monkeypatch):
    """The torch out and final_state that a call allocates pass through
    advise_huge_pages, by the plain path and by the ops' out= path; a
    caller's buffer does not."""
    from cgdr import _tensors
    import cgdr.torch  # noqa: F401  (the ops)
    seen = []
    real = _tensors.advise_huge_pages
    monkeypatch.setattr(_tensors, "advise_huge_pages", lambda x: seen.append(tuple(x.shape)) or real(x))
    rng = np.random.default_rng(23)
    T, H, HV = 20, 2, 4
    x = packed_inputs(rng, T, H, HV, DK, DV, 1)
    q, k, v, beta, g = (make("torch", "f32", x[n][None]) for n in ("q", "k", "v", "beta", "g"))
    cgdr.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    assert sorted(seen) == [(1, HV, DK, DV), (1, T, HV, DV)]
    fs = torch.empty(1, HV, DK, DV)
    seen.clear()
    cgdr.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, final_state=fs)
    assert seen == [(1, T, HV, DV)]


def test_cpu_description_names_family_and_model():
    """cgdr.cpu_description() (the bench scripts' caption) carries /proc/cpuinfo's
    family and model, which tell Zen 3, 4 and 5 apart where a VM's brand string
    is "AMD EPYC" on all three."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    if "cpu family" not in info:
        pytest.skip("no x86 family in /proc/cpuinfo")
    d = cgdr.cpu_description()
    assert f"(family {info['cpu family']} model {info['model']})" in d, d
    assert d.startswith(info["model name"]), d
