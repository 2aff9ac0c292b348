"""KDA (Kimi Delta Attention, docs/SPEC.md 10): cgdr.chunk_kda and
cgdr.fused_recurrent_kda, fla's drop-ins with the per-channel gate g [B, T,
HV, K], judged by the FP64 torch reference (cgdr.reference_torch, token by
token) on odd head sizes, grouped heads, packed sequences with an empty one,
both state layouts, the gate in the kernel (softplus and bounded) and bad
input. python/tests_clients/test_kda_fla.py checks the same against fla's own
references."""
import numpy as np
import pytest
import torch

import cgdr
import cgdr.torch as ct
from cgdr import reference_torch as R
from _helpers import limit, rel_err

ENTRIES = [cgdr.chunk_kda, cgdr.fused_recurrent_kda]


def unit(x):
    return x / x.norm(dim=-1, keepdim=True)


def make(B, T, H, HV, K, V, N=None, seed=0, state=True, raw_gate=False):
    """Well-conditioned inputs (SPEC 6: unit q/k rows, beta in (0.05, 0.95),
    decays in (-0.3, 0)); g is the raw gate a with raw_gate."""
    gen = torch.Generator().manual_seed(seed)
    q, k = unit(torch.randn(B, T, H, K, generator=gen)), unit(torch.randn(B, T, H, K, generator=gen))
    v = torch.randn(B, T, HV, V, generator=gen)
    beta = torch.rand(B, T, HV, generator=gen) * 0.9 + 0.05
    g = (torch.randn(B, T, HV, K, generator=gen) if raw_gate else -torch.rand(B, T, HV, K, generator=gen) * 0.3)
    h0 = torch.rand(N or B, HV, K, V, generator=gen) - 0.5 if state else None
    return q, k, v, g, beta, h0


def reference(q, k, v, g, beta, h0, lens=None, l2norm=False, scale=None, v_first=False):
    """FP64 (o [B, T, HV, V], final [N, HV, K, V], or [N, HV, V, K] with v_first) from h0 [N, HV, K, V];
    lens: packed sequences of a [1, T] row."""
    if lens is None:
        o, s = R.recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                            use_qk_l2norm_in_kernel=l2norm, scale=scale, dtype=torch.float64)
    else:
        outs, states, t0 = [], [], 0
        for n, L in enumerate(lens):
            sl = slice(t0, t0 + L)
            init = None if h0 is None else h0[n:n + 1]
            o, s = R.recurrent_gated_delta_rule(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl],
                                                initial_state=init, output_final_state=True,
                                                use_qk_l2norm_in_kernel=l2norm, scale=scale, dtype=torch.float64)
            outs.append(o)
            states.append(s)
            t0 += L
        o, s = torch.cat(outs, dim=1), torch.cat(states)
    return o.numpy(), (s.transpose(-1, -2) if v_first else s).numpy()


def check(o, s, ro, rs, dtype="f32"):
    assert rel_err(o, ro) <= limit(ro, dtype), rel_err(o, ro)
    assert rel_err(s, rs) <= limit(rs, "f32"), rel_err(s, rs)  # the state is FP32 (from a float32 or no h0)


