"""fla's pure-torch references (naive chunk, naive recurrent) against
cgdr.chunk_gated_delta_rule, fla's own layout and argument names, on random
cases: varlen through cu_seqlens, grouped heads, gate, l2norm, initial state,
state_v_first, f32 and bf16. Two rules: fla's (RMS err / RMS ref < 0.005
against each naive reference) and SPEC 6's (normwise error against the FP64
recurrence). fla's naive functions take one head count and no varlen, so the
reference runs them per sequence on q/k repeated per value head and
l2-normalised as fla's kernel does."""
import inspect

import numpy as np
import pytest
import torch

import cgdr
from _fla import chunk_signature, err_ratio, load_naive
from _helpers import gdr_fp64, limit, rel_err

pytest.importorskip("einops")  # fla's naive.py needs it
naive = load_naive()
FLA_TOL = 0.005

# (name, lens (None: B equal sequences), B, T, H, HV, K, V, gate, l2norm, initial state, state_v_first, dtype, scale)
CASES = [
    ("batch_gate_state", None, 2, 100, 4, 4, 64, 64, True, False, True, False, torch.float32, None),
    ("varlen_gqa", [1, 63, 65, 130], 1, None, 2, 4, 128, 128, True, True, True, False, torch.float32, None),
    ("varlen_v_first", [40, 1, 90], 1, None, 2, 8, 64, 128, True, True, True, True, torch.float32, None),
    ("no_gate_no_state", None, 1, 129, 2, 2, 128, 64, False, True, False, False, torch.float32, 0.1),
    ("bf16_gqa_l2norm", [70, 58], 1, None, 2, 4, 128, 128, True, True, True, False, torch.bfloat16, None),
    ("bf16_batch_v_first", None, 2, 64, 1, 2, 64, 64, True, True, True, True, torch.bfloat16, None),
]


def make_case(lens, B, T, H, HV, K, V, gate, l2norm, with_state, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    if lens is not None:
        B, T = 1, sum(lens)
    N = B if lens is None else len(lens)
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.randn(B, T, H, K, generator=gen)
    if not l2norm:  # the kernel is not asked to normalise: give it unit rows (SPEC 6's well-conditioned inputs)
        q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    v = torch.randn(B, T, HV, V, generator=gen)
    beta = torch.rand(B, T, HV, generator=gen) * 0.9 + 0.05
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, HV, generator=gen) + 3.0) if gate else None
    h0 = (torch.rand(N, HV, K, V, generator=gen) - 0.5) if with_state else None
    q, k, v, beta = (x.to(dtype) for x in (q, k, v, beta))
    return q, k, v, g, beta, h0


