"""Inputs shaped as vLLM-CPU passes them to its GDN ops, and the FP64 judge
(SPEC 1 token by token, vLLM's eps 1e-5 and gate), for the tests of
cgdr.vllm against vLLM's own compiled ops."""
import numpy as np
import torch

EPS = 1e-5  # vLLM-CPU's l2norm eps


def pool_storage(P, HV, D, seed, gap_heads=1):
    """[P, HV + gap_heads, D, D] float32 random storage; its view [:, :HV] is a
    pool whose slots are further apart than one slot, like vLLM's ssm_state."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn((P, HV + gap_heads, D, D), generator=g) * 0.1


def gate_params(HV, seed):
    g = torch.Generator().manual_seed(seed)
    A_log = torch.rand(HV, generator=g) * 2 - 1            # float32, as the model's parameter
    dt_bias = (torch.randn(HV, generator=g) * 0.5).bfloat16()
    return A_log, dt_bias


def tokens(T, H, HV, D, seed, dtype=torch.bfloat16):
    """q, k [T, H, D], v [T, HV, D], raw gate a and b [T, HV], all in dtype,
    q/k raw (vLLM normalises them in the kernel)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(s, generator=g).to(dtype)  # noqa: E731
    return r(T, H, D), r(T, H, D), r(T, HV, D), r(T, HV), r(T, HV)


def gate_fp64(a, b, A_log, dt_bias):
    a, b = a.double(), b.double()
    x = a + dt_bias.double()
    softplus = torch.where(x > 20, x, torch.log1p(torch.exp(torch.clamp(x, max=20))))
    return -torch.exp(A_log.double()) * softplus, torch.sigmoid(b)


def run_fp64(S, q, k, v, g, beta, D):
    """Tokens of one sequence from the states S [HV, K, V] (float64): returns
    (out [T, HV, V], the state after each token [T, HV, K, V])."""
    HV, H = v.shape[1], q.shape[1]
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + EPS)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + EPS)
    q, k = q.repeat_interleave(HV // H, dim=1), k.repeat_interleave(HV // H, dim=1)
    S = S.double().clone()
    outs, states = [], []
    for t in range(q.shape[0]):
        S = S * torch.exp(g[t])[:, None, None]
        u = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", S, k[t]))
        S = S + k[t][:, :, None] * u[:, None, :]
        outs.append(torch.einsum("hkv,hk->hv", S, q[t]) / D ** 0.5)
        states.append(S.clone())
    if not outs:
        return torch.zeros((0,) + tuple(v.shape[1:]), dtype=torch.float64), S[None][:0]
    return torch.stack(outs), torch.stack(states)


def rel(x, ref):
    ref = ref.double()
    den = ref.norm()
    return float((x.double() - ref).norm() / (den if den > 0 else 1.0))


def untouched(before, after, HV, used):
    """True when the storages before/after [P, HV + gap, K, V] agree bit for
    bit everywhere but the pool heads [:HV] of the slots `used`."""
    keep = torch.ones_like(before, dtype=torch.bool)
    keep[sorted(set(int(u) for u in used)), :HV] = False
    return torch.equal(before[keep], after[keep])