@pytest.mark.parametrize("fn", ENTRIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("B,T,H,HV,K,V,l2norm,state,v_first", [
    (2, 37, 2, 4, 17, 100, False, True, False),   # odd K, GQA, kv state
    (1, 70, 1, 1, 100, 17, True, True, True),     # odd V, l2norm, vk state
    (2, 20, 3, 3, 64, 64, False, False, False),   # no initial state
])
def test_batch_matches_fp64(fn, B, T, H, HV, K, V, l2norm, state, v_first):
    q, k, v, g, beta, h0 = make(B, T, H, HV, K, V, state=state)
    if l2norm:
        q, k = q * 3.0, k * 0.5  # rows the kernel normalises
    init = None if h0 is None else (h0.transpose(-1, -2).contiguous() if v_first else h0)
    o, s = fn(q, k, v, g, beta, initial_state=init, output_final_state=True, use_qk_l2norm_in_kernel=l2norm,
              state_v_first=v_first)
    assert o.shape == (B, T, HV, V) and o.dtype == torch.float32
    assert s.shape == ((B, HV, V, K) if v_first else (B, HV, K, V)) and s.dtype == torch.float32
    check(o, s, *reference(q, k, v, g, beta, h0, l2norm=l2norm, v_first=v_first))


@pytest.mark.parametrize("fn", ENTRIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("state", [True, False])
def test_varlen_with_an_empty_sequence(fn, state):
    lens = [5, 0, 40, 1, 19]
    q, k, v, g, beta, h0 = make(1, sum(lens), 2, 4, 33, 20, N=len(lens), state=state, seed=3)
    cu = torch.tensor([0] + list(np.cumsum(lens)))
    o, s = fn(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu, scale=0.4)
    ro, rs = reference(q, k, v, g, beta, h0, lens=lens, scale=0.4)
    check(o, s, ro, rs)
    # the empty sequence keeps its initial state (zeros without one)
    want = h0[1] if state else torch.zeros(4, 33, 20)
    assert torch.equal(s[1], want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_inputs(dtype):
    q, k, v, g, beta, h0 = make(1, 50, 2, 4, 17, 24, seed=5)
    q, k, v, beta = (x.to(dtype) for x in (q, k, v, beta))
    o, s = cgdr.chunk_kda(q, k, v, g.to(dtype), beta, initial_state=h0, output_final_state=True)
    assert o.dtype == dtype and s.dtype == torch.float32
    ro, rs = reference(q, k, v, g.to(dtype), beta, h0)
    check(o, s, ro, rs, {torch.bfloat16: "bf16", torch.float16: "f16"}[dtype])


@pytest.mark.parametrize("precision,engine", [("bf16x3", "amx-emu"), ("bf16x4", "vector"), ("auto", "amx-emu")])
def test_precision_modes_and_the_tile_engine(precision, engine):
    """The modes of SPEC 6c reach KDA on both engines (SPEC 10.4): bf16
    inputs within their rounding, as fp32, and a result of their own."""
    q, k, v, g, beta, h0 = make(1, 70, 2, 4, 40, 24, seed=8)
    q, k, v, beta, g = (x.to(torch.bfloat16) for x in (q, k, v, beta, g))
    o, s = cgdr.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True, algo="chunk32",
                          precision=precision, engine=engine)
    check(o, s, *reference(q, k, v, g, beta, h0), "bf16")
    o32, s32 = cgdr.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True, algo="chunk32",
                              precision="fp32")
    assert not torch.equal(s, s32)  # the mode's products, not fp32's


def test_numpy_arrays():
    q, k, v, g, beta, h0 = make(2, 21, 1, 2, 17, 9, seed=6)
    o, s = cgdr.chunk_kda(*(x.numpy() for x in (q, k, v, g, beta)), initial_state=h0.numpy(),
                          output_final_state=True)
    assert isinstance(o, np.ndarray) and isinstance(s, np.ndarray)
    check(o, s, *reference(q, k, v, g, beta, h0))


@pytest.mark.parametrize("fn", ENTRIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("lower_bound,with_a_log,flat_bias", [
    (None, True, True), (None, True, False), (-5.0, True, True), (-3.0, False, True), (-1.5, True, False)])
def test_gate_in_kernel(fn, lower_bound, with_a_log, flat_bias):
    """use_gate_in_kernel: g is the raw gate; the softplus gate, and with
    lower_bound the bounded one (A_log may then be absent); dt_bias [HV * K] or [HV, K]."""
    HV, K = 4, 17
    q, k, v, a, beta, h0 = make(2, 30, 2, HV, K, 11, raw_gate=True, seed=7)
    gen = torch.Generator().manual_seed(8)
    A_log = torch.rand(HV, generator=gen) - 1.0 if with_a_log else None
    dt_bias = torch.randn(HV * K, generator=gen) * 0.5
    g = R.kda_gate(a, A_log, dt_bias, lower_bound)
    o, s = fn(q, k, v, a, beta, initial_state=h0, output_final_state=True, use_gate_in_kernel=True, A_log=A_log,
              dt_bias=dt_bias if flat_bias else dt_bias.reshape(HV, K), lower_bound=lower_bound)
    check(o, s, *reference(q, k, v, g, beta, h0))
    if lower_bound is not None:  # the bounded gate differs from the softplus one
        g2 = R.kda_gate(a, A_log if with_a_log else torch.zeros(HV), dt_bias)
        assert rel_err(o, reference(q, k, v, g2, beta, h0)[0]) > 1e-3


@pytest.mark.parametrize("allow_neg_eigval", [False, True])
def test_beta_sigmoid_in_kernel(allow_neg_eigval):
    q, k, v, g, b, h0 = make(1, 25, 1, 2, 17, 10, seed=9)
    b = (b - 0.5) * 6  # raw logits
    o, s = cgdr.chunk_kda(q, k, v, g, b, initial_state=h0, output_final_state=True, use_beta_sigmoid_in_kernel=True,
                          allow_neg_eigval=allow_neg_eigval)
    beta = R.sigmoid_beta(b, 2.0 if allow_neg_eigval else 1.0)
    check(o, s, *reference(q, k, v, g, beta, h0))


def test_lower_bound_is_ignored_without_the_gate_in_kernel():
    """As fla: lower_bound (and A_log, dt_bias) only matter with use_gate_in_kernel."""
    q, k, v, g, beta, h0 = make(1, 12, 1, 1, 17, 5)
    o1, s1 = cgdr.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    o2, s2 = cgdr.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True, lower_bound=-5.0,
                            safe_gate=True, A_log=torch.zeros(1))
    assert torch.equal(o1, o2) and torch.equal(s1, s2)


def test_fla_keywords_accepted_and_ignored():
    q, k, v, g, beta, h0 = make(1, 12, 1, 2, 17, 5)
    want = cgdr.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    got = cgdr.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True, disable_recompute=True,
                         use_graph=True, max_num_seqs=1, chunk_size=32, cu_seqlens=torch.tensor([0, 12]),
                         cu_seqlens_cpu=torch.tensor([0, 12]))
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert cgdr.chunk_kda(q, k, v, g, beta)[1] is None
    got = cgdr.fused_recurrent_kda(q, k, v, g, beta, None, None, None, h0, True)  # fla's positional order
    assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_checkpoints_and_pools():
    """cgdr's serving keywords work with the per-channel gate: checkpoints are prefix final states."""
    q, k, v, g, beta, h0 = make(1, 40, 1, 2, 17, 6, seed=11)
    o, s, ck = cgdr.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True, checkpoint_every=16,
                              algo="recurrent")
    assert ck.shape == (2, 2, 17, 6)
    _, s16 = cgdr.chunk_kda(q[:, :16], k[:, :16], v[:, :16], g[:, :16], beta[:, :16], initial_state=h0,
                            output_final_state=True, algo="recurrent")
    assert torch.equal(ck[0], s16[0])
    pool = torch.cat([torch.zeros_like(h0), h0])
    o2, fin = cgdr.chunk_kda(q, k, v, g, beta, initial_state=pool, output_final_state=True,
                             initial_state_indices=torch.tensor([1], dtype=torch.int32), algo="recurrent")
    assert fin is pool and torch.equal(o2, o) and torch.equal(pool[1], s[0]) and not pool[0].any()