def fla_l2norm(x):
    """fla's l2norm_fwd: x * rsqrt(sum(x^2) + 1e-6), in FP32."""
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def fla_reference(fn, q, k, v, g, beta, h0, offsets, l2norm, scale):
    """fla's naive `fn` per sequence (offsets along T of one packed row, or
    None for a batch); returns (o like v, state [N, HV, K, V]) in FP32."""
    HV = v.shape[2]
    if l2norm:
        q, k = fla_l2norm(q), fla_l2norm(k)
    q, k = (x.repeat_interleave(HV // x.shape[2], dim=2) for x in (q, k))
    g = torch.zeros(beta.shape) if g is None else g
    pieces = [(0, n, None) for n in range(q.shape[0])] if offsets is None else [(0, a, b) for a, b in offsets]
    outs, states = [], []
    for n, (row, a, b) in enumerate(pieces):
        cut = (lambda x: x[a:a + 1]) if b is None else (lambda x: x[row:row + 1, a:b])
        init = None if h0 is None else h0[n:n + 1].float()
        o, s = fn(cut(q), cut(k), cut(v), beta=cut(beta), g=cut(g), scale=scale, initial_state=init,
                  output_final_state=True)
        outs.append(o.float())
        states.append(s.float())
    return torch.cat(outs, dim=0 if offsets is None else 1), torch.cat(states)


def fp64_reference(q, k, v, g, beta, h0, lens, l2norm, scale):
    """SPEC 1 in FP64 (the project's own) on the packed tensors; kv layout."""
    flat = lambda x: None if x is None else x.double().reshape((-1,) + tuple(x.shape[2:])).numpy()
    o, s = gdr_fp64(flat(q), flat(k), flat(v), flat(beta), flat(g), None if h0 is None else h0.double().numpy(),
                    lens, scale=scale, l2norm=l2norm, layout="kv")
    return o.reshape(tuple(v.shape)), s


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_against_fla_naive(case, figures):
    name, lens, B, T, H, HV, K, V, gate, l2norm, with_state, v_first, dtype, scale = case
    q, k, v, g, beta, h0 = make_case(lens, B, T, H, HV, K, V, gate, l2norm, with_state, dtype, seed=len(name))
    seq = lens if lens is not None else [q.shape[1]] * q.shape[0]
    ends = np.cumsum(seq).tolist()
    offsets = list(zip([0] + ends[:-1], ends)) if lens is not None else None
    cu = torch.tensor([0] + ends, dtype=torch.long) if lens is not None else None
    init = None if h0 is None else (h0.transpose(-1, -2).contiguous() if v_first else h0)

    o, s = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=init, output_final_state=True,
                                       use_qk_l2norm_in_kernel=l2norm, state_v_first=v_first, cu_seqlens=cu)
    assert o.dtype == dtype and tuple(o.shape) == tuple(v.shape)
    s_kv = s.transpose(-1, -2) if v_first else s

    for ref_name, fn in (("naive_chunk", naive.naive_chunk_gated_delta_rule),
                         ("naive_recurrent", naive.naive_recurrent_gated_delta_rule)):
        ro, rs = fla_reference(fn, q, k, v, g, beta, h0, offsets, l2norm, scale)
        eo, es = err_ratio(ro, o), err_ratio(rs, s_kv)
        figures[f"fla {ref_name} RMS ratio o, {name}"] = eo
        figures[f"fla {ref_name} RMS ratio state, {name}"] = es
        assert eo < FLA_TOL and es < FLA_TOL, f"{ref_name}: RMS ratio o {eo:.2e}, state {es:.2e}"

    fo, fs = fp64_reference(q, k, v, g, beta, h0, seq, l2norm, scale)
    dt = {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
    eo64, es64 = rel_err(o, fo), rel_err(s_kv, fs)
    figures[f"SPEC 6 rel err o vs FP64, {name}"] = eo64
    figures[f"SPEC 6 rel err state vs FP64, {name}"] = es64
    assert eo64 <= limit(fo, dt), f"out: {eo64:.2e} > SPEC 6 limit {limit(fo, dt):.2e}"
    assert es64 <= 2e-5, f"final state: {es64:.2e} > 2e-5"


def test_signature_follows_fla():
    """cgdr's fla-layout entry takes fla's positional parameters in fla's
    order with fla's defaults, and answers every key fla reads from **kwargs."""
    params, kwarg_keys = chunk_signature()
    ours = list(inspect.signature(cgdr.chunk_gated_delta_rule).parameters.values())
    assert [p.name for p in ours[:len(params)]] == [n for n, _ in params]
    for (name, default), p in zip(params, ours):
        if default is not None:
            assert p.default == eval(default), f"{name}: fla's default {default}, cgdr's {p.default!r}"
    q, k, v, g, beta, _ = make_case(None, 1, 8, 1, 1, 16, 16, True, True, False, torch.float32, seed=3)
    for key in sorted(kwarg_keys):
        try:
            cgdr.chunk_gated_delta_rule(q, k, v, g, beta, **{key: {"chunk_size": 32}.get(key, None)})
        except ValueError as e:  # rejected features name themselves
            assert str(e).startswith(key), str(e)
