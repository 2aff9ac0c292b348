"""fla's KDA references (fla.ops.kda: naive_recurrent_kda, naive_chunk_kda,
naive_kda_gate, naive_kda_lowerbound_gate) against cgdr.chunk_kda and
cgdr.fused_recurrent_kda in fla's layout and names: grouped heads, odd head
sizes, packed sequences (fla's naive functions take none: they run per
sequence), l2norm (applied before them, as fla's kernel does), both state
layouts, f32 and bf16, the gate in the kernel with and without a lower bound.
Two rules, as test_fla_oracle.py: fla's (RMS err / RMS ref < 0.005) and
SPEC 6's against the FP64 reference. fla 0.6's chunk_kda itself is Triton and
does not run on a CPU. Also: the two entries take fla's parameters in fla's
order with its defaults, and answer every key fla reads from **kwargs."""
import inspect
import warnings

import numpy as np
import pytest
import torch

import cgdr
from _fla import chunk_signature, err_ratio, load_kda
from _helpers import limit, rel_err
from cgdr import reference_torch as R

pytest.importorskip("einops")  # fla's naive.py needs it
fla = load_kda()
FLA_TOL = 0.005

# (name, lens (None: B equal sequences), B, T, H, HV, K, V, l2norm, initial state, state_v_first, dtype)
CASES = [
    ("batch_gqa_odd_k", None, 2, 64, 2, 4, 17, 100, False, True, False, torch.float32),
    ("varlen_odd_v", [16, 0, 48, 32], 1, None, 1, 2, 100, 17, True, True, False, torch.float32),
    ("varlen_v_first", [32, 16], 1, None, 2, 2, 64, 64, True, True, True, torch.float32),
    ("no_state", None, 1, 48, 2, 2, 128, 64, True, False, False, torch.float32),
    ("bf16_gqa", [32, 32], 1, None, 2, 4, 64, 48, True, True, False, torch.bfloat16),
]


def make_case(lens, B, T, H, HV, K, V, l2norm, with_state, dtype, seed, raw_gate=False):
    gen = torch.Generator().manual_seed(seed)
    if lens is not None:
        B, T = 1, sum(lens)
    N = B if lens is None else len(lens)
    q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
    if not l2norm:
        q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    v = torch.randn(B, T, HV, V, generator=gen)
    beta = torch.rand(B, T, HV, generator=gen) * 0.9 + 0.05
    raw = torch.randn(B, T, HV, K, generator=gen)
    g = raw if raw_gate else torch.nn.functional.logsigmoid(raw + 3.0)  # fla's tests' decays
    h0 = (torch.rand(N, HV, K, V, generator=gen) - 0.5) if with_state else None
    q, k, v, beta = (x.to(dtype) for x in (q, k, v, beta))
    return q, k, v, g, beta, h0


def fla_l2norm(x):
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def per_sequence(fn, q, k, v, g, beta, h0, lens, l2norm, dtype=None, **kw):
    """fn (fla's naive or the FP64 reference) per sequence; returns (o, state [N, HV, K, V])."""
    if l2norm:
        q, k = fla_l2norm(q), fla_l2norm(k)
    rows = [(n, slice(None)) for n in range(q.shape[0])] if lens is None else \
        [(0, slice(a, a + L)) for a, L in zip(np.cumsum([0] + lens[:-1]).tolist(), lens)]
    outs, states = [], []
    for n, (b, sl) in enumerate(rows):
        cut = lambda x: x[b:b + 1, sl]  # noqa: E731
        init = None if h0 is None else h0[n:n + 1].float()
        args = [cut(x) if dtype is None else cut(x).to(dtype) for x in (q, k, v, g, beta)]
        o, s = fn(*args, initial_state=init if dtype is None else None if init is None else init.to(dtype),
                  output_final_state=True, **kw)
        outs.append(o.double())
        states.append(s.double())
    return torch.cat(outs, dim=0 if lens is None else 1), torch.cat(states)


def fp64(q, k, v, g, beta, h0, lens, l2norm):
    def fn(q, k, v, g, beta, initial_state, output_final_state):
        return R.recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=initial_state, output_final_state=True,
                                            dtype=torch.float64)
    return per_sequence(fn, q.double(), k.double(), v.double(), g.double(), beta.double(),
                        None if h0 is None else h0.double(), lens, l2norm)