def test_scalar_entry_takes_the_per_channel_gate():
    """chunk_gated_delta_rule (and _tnd) read g [.., HV, K] as KDA's gate: the same bits as chunk_kda."""
    q, k, v, g, beta, h0 = make(2, 15, 1, 2, 17, 8)
    want = cgdr.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    got = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    o, _ = cgdr.chunk_gated_delta_rule_tnd(q[:1, :, :].reshape(15, 1, 17), k[:1].reshape(15, 1, 17),
                                           v[:1].reshape(15, 2, 8), beta[:1].reshape(15, 2), h0[:1], [15],
                                           g=g[:1].reshape(15, 2, 17), state_layout="kv")
    assert torch.equal(o, want[0][:1].reshape(15, 2, 8))


def test_tnd_gate_lower_bound():
    """chunk_gated_delta_rule_tnd's gate_lower_bound is chunk_kda's lower_bound."""
    q, k, v, a, beta, h0 = make(1, 20, 1, 2, 17, 8, raw_gate=True)
    dt_bias = torch.linspace(-1, 1, 34)
    want = cgdr.chunk_kda(q, k, v, a, beta, initial_state=h0, output_final_state=True, use_gate_in_kernel=True,
                          dt_bias=dt_bias, lower_bound=-2.0)
    o, s = cgdr.chunk_gated_delta_rule_tnd(q[0], k[0], v[0], beta[0], h0, [20], state_layout="kv", a=a[0],
                                           dt_bias=dt_bias, gate_lower_bound=-2.0)
    assert torch.equal(o, want[0][0]) and torch.equal(s, want[1])
    with pytest.raises(ValueError, match=r"gate_lower_bound: expected None or a finite number < 0"):
        cgdr.chunk_gated_delta_rule_tnd(q[0], k[0], v[0], beta[0], h0, [20], a=a[0], dt_bias=dt_bias,
                                        gate_lower_bound=1.0)


