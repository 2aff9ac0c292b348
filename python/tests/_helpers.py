"""Shared by the Python tests: input generation in every kind/dtype, the FP64
reference of SPEC 1 on packed tensors, and SPEC 6 error limits."""
import numpy as np
import torch

# (kind, dtype) combinations every entry point must accept.
KINDS_DTYPES = [("numpy", "f16"), ("numpy", "f32"), ("torch", "f16"), ("torch", "bf16"), ("torch", "f32")]
_TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
_NUMPY = {"f16": np.float16, "f32": np.float32}


def make(kind, dtype, x):
    """float64 numpy x stored as (kind, dtype)."""
    if kind == "numpy":
        return np.ascontiguousarray(x.astype(_NUMPY[dtype]))
    return torch.from_numpy(np.ascontiguousarray(x)).to(_TORCH[dtype])


def f64(x):
    """Any tensor as float64 numpy (exact for every supported dtype)."""
    if isinstance(x, np.ndarray):
        return x.astype(np.float64)
    return x.detach().to(torch.float64).numpy()


def dtype_of(x):
    if isinstance(x, np.ndarray):
        return {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32"}[x.dtype]
    return {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}[x.dtype]


def kind_of(x):
    return "numpy" if isinstance(x, np.ndarray) else "torch"


def round_to(x, dtype):
    """float64 x rounded to dtype (round to nearest even) and back."""
    if dtype == "f32":
        return x.astype(np.float32).astype(np.float64)
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float64)
    return torch.from_numpy(x).to(torch.bfloat16).to(torch.float64).numpy()


def rel_err(x, ref):
    x = f64(x)
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(x - ref) / (den if den > 0 else 1.0))


def limit(ref, dtype):
    """SPEC 6: 2e-5 in f32; for 16-bit storage, 2x the error of rounding the
    FP64 answer itself to that dtype."""
    if dtype == "f32":
        return 2e-5
    return 2.0 * rel_err(round_to(ref, dtype), ref) + 1e-6


def unit_rows(rng, shape):
    x = rng.standard_normal(shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def packed_inputs(rng, T, Nk, Nv, Dk, Dv, B, raw_qk=False):
    """Well-conditioned float64 inputs of SPEC 6 in the packed layout."""
    qk = (lambda s: rng.standard_normal(s)) if raw_qk else (lambda s: unit_rows(rng, s))
    return dict(q=qk((T, Nk, Dk)), k=qk((T, Nk, Dk)), v=rng.standard_normal((T, Nv, Dv)),
                beta=rng.uniform(0.05, 0.95, (T, Nv)), g=rng.uniform(-0.3, 0.0, (T, Nv)),
                state=rng.uniform(-0.5, 0.5, (B, Nv, Dk, Dv)))


def gdr_fp64(q, k, v, beta, g, initial_state, seq_lens, scale=None, l2norm=False, layout="vk", eps=1e-6):
    """SPEC 1 in FP64. q, k [T, Nk, Dk]; v [T, Nv, Dv]; beta, g [T, Nv] (g may
    be None); initial_state [B, Nv, ...] in `layout` or None. Returns
    (out [T, Nv, Dv], final_state [B, Nv, ...] in `layout`)."""
    q, k, v, beta = f64(q), f64(k), f64(v), f64(beta)
    g = np.zeros_like(beta) if g is None else f64(g)
    T, Nk, Dk = q.shape
    Nv, Dv = v.shape[1:]
    if l2norm:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + eps)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + eps)
    q, k = np.repeat(q, Nv // Nk, axis=1), np.repeat(k, Nv // Nk, axis=1)  # head h reads q/k head h // group
    scale = 1.0 / np.sqrt(Dk) if scale is None else scale
    out = np.zeros((T, Nv, Dv))
    finals = []
    t0 = 0
    for b, n in enumerate(int(x) for x in seq_lens):
        if initial_state is None:
            S = np.zeros((Nv, Dk, Dv))
        else:
            s0 = f64(initial_state)[b]
            S = s0.copy() if layout == "kv" else s0.transpose(0, 2, 1).copy()
        for t in range(t0, t0 + n):
            S *= np.exp(g[t])[:, None, None]
            u = beta[t][:, None] * (v[t] - np.einsum("hkv,hk->hv", S, k[t]))
            S += k[t][:, :, None] * u[:, None, :]
            out[t] = scale * np.einsum("hkv,hk->hv", S, q[t])
        finals.append(S if layout == "kv" else S.transpose(0, 2, 1))
        t0 += n
    return out, np.stack(finals)