@pytest.mark.parametrize("entry", [cgdr.chunk_kda, cgdr.fused_recurrent_kda], ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_against_fla_naive_kda(entry, case, figures):
    name, lens, B, T, H, HV, K, V, l2norm, with_state, v_first, dtype = case
    q, k, v, g, beta, h0 = make_case(lens, B, T, H, HV, K, V, l2norm, with_state, dtype, seed=len(name))
    cu = None if lens is None else torch.tensor([0] + np.cumsum(lens).tolist())
    init = None if h0 is None else (h0.transpose(-1, -2).contiguous() if v_first else h0)
    o, s = entry(q, k, v, g, beta, initial_state=init, output_final_state=True, use_qk_l2norm_in_kernel=l2norm,
                 state_v_first=v_first, cu_seqlens=cu)
    assert o.dtype == dtype and tuple(o.shape) == tuple(v.shape)
    s_kv = s.transpose(-1, -2) if v_first else s
    refs = [("naive_recurrent_kda", fla.naive_recurrent_kda, {})]
    if all(L % 16 == 0 for L in (lens or [T])):  # naive_chunk_kda takes whole chunks only
        refs.append(("naive_chunk_kda", fla.naive_chunk_kda, {"chunk_size": 16}))
    for ref_name, fn, kw in refs:
        ro, rs = per_sequence(fn, q, k, v, g, beta, h0, lens, l2norm, **kw)
        eo, es = err_ratio(ro, o), err_ratio(rs, s_kv)
        figures[f"fla {ref_name} RMS ratio o, {entry.__name__} {name}"] = eo
        assert eo < FLA_TOL and es < FLA_TOL, f"{ref_name}: RMS ratio o {eo:.2e}, state {es:.2e}"
    fo, fs = fp64(q, k, v, g, beta, h0, lens, l2norm)
    dt = {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
    assert rel_err(o, fo.numpy()) <= limit(fo.numpy(), dt)
    assert rel_err(s_kv, fs.numpy()) <= 2e-5


def test_fp64_reference_is_fla_naive():
    """cgdr.reference_torch's per-channel gate computes what fla's naive_recurrent_kda does (in FP64 both)."""
    q, k, v, g, beta, h0 = make_case(None, 2, 20, 1, 2, 17, 9, False, True, torch.float32, seed=1)
    d = lambda x: x.double()  # noqa: E731
    fo, fs = fla.naive_recurrent_kda(d(q), d(k), d(v), d(g), d(beta), initial_state=d(h0), output_final_state=True)
    ro, rs = R.recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                          dtype=torch.float64)
    # naive_recurrent_kda computes in float32 whatever it is given (x.to(torch.float))
    assert rel_err(fo, ro.numpy()) < 1e-6 and rel_err(fs, rs.numpy()) < 1e-6


@pytest.mark.parametrize("entry", [cgdr.chunk_kda, cgdr.fused_recurrent_kda], ids=lambda f: f.__name__)
@pytest.mark.parametrize("lower_bound,with_a_log", [(None, True), (-5.0, True), (-5.0, False), (-2.0, True)])
def test_gate_in_kernel_against_fla_gates(entry, lower_bound, with_a_log, figures):
    HV, K = 4, 33
    q, k, v, a, beta, h0 = make_case([16, 40], 1, None, 2, HV, K, 24, True, True, torch.float32, seed=4,
                                     raw_gate=True)
    gen = torch.Generator().manual_seed(5)
    A_log = (torch.rand(HV, generator=gen) - 0.5) if with_a_log else None
    dt_bias = torch.randn(HV * K, generator=gen) * 0.5
    if lower_bound is None:
        g = fla.naive_kda_gate(a, A_log, dt_bias)
    else:
        g = fla.naive_kda_lowerbound_gate(a, A_log, dt_bias, lower_bound=lower_bound)
    mine = R.kda_gate(a, A_log, dt_bias, lower_bound)
    assert rel_err(g, mine.numpy()) < 1e-6  # the FP64 reference's gate is fla's
    extra = {"safe_gate": True} if entry is cgdr.chunk_kda and lower_bound is not None else {}
    o, s = entry(q, k, v, a, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                 use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias, lower_bound=lower_bound,
                 cu_seqlens=torch.tensor([0, 16, 56]), **extra)
    ro, rs = per_sequence(fla.naive_recurrent_kda, q, k, v, g, beta, h0, [16, 40], True)
    eo = err_ratio(ro, o)
    figures[f"fla naive_recurrent_kda RMS ratio o, {entry.__name__} gate {lower_bound} A_log {with_a_log}"] = eo
    assert eo < FLA_TOL and err_ratio(rs, s) < FLA_TOL
    fo, fs = fp64(q, k, v, mine, beta, h0, [16, 40], True)
    assert rel_err(o, fo.numpy()) <= 2e-5 and rel_err(s, fs.numpy()) <= 2e-5


@pytest.mark.parametrize("entry,module,name", [
    (cgdr.chunk_kda, ("kda", "chunk.py"), "chunk_kda"),
    (cgdr.fused_recurrent_kda, ("kda", "fused_recurrent.py"), "fused_recurrent_kda")])
def test_signature_follows_fla(entry, module, name):
    """fla's positional parameters in fla's order with fla's defaults; every
    key fla reads from **kwargs is accepted or refused by name."""
    params, kwarg_keys = chunk_signature(module, name)
    ours = list(inspect.signature(entry).parameters.values())
    assert [p.name for p in ours[:len(params)]] == [n for n, _ in params]
    for (pname, default), p in zip(params, ours):
        if default is not None:
            assert p.default == eval(default), f"{pname}: fla's default {default}, cgdr's {p.default!r}"
    q, k, v, g, beta, _ = make_case(None, 1, 8, 1, 1, 16, 16, True, False, torch.float32, seed=3)
    for key in sorted(kwarg_keys):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # transpose_state_layout, as in fla
                entry(q, k, v, g, beta, **{key: {"chunk_size": 32, "transpose_state_layout": False}.get(key, None)})
        except ValueError as e:  # rejected features name themselves
            assert str(e).startswith(key), str(e)