def test_decode_per_channel_gate():
    """recurrent_step with g [N, Nv, Dk]: one KDA token per sequence, the pool in place."""
    q, k, v, g, beta, h0 = make(3, 1, 1, 2, 17, 8, seed=12)
    pool = torch.cat([h0, torch.zeros_like(h0[:1])]).transpose(-1, -2).contiguous()  # vk layout, 4 slots
    before = pool.clone()
    idx = torch.tensor([2, -1, 0], dtype=torch.int32)
    out = cgdr.recurrent_step(q[:, 0], k[:, 0], v[:, 0], beta[:, 0], pool, idx, g=g[:, 0], state_layout="vk")
    ro, rs = reference(q[[0, 2]], k[[0, 2]], v[[0, 2]], g[[0, 2]], beta[[0, 2]], before[[2, 0]].transpose(-1, -2), v_first=True)
    assert rel_err(out[[0, 2]], ro[:, 0]) <= 2e-5 and not out[1].any()
    assert rel_err(pool[[2, 0]], rs) <= 2e-5 and torch.equal(pool[[1, 3]], before[[1, 3]])


def test_torch_wrappers_match_the_package_entry_points():
    """cgdr.torch's KDA (the custom ops on torch >= 2.4, else eagerly): the bits of the package's."""
    q, k, v, a, beta, h0 = make(2, 19, 1, 2, 17, 8, raw_gate=True)
    kw = dict(initial_state=h0, output_final_state=True, use_gate_in_kernel=True, A_log=torch.zeros(2),
              dt_bias=torch.zeros(34), lower_bound=-4.0, use_qk_l2norm_in_kernel=True)
    for wrapper, entry in ((ct.chunk_kda, cgdr.chunk_kda), (ct.fused_recurrent_kda, cgdr.fused_recurrent_kda)):
        got, want = wrapper(q, k, v, a, beta, **kw), entry(q, k, v, a, beta, **kw)
        assert all(torch.equal(x, y) for x, y in zip(got, want))
        assert wrapper(q, k, v, -a.abs(), beta)[1] is None
        got = wrapper(q, k, v, -a.abs(), beta, checkpoint_every=8)
        assert len(got) == 3 and got[2].shape == (4, 2, 17, 8)


