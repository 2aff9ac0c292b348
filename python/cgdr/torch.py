"""Drop-ins for the pure-torch gated delta rule of transformers' Qwen3-Next
(transformers/models/qwen3_next/modeling_qwen3_next.py), same signatures,
layouts and return dtypes:

    torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64,
        initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False)
    torch_recurrent_gated_delta_rule(query, key, value, g, beta, initial_state,
        output_final_state, use_qk_l2norm_in_kernel=False)

query/key [B, T, H, K], value [B, T, H, V] (grouped heads with H_v a
multiple of H_k work too), g/beta [B, T, H]; the output is [B, T, H, V] in
query's dtype, the final state float32 [B, H, K, V] (or None). The scale is
1/sqrt(K) and the optional q/k l2norm uses eps 1e-6, as there. Tensors must be
on the CPU; no autograd graph is recorded. The caller's tensors are never
modified.

chunk_size is accepted for compatibility only: cgdr's planner chooses the
formulation, and results agree with any chunk size to FP32 rounding.
"""
import torch

from . import _cgdr
from . import _tensors as _t

_NATIVE = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}

__all__ = ["torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"]


def _check(query, key, value, g, beta):
    for name, x in (("query", query), ("key", key), ("value", value), ("g", g), ("beta", beta)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        if x.device.type != "cpu":
            raise TypeError(f"{name}: expected a CPU tensor, got device {x.device}")
    for name, x, rank, dims in (("query", query, 4, "[B, T, H, K]"), ("key", key, 4, "[B, T, H, K]"),
                                ("value", value, 4, "[B, T, H, V]"), ("g", g, 3, "[B, T, H]"),
                                ("beta", beta, 3, "[B, T, H]")):
        _t.check_rank(name, x, rank, dims)
    B, T = query.shape[:2]
    if B < 1:
        raise ValueError(f"query: expected a batch of B >= 1 sequences ([B, T, H, K]), got B = 0 "
                         f"(shape {list(query.shape)})")
    for name, x in (("key", key), ("value", value), ("g", g), ("beta", beta)):
        if tuple(x.shape[:2]) != (B, T):
            raise ValueError(f"{name}: expected leading dimensions [B, T] = [{B}, {T}] as query, got {list(x.shape)}")


def _token_tensors(query, key, value, g, beta):
    """q, k, v, beta in one dtype cgdr takes (theirs when they agree on one,
    else float32 as transformers computes), g in any float dtype cgdr takes;
    all contiguous and detached (views when nothing needs changing)."""
    dts = {query.dtype, key.dtype, value.dtype, beta.dtype}
    dt = query.dtype if len(dts) == 1 and query.dtype in _NATIVE else torch.float32
    q, k, v, b = (_t.contiguous_input(n, x.to(dt)) for n, x in
                  (("query", query), ("key", key), ("value", value), ("beta", beta)))
    gc = _t.contiguous_input("g", g if g.dtype in _NATIVE else g.to(torch.float32))
    return q, k, v, gc, b


def _state_buffer(initial_state, shape):
    """A fresh float32 [B, H, K, V] state: a copy of initial_state or zeros."""
    if initial_state is None:
        return torch.zeros(shape, dtype=torch.float32)
    if not isinstance(initial_state, torch.Tensor):
        raise TypeError(f"initial_state: expected a torch.Tensor or None, got {type(initial_state).__name__}")
    if tuple(initial_state.shape) != tuple(shape):
        raise ValueError(f"initial_state: expected shape [B, H, K, V] = {list(shape)}, got {list(initial_state.shape)}")
    return initial_state.detach().to(device="cpu", dtype=torch.float32, copy=True).contiguous()


def _flat(x, n):
    """[B, T, ...] -> [n, ...] view of a contiguous tensor, keeping its own trailing dims."""
    return x.view((n,) + tuple(x.shape[2:]))


def _prefill(q, k, v, g, b, state, l2norm):
    """Runs the B sequences of T tokens; `state` (float32, kv) is updated in place."""
    B, T = q.shape[:2]
    HV, V = v.shape[2], v.shape[3]
    out = torch.empty((B, T, HV, V), dtype=q.dtype)
    lens = _t.int32_vector("seq_lens", [T] * B)
    st = _t.native("initial_state", state)
    n = B * T
    _cgdr.prefill(_t.native("query", _flat(q, n)), _t.native("key", _flat(k, n)), _t.native("value", _flat(v, n)),
                  _t.native("beta", _flat(b, n)), _t.native("g", _flat(g, n)), st, lens,
                  _t.native("out", _flat(out, n)), st, 0.0, bool(l2norm), "kv", 0, "auto", False)
    return out


def _decode(q, k, v, g, b, state, l2norm):
    """One token for each of the B sequences; `state` is the pool (row b = sequence b)."""
    B = q.shape[0]
    HV, V = v.shape[2], v.shape[3]
    out = torch.empty((B, 1, HV, V), dtype=q.dtype)
    idx = _t.int32_vector("state_indices", list(range(B)))
    _cgdr.decode_step(_t.native("query", _flat(q, B)), _t.native("key", _flat(k, B)), _t.native("value", _flat(v, B)),
                      _t.native("beta", _flat(b, B)), _t.native("g", _flat(g, B)), _t.native("state_pool", state), idx,
                      _t.native("out", _flat(out, B)), 0.0, bool(l2norm), "kv", 0, False)
    return out


def _run(query, key, value, g, beta, initial_state, output_final_state, l2norm, prefer_decode):
    _check(query, key, value, g, beta)
    q, k, v, gc, b = _token_tensors(query, key, value, g, beta)
    B, T = q.shape[:2]
    shape = (B, v.shape[2], q.shape[3], v.shape[3])
    if initial_state is None and not output_final_state and not (prefer_decode and T == 1):
        state = None  # nothing to read or keep: no state buffer at all
    else:
        state = _state_buffer(initial_state, shape)
    if state is not None and prefer_decode and T == 1:
        out = _decode(q, k, v, gc, b, state, l2norm)
    else:
        out = _prefill(q, k, v, gc, b, state, l2norm)
    out = out.to(query.dtype)
    return out, (state if output_final_state else None)


def torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                                 output_final_state=False, use_qk_l2norm_in_kernel=False):
    """transformers' torch_chunk_gated_delta_rule, computed by cgdr."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    return _run(query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel, False)


def torch_recurrent_gated_delta_rule(query, key, value, g, beta, initial_state, output_final_state,
                                     use_qk_l2norm_in_kernel=False):
    """transformers' torch_recurrent_gated_delta_rule, computed by cgdr (one
    token: the decode step on a pool of B states; more: the prefill)."""
    return _run(query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel, True)