BAD = [
    (dict(g="scalar"), ValueError, r"g: expected rank 4 \[B, T, HV, K\], got rank 3"),
    (dict(g="short"), ValueError, r"g: expected shape \[B, T, HV, K\] = \[1, 9, 2, 17\], got \[1, 9, 2, 16\]"),
    (dict(g=None), ValueError, r"g: expected the per-channel gate"),
    (dict(beta="wrong"), ValueError, r"beta: expected shape \[B, T, HV\]"),
    (dict(use_gate_in_kernel=True), ValueError, r"A_log: required with the raw gate a"),
    (dict(use_gate_in_kernel=True, A_log=torch.zeros(2), dt_bias=torch.zeros(2)), ValueError, r"dt_bias: "),
    (dict(use_gate_in_kernel=True, A_log=torch.zeros(3)), ValueError, r"A_log: "),
    (dict(use_gate_in_kernel=True, lower_bound=0.5), ValueError, r"lower_bound: expected None or a finite number < 0"),
    (dict(use_gate_in_kernel=True, lower_bound=0.0), ValueError, r"lower_bound: expected None or a finite number < 0"),
    (dict(use_gate_in_kernel=True, lower_bound="x"), TypeError, r"lower_bound: expected a number or None"),
    (dict(allow_neg_eigval=True), ValueError, r"allow_neg_eigval: True requires use_beta_sigmoid_in_kernel=True"),
    (dict(g="f64"), TypeError, r"g: expected torch dtype"),
    (dict(initial_state="wrong"), ValueError, r"initial_state: "),
    (dict(cu_seqlens=torch.tensor([0, 4, 8])), ValueError, r"cu_seqlens: expected the last offset to be T = 9"),
    (dict(not_an_fla_argument=1), TypeError, r"unexpected keyword argument 'not_an_fla_argument'"),
]


@pytest.mark.parametrize("fn", ENTRIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kw,error,pattern", BAD, ids=[p for _, _, p in BAD])
def test_bad_input_names_the_tensor(fn, kw, error, pattern):
    q, k, v, g, beta, h0 = make(1, 9, 1, 2, 17, 8)
    kw = dict(kw)
    special = {"scalar": g[..., 0], "short": g[..., :16].contiguous(), "f64": g.double(), "wrong": None}
    for name in ("g", "beta", "initial_state"):
        if isinstance(kw.get(name), str):
            kw[name] = special[kw[name]] if kw[name] != "wrong" else {"beta": beta[:, :, :1],
                                                                     "initial_state": h0[:, :, :4]}[name]
    g_arg = kw.pop("g", g)
    beta_arg = kw.pop("beta", beta)
    init = kw.pop("initial_state", h0)
    out = torch.full((1, 9, 2, 8), 7.0)
    with pytest.raises(error, match=pattern):
        fn(q, k, v, g_arg, beta_arg, initial_state=init, output_final_state=True, out=out, **kw)
    assert (out == 7.0).all()  # nothing written


@pytest.mark.parametrize("kw,pattern", [
    (dict(cp_context=object()), r"cp_context: not supported by cgdr"),
    (dict(return_intermediate_states=True), r"return_intermediate_states: not supported by cgdr"),
    (dict(use_gate_in_kernel=True, safe_gate=True, A_log=torch.zeros(2)),
     r"lower_bound: required with safe_gate=True and use_gate_in_kernel=True"),
    (dict(use_gate_in_kernel=True, safe_gate=True, lower_bound=-6.0), r"lower_bound: expected the safe range \[-5, 0\)"),
    (dict(chunk_size=16), r"chunk_size: expected 32 or 64"),
    (dict(head_first=True), r"head_first: removed from fla"),
])
def test_chunk_kda_refuses_what_it_lacks(kw, pattern):
    q, k, v, g, beta, h0 = make(1, 9, 1, 2, 17, 8)
    with pytest.raises(ValueError, match=pattern):
        cgdr.chunk_kda(q, k, v, g, beta, **kw)
    with pytest.raises(ValueError, match=pattern):
        ct.chunk_kda(q, k, v, g, beta, **kw)


@pytest.mark.parametrize("name", ["ssm_state_indices", "num_accepted_tokens", "inplace_final_state"])
def test_fused_recurrent_kda_refuses_the_decode_arguments(name):
    q, k, v, g, beta, h0 = make(1, 9, 1, 2, 17, 8)
    value = True if name == "inplace_final_state" else torch.zeros(1, dtype=torch.int32)
    for fn in (cgdr.fused_recurrent_kda, ct.fused_recurrent_kda):
        with pytest.raises(ValueError, match=rf"{name}: not supported by cgdr.fused_recurrent_kda \("):
            fn(q, k, v, g, beta, initial_state=h0, **{name: value})
    with pytest.raises(TypeError, match=r"fused_recurrent_kda\(\) got an unexpected keyword argument 'chunk_size'"):
        cgdr.fused_recurrent_kda(q, k, v, g, beta, chunk_size=64)
