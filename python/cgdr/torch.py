"""cgdr for torch: custom ops, transformers drop-ins, and the transformers patch.

Custom ops (torch >= 2.4, registered through torch.library with fake
implementations, so torch.compile(fullgraph=True) traces them):

    torch.ops.cgdr.chunk_gated_delta_rule(q, k, v, g, beta, scale, initial_state, cu_seqlens,
        use_qk_l2norm_in_kernel, state_v_first, use_gate_in_kernel, A_log, dt_bias,
        use_beta_sigmoid_in_kernel, checkpoint_every, state_slot_stride) -> (o, final_state, checkpoint_states)
    torch.ops.cgdr.chunk_gated_delta_rule_pool(q, k, v, g, beta, initial_state, initial_state_indices,
        scale, cu_seqlens, use_qk_l2norm_in_kernel, state_v_first, output_final_state,
        use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, state_slot_stride,
        checkpoint_every) -> (o, checkpoint_states)        (the pool initial_state updated in place)
    torch.ops.cgdr.chunk_gated_delta_rule_out(q, k, v, g, beta, out, final_state, scale, initial_state,
        cu_seqlens, use_qk_l2norm_in_kernel, state_v_first, output_final_state, use_gate_in_kernel, A_log,
        dt_bias, use_beta_sigmoid_in_kernel, checkpoint_every, state_slot_stride)
        -> (final_state or [0, HV, ...], checkpoint_states)  (o into out, the state into final_state if given)
    torch.ops.cgdr.chunk_gated_delta_rule_pool_out(q, k, v, g, beta, initial_state, initial_state_indices, out,
        <the pool op's arguments>) -> checkpoint_states     (o into out, the pool updated in place)
    torch.ops.cgdr.recurrent_step(query, key, value, beta, state_pool, state_indices, g, scale,
        use_qk_l2norm_in_kernel, state_v_first, a, A_log, dt_bias, use_beta_sigmoid, dst_indices,
        state_slot_stride) -> out                           (state_pool updated in place)
    torch.ops.cgdr.recurrent_step_states(query, key, value, beta, state_pool, state_indices, g, scale,
        use_qk_l2norm_in_kernel, state_v_first, a, A_log, dt_bias, use_beta_sigmoid,
        state_slot_stride) -> (out, states)                 (verify with dense per-token states)

    torch.ops.cgdr.chunk_kda(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel,
        state_v_first, use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval,
        lower_bound, checkpoint_every, state_slot_stride) -> (o, final_state, checkpoint_states)
    torch.ops.cgdr.fused_recurrent_kda(<chunk_kda's arguments>) -> (o, final_state, checkpoint_states)
        (KDA, the per-channel gate g [B, T, HV, K]: fla's chunk_kda and fused_recurrent_kda)

Every argument after state_v_first has a default; checkpoint_states is
[0, HV, ...] without checkpoint_every (docs/SPEC.md 6d).

chunk_gated_delta_rule() and recurrent_step() below call them with keyword
defaults (on older torch they call the same code directly, eagerly).

Drop-ins for the pure-torch gated delta rule of transformers' Qwen3-Next,
Qwen3.5 and kin (transformers/models/qwen3_next/modeling_qwen3_next.py), same
signatures, layouts and return dtypes:

    torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64,
        initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs)
    torch_recurrent_gated_delta_rule(query, key, value, g, beta, initial_state=None,
        output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs)

query/key [B, T, H, K], value [B, T, H, V] (grouped heads with H_v a
multiple of H_k work too), g/beta [B, T, H]; the output is [B, T, H, V] in
query's dtype, the final state float32 [B, H, K, V] (or None). The scale is
1/sqrt(K) and the optional q/k l2norm uses eps 1e-6, as there. Tensors must be
on the CPU; no autograd graph is recorded. The caller's tensors are never
modified. kwargs: cu_seqlens (N+1 offsets of sequences packed along T, B = 1,
which transformers' torch fallback refuses) is honoured, anything else is
ignored as transformers' own dispatcher does.

chunk_size is accepted for compatibility only: cgdr's planner chooses the
formulation, and results agree with any chunk size to FP32 rounding.

patch_transformers() points transformers' layers at these drop-ins.
"""
import importlib
import sys
from typing import Optional, Tuple

import torch

import cgdr as _cgdr_api

from . import _tensors as _t

_NATIVE = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}

__all__ = ["chunk_gated_delta_rule", "recurrent_step", "chunk_kda", "fused_recurrent_kda", "torch_chunk_gated_delta_rule",
           "torch_recurrent_gated_delta_rule", "patch_transformers", "HAS_CUSTOM_OPS"]


# ----------------------------------------------------------------- the ops

def _state_layout(state_v_first):
    """cgdr's state_layout of fla's state_v_first."""
    return "vk" if state_v_first else "kv"


def _state_dims(q, v, state_v_first):
    K, HV, V = q.shape[3], v.shape[2], v.shape[3]
    return (HV, V, K) if state_v_first else (HV, K, V)


def _prefill(q, k, v, g, beta, gate, **kwargs):
    """cgdr.chunk_gated_delta_rule with `gate` = (use_gate_in_kernel, A_log,
    dt_bias, use_beta_sigmoid_in_kernel), fla's gate keywords (docs/SPEC.md
    6d): the body of every prefill op."""
    use_gate, A_log, dt_bias, beta_sigmoid = gate
    return _cgdr_api.chunk_gated_delta_rule(q, k, v, g, beta, **kwargs, use_gate_in_kernel=use_gate, A_log=A_log,
                                            dt_bias=dt_bias, use_beta_sigmoid_in_kernel=beta_sigmoid)


def _no_states(q, v, state_v_first):
    """[0, HV, ...] float32: a state output the call has none of (new each
    time: an op's outputs may not alias one another)."""
    return q.new_empty((0,) + _state_dims(q, v, state_v_first), dtype=torch.float32)


def _chunk_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: Optional[torch.Tensor], beta: torch.Tensor,
                 scale: Optional[float] = None, initial_state: Optional[torch.Tensor] = None,
                 cu_seqlens: Optional[torch.Tensor] = None, use_qk_l2norm_in_kernel: bool = False,
                 state_v_first: bool = False, use_gate_in_kernel: bool = False, A_log: Optional[torch.Tensor] = None,
                 dt_bias: Optional[torch.Tensor] = None, use_beta_sigmoid_in_kernel: bool = False,
                 checkpoint_every: int = 0,
                 state_slot_stride: int = 0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fla's layout ([B, T, H, K] ...); always returns the final state and the
    checkpoint states ([0, HV, ...] without checkpoint_every): new tensors
    only, as a custom op's outputs may not alias its inputs."""
    r = _prefill(q, k, v, g, beta, (use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel), scale=scale,
                 initial_state=initial_state, output_final_state=True, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                 state_v_first=state_v_first, cu_seqlens=cu_seqlens, checkpoint_every=checkpoint_every,
                 state_slot_stride=state_slot_stride)
    return r if len(r) == 3 else (*r, _no_states(q, v, state_v_first))


def _checkpoint_rows(q, cu_seqlens, checkpoint_every):
    """Rows of checkpoint_states for a fake kernel: static for [B, T] inputs,
    data-dependent (an unbacked size) for packed sequences."""
    if checkpoint_every <= 0:
        return 0
    if cu_seqlens is None:
        return q.shape[0] * (q.shape[1] // checkpoint_every)
    return torch.library.get_ctx().new_dynamic_size()


def _chunk_fake(q, k, v, g, beta, scale=None, initial_state=None, cu_seqlens=None, use_qk_l2norm_in_kernel=False,
                state_v_first=False, use_gate_in_kernel=False, A_log=None, dt_bias=None,
                use_beta_sigmoid_in_kernel=False, checkpoint_every=0, state_slot_stride=0):
    B, T = q.shape[:2]
    HV, V = v.shape[2], v.shape[3]
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    state_dtype = torch.float32 if initial_state is None else initial_state.dtype
    dims = _state_dims(q, v, state_v_first)
    return (q.new_empty((B, T, HV, V)), q.new_empty((N,) + dims, dtype=state_dtype),
            q.new_empty((_checkpoint_rows(q, cu_seqlens, checkpoint_every),) + dims, dtype=torch.float32))


def _chunk_pool_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: Optional[torch.Tensor],
                      beta: torch.Tensor, initial_state: torch.Tensor, initial_state_indices: torch.Tensor,
                      scale: Optional[float] = None, cu_seqlens: Optional[torch.Tensor] = None,
                      use_qk_l2norm_in_kernel: bool = False, state_v_first: bool = False,
                      output_final_state: bool = True, use_gate_in_kernel: bool = False,
                      A_log: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
                      use_beta_sigmoid_in_kernel: bool = False, state_slot_stride: int = 0,
                      checkpoint_every: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """A prefill on a state pool (docs/SPEC.md 6d): initial_state [P, HV, ...]
    is read at slots initial_state_indices and, with output_final_state,
    written there in place. Returns (o, checkpoint_states)."""
    r = _prefill(q, k, v, g, beta, (use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel), scale=scale,
                 initial_state=initial_state, output_final_state=output_final_state,
                 use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_v_first=state_v_first, cu_seqlens=cu_seqlens,
                 initial_state_indices=initial_state_indices, state_slot_stride=state_slot_stride,
                 checkpoint_every=checkpoint_every)
    return r[0], (r[2] if len(r) == 3 else _no_states(q, v, state_v_first))


def _chunk_pool_fake(q, k, v, g, beta, initial_state, initial_state_indices, scale=None, cu_seqlens=None,
                     use_qk_l2norm_in_kernel=False, state_v_first=False, output_final_state=True,
                     use_gate_in_kernel=False, A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False,
                     state_slot_stride=0, checkpoint_every=0):
    B, T = q.shape[:2]
    dims = _state_dims(q, v, state_v_first)
    return (q.new_empty((B, T) + tuple(v.shape[2:])),
            q.new_empty((_checkpoint_rows(q, cu_seqlens, checkpoint_every),) + dims, dtype=torch.float32))


def _step_eager(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, beta: torch.Tensor,
                state_pool: torch.Tensor, state_indices: torch.Tensor, g: Optional[torch.Tensor] = None,
                scale: Optional[float] = None, use_qk_l2norm_in_kernel: bool = False,
                state_v_first: bool = False, a: Optional[torch.Tensor] = None, A_log: Optional[torch.Tensor] = None,
                dt_bias: Optional[torch.Tensor] = None, use_beta_sigmoid: bool = False,
                dst_indices: Optional[torch.Tensor] = None, state_slot_stride: int = 0) -> torch.Tensor:
    """cgdr.recurrent_step: one token per sequence (or K: verify), state_pool updated in place."""
    return _cgdr_api.recurrent_step(query, key, value, beta, state_pool, state_indices, g=g, scale=scale,
                                    use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                                    state_layout=_state_layout(state_v_first), a=a, A_log=A_log, dt_bias=dt_bias,
                                    use_beta_sigmoid=use_beta_sigmoid, dst_indices=dst_indices,
                                    state_slot_stride=state_slot_stride)


def _step_fake(query, key, value, beta, state_pool, state_indices, g=None, scale=None, use_qk_l2norm_in_kernel=False,
               state_v_first=False, a=None, A_log=None, dt_bias=None, use_beta_sigmoid=False, dst_indices=None,
               state_slot_stride=0):
    return query.new_empty(tuple(value.shape))


def _step_states_eager(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, beta: torch.Tensor,
                       state_pool: torch.Tensor, state_indices: torch.Tensor, g: Optional[torch.Tensor] = None,
                       scale: Optional[float] = None, use_qk_l2norm_in_kernel: bool = False,
                       state_v_first: bool = False, a: Optional[torch.Tensor] = None,
                       A_log: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
                       use_beta_sigmoid: bool = False, state_slot_stride: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Verify with dense per-token states (docs/SPEC.md 6d): (out, states
    [N * K, Nv, ...]); the pool is only read."""
    return _cgdr_api.recurrent_step(query, key, value, beta, state_pool, state_indices, g=g, scale=scale,
                                    use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                                    state_layout=_state_layout(state_v_first), a=a, A_log=A_log, dt_bias=dt_bias,
                                    use_beta_sigmoid=use_beta_sigmoid, output_states=True,
                                    state_slot_stride=state_slot_stride)


def _step_states_fake(query, key, value, beta, state_pool, state_indices, g=None, scale=None,
                      use_qk_l2norm_in_kernel=False, state_v_first=False, a=None, A_log=None, dt_bias=None,
                      use_beta_sigmoid=False, state_slot_stride=0):
    rows = value.shape[0] * (value.shape[1] if value.dim() == 4 else 1)
    return query.new_empty(tuple(value.shape)), state_pool.new_empty((rows,) + tuple(state_pool.shape[1:]))


def _chunk_out_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: Optional[torch.Tensor],
                     beta: torch.Tensor, out: torch.Tensor, final_state: Optional[torch.Tensor],
                     scale: Optional[float] = None, initial_state: Optional[torch.Tensor] = None,
                     cu_seqlens: Optional[torch.Tensor] = None, use_qk_l2norm_in_kernel: bool = False,
                     state_v_first: bool = False, output_final_state: bool = False, use_gate_in_kernel: bool = False,
                     A_log: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
                     use_beta_sigmoid_in_kernel: bool = False, checkpoint_every: int = 0,
                     state_slot_stride: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """_chunk_eager into the caller's out (and final_state): returns (the final
    state when it is wanted and no final_state buffer came, else [0, HV, ...];
    checkpoint_states)."""
    r = _prefill(q, k, v, g, beta, (use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel), scale=scale,
                 initial_state=initial_state, output_final_state=output_final_state,
                 use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_v_first=state_v_first, cu_seqlens=cu_seqlens,
                 checkpoint_every=checkpoint_every, state_slot_stride=state_slot_stride, out=out,
                 final_state=final_state)
    new_final = r[1] if (output_final_state and final_state is None) else _no_states(q, v, state_v_first)
    return new_final, (r[2] if len(r) == 3 else _no_states(q, v, state_v_first))


def _chunk_out_fake(q, k, v, g, beta, out, final_state, scale=None, initial_state=None, cu_seqlens=None,
                    use_qk_l2norm_in_kernel=False, state_v_first=False, output_final_state=False,
                    use_gate_in_kernel=False, A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False,
                    checkpoint_every=0, state_slot_stride=0):
    _, final, ckpt = _chunk_fake(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel,
                                 state_v_first, checkpoint_every=checkpoint_every)
    return (final if (output_final_state and final_state is None) else final[:0].to(torch.float32)), ckpt


def _chunk_pool_out_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: Optional[torch.Tensor],
                          beta: torch.Tensor, initial_state: torch.Tensor, initial_state_indices: torch.Tensor,
                          out: torch.Tensor, scale: Optional[float] = None, cu_seqlens: Optional[torch.Tensor] = None,
                          use_qk_l2norm_in_kernel: bool = False, state_v_first: bool = False,
                          output_final_state: bool = True, use_gate_in_kernel: bool = False,
                          A_log: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
                          use_beta_sigmoid_in_kernel: bool = False, state_slot_stride: int = 0,
                          checkpoint_every: int = 0) -> torch.Tensor:
    """_chunk_pool_eager into the caller's out: returns checkpoint_states."""
    r = _prefill(q, k, v, g, beta, (use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel), scale=scale,
                 initial_state=initial_state, output_final_state=output_final_state,
                 use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_v_first=state_v_first, cu_seqlens=cu_seqlens,
                 initial_state_indices=initial_state_indices, state_slot_stride=state_slot_stride,
                 checkpoint_every=checkpoint_every, out=out)
    return r[2] if len(r) == 3 else _no_states(q, v, state_v_first)


def _chunk_pool_out_fake(q, k, v, g, beta, initial_state, initial_state_indices, out, scale=None, cu_seqlens=None,
                         use_qk_l2norm_in_kernel=False, state_v_first=False, output_final_state=True,
                         use_gate_in_kernel=False, A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False,
                         state_slot_stride=0, checkpoint_every=0):
    return _chunk_pool_fake(q, k, v, g, beta, initial_state, initial_state_indices, scale, cu_seqlens,
                            checkpoint_every=checkpoint_every)[1]


def _kda_eager(fn):
    """The eager body of the KDA op that calls cgdr.<fn> (chunk_kda or fused_recurrent_kda)."""
    def kda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
            scale: Optional[float] = None, initial_state: Optional[torch.Tensor] = None,
            cu_seqlens: Optional[torch.Tensor] = None, use_qk_l2norm_in_kernel: bool = False,
            state_v_first: bool = False, use_gate_in_kernel: bool = False, A_log: Optional[torch.Tensor] = None,
            dt_bias: Optional[torch.Tensor] = None, use_beta_sigmoid_in_kernel: bool = False,
            allow_neg_eigval: bool = False, lower_bound: Optional[float] = None, checkpoint_every: int = 0,
            state_slot_stride: int = 0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """fla's KDA (g [B, T, HV, K]); always returns the final state and the
        checkpoint states ([0, HV, ...] without checkpoint_every), as _chunk_eager."""
        r = getattr(_cgdr_api, fn)(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                   output_final_state=True, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                                   use_gate_in_kernel=use_gate_in_kernel, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
                                   allow_neg_eigval=allow_neg_eigval, lower_bound=lower_bound,
                                   state_v_first=state_v_first, cu_seqlens=cu_seqlens, A_log=A_log, dt_bias=dt_bias,
                                   checkpoint_every=checkpoint_every, state_slot_stride=state_slot_stride)
        return r if len(r) == 3 else (*r, _no_states(q, v, state_v_first))
    kda.__name__ = f"_{fn}_eager"
    return kda


def _kda_fake(q, k, v, g, beta, scale=None, initial_state=None, cu_seqlens=None, use_qk_l2norm_in_kernel=False,
              state_v_first=False, use_gate_in_kernel=False, A_log=None, dt_bias=None,
              use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, lower_bound=None, checkpoint_every=0,
              state_slot_stride=0):
    return _chunk_fake(q, k, v, g, beta, scale, initial_state, cu_seqlens, state_v_first=state_v_first,
                       checkpoint_every=checkpoint_every)


# name: (eager, fake, mutated arguments)
_OPS = {"chunk_gated_delta_rule": (_chunk_eager, _chunk_fake, ()),
        "chunk_gated_delta_rule_pool": (_chunk_pool_eager, _chunk_pool_fake, ("initial_state",)),
        # The caller's buffers (out=, final_state=): written in place, nothing returned aliases them.
        "chunk_gated_delta_rule_out": (_chunk_out_eager, _chunk_out_fake, ("out", "final_state")),
        "chunk_gated_delta_rule_pool_out": (_chunk_pool_out_eager, _chunk_pool_out_fake, ("initial_state", "out")),
        "recurrent_step": (_step_eager, _step_fake, ("state_pool",)),
        "recurrent_step_states": (_step_states_eager, _step_states_fake, ()),
        # KDA (docs/SPEC.md 10): the two fla entries, the same operator.
        "chunk_kda": (_kda_eager("chunk_kda"), _kda_fake, ()),
        "fused_recurrent_kda": (_kda_eager("fused_recurrent_kda"), _kda_fake, ())}


def _register_ops():
    """{name: callable}: torch.ops.cgdr.* where torch.library has custom_op
    (torch >= 2.4), else the eager functions themselves."""
    library = getattr(torch, "library", None)
    if not hasattr(library, "custom_op"):
        return {name: eager for name, (eager, _, _) in _OPS.items()}, False
    for name, (eager, fake, mutates) in _OPS.items():
        if not hasattr(torch.ops.cgdr, name):  # registered once per process
            op = library.custom_op(f"cgdr::{name}", mutates_args=mutates)(eager)
            op.register_fake(fake)
    return {name: getattr(torch.ops.cgdr, name) for name in _OPS}, True


_ops, HAS_CUSTOM_OPS = _register_ops()
_chunk_op = _ops["chunk_gated_delta_rule"]


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, state_v_first=False, cu_seqlens=None, *,
                           use_gate_in_kernel=False, A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False,
                           initial_state_indices=None, state_slot_stride=0, checkpoint_every=0, out=None,
                           final_state=None):
    """fla's chunk_gated_delta_rule on CPU torch tensors through the custom ops
    (traceable by torch.compile). Same layouts, dtypes and keywords as
    cgdr.chunk_gated_delta_rule: o [B, T, HV, V] in q's dtype; final_state
    [N, HV, K, V] ([N, HV, V, K] with state_v_first) in initial_state's
    dtype, float32 without one; None unless output_final_state.
    Serving (docs/SPEC.md 6d): use_gate_in_kernel, A_log, dt_bias,
    use_beta_sigmoid_in_kernel (fla's gate); initial_state_indices (sglang's
    pool slots: initial_state is a pool, updated in place, and returned as
    final_state), state_slot_stride; checkpoint_every > 0 adds
    checkpoint_states: (o, final_state, checkpoint_states).
    out, final_state: the caller's buffers (as cgdr.chunk_gated_delta_rule's),
    written in place and returned; final_state only without a pool."""
    gate = (use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel)
    if out is not None or final_state is not None:
        return _chunk_into(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                           state_v_first, cu_seqlens, gate, initial_state_indices, state_slot_stride,
                           checkpoint_every, out, final_state)
    if initial_state_indices is not None:
        o, ckpt = _ops["chunk_gated_delta_rule_pool"](q, k, v, g, beta, initial_state, initial_state_indices, scale,
                                                      cu_seqlens, use_qk_l2norm_in_kernel, state_v_first,
                                                      output_final_state, *gate, state_slot_stride, checkpoint_every)
        final = initial_state if output_final_state else None
    else:
        o, final, ckpt = _chunk_op(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel,
                                   state_v_first, *gate, checkpoint_every, state_slot_stride)
        final = final if output_final_state else None
    return (o, final) if not checkpoint_every else (o, final, ckpt)


def _kda(op, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, state_v_first,
         cu_seqlens, gate, checkpoint_every, state_slot_stride):
    o, final, ckpt = _ops[op](q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel,
                              state_v_first, *gate, checkpoint_every, state_slot_stride)
    final = final if output_final_state else None
    return (o, final) if not checkpoint_every else (o, final, ckpt)


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, safe_gate=False, lower_bound=None, disable_recompute=False,
              return_intermediate_states=False, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
              cp_context=None, use_graph=False, max_num_seqs=None, *, A_log=None, dt_bias=None,
              checkpoint_every=0, state_slot_stride=0, **kwargs):
    """fla's chunk_kda on CPU torch tensors through torch.ops.cgdr.chunk_kda
    (traceable by torch.compile): as cgdr.chunk_kda, whose checks it shares.
    Returns (o, final_state or None), or (o, final_state, checkpoint_states)
    with checkpoint_every. cp_context and return_intermediate_states raise
    as there; pools and caller's buffers: cgdr.chunk_kda."""
    _cgdr_api._kda_chunk_checks(safe_gate, use_gate_in_kernel, lower_bound, return_intermediate_states, cp_context)
    _fla_extra("chunk_kda", kwargs, chunk_sizes=(32, 64))
    if cu_seqlens_cpu is not None:
        _cgdr_api._same_offsets(cu_seqlens, cu_seqlens_cpu)
    return _kda("chunk_kda", q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                state_v_first, cu_seqlens,
                (use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound),
                checkpoint_every, state_slot_stride)


def fused_recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None, initial_state=None,
                        output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                        use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, lower_bound=None,
                        state_v_first=False, cu_seqlens=None, *, checkpoint_every=0, state_slot_stride=0, **kwargs):
    """fla's fused_recurrent_kda through torch.ops.cgdr.fused_recurrent_kda:
    as cgdr.fused_recurrent_kda (its decode arguments raise there too)."""
    for name, instead in _cgdr_api._RECURRENT_UNSUPPORTED.items():
        if kwargs.pop(name, None) is not None:
            raise ValueError(f"{name}: not supported by cgdr.fused_recurrent_kda ({instead})")
    _fla_extra("fused_recurrent_kda", kwargs)
    return _kda("fused_recurrent_kda", q, k, v, g, beta, scale, initial_state, output_final_state,
                use_qk_l2norm_in_kernel, state_v_first, cu_seqlens,
                (use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound),
                checkpoint_every, state_slot_stride)


def _fla_extra(fn, kwargs, chunk_sizes=None):
    """fla's **kwargs of a KDA wrapper: transpose_state_layout is refused here
    (pass state_v_first), chunk_size checked as fla, anything else a TypeError."""
    if "transpose_state_layout" in kwargs:
        raise ValueError(f"transpose_state_layout: pass state_v_first to cgdr.torch.{fn} (its new name in fla)")
    _cgdr_api._check_fla_options(dict(kwargs), False, None, fn=fn, chunk_sizes=chunk_sizes,
                                 ignored=("chunk_size",) if chunk_sizes else ())


def _buffer(name, x):
    """A caller's buffer for the ops: a torch tensor (the ops' schema takes nothing else)."""
    if x is not None and not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor (or None), got {type(x).__name__}")
    return x


def _chunk_into(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, state_v_first,
                cu_seqlens, gate, initial_state_indices, state_slot_stride, checkpoint_every, out, final_state):
    """chunk_gated_delta_rule with out= / final_state=, through the ops that
    write them in place (an op's outputs may not alias its inputs)."""
    out, final_state = _buffer("out", out), _buffer("final_state", final_state)
    if out is None:  # only final_state= came: o is new, as without buffers
        out = _t.advise_huge_pages(q.new_empty(tuple(q.shape[:2]) + tuple(v.shape[2:])))
    if initial_state_indices is not None:
        _cgdr_api._no_final_buffer(final_state, output_final_state, pool=True)  # the pool op has no final_state
        ckpt = _ops["chunk_gated_delta_rule_pool_out"](q, k, v, g, beta, initial_state, initial_state_indices, out,
                                                       scale, cu_seqlens, use_qk_l2norm_in_kernel, state_v_first,
                                                       output_final_state, *gate, state_slot_stride, checkpoint_every)
        final = initial_state if output_final_state else None
    else:
        new_final, ckpt = _ops["chunk_gated_delta_rule_out"](q, k, v, g, beta, out, final_state, scale, initial_state,
                                                             cu_seqlens, use_qk_l2norm_in_kernel, state_v_first,
                                                             output_final_state, *gate, checkpoint_every,
                                                             state_slot_stride)
        final = (final_state if final_state is not None else new_final) if output_final_state else None
    return (out, final) if not checkpoint_every else (out, final, ckpt)


def recurrent_step(query, key, value, beta, state_pool, state_indices, g=None, scale=None,
                   use_qk_l2norm_in_kernel=False, state_v_first=False, *, a=None, A_log=None, dt_bias=None,
                   use_beta_sigmoid=False, dst_indices=None, output_states=False, state_slot_stride=0):
    """cgdr.recurrent_step through the custom ops: query/key [N, Nk, Dk], value
    [N, Nv, Dv], beta/g [N, Nv], state_pool [P, Nv, Dk, Dv] (or [P, Nv, Dv,
    Dk] with state_v_first) updated in place, state_indices int32 [N]
    (negative: skip the row). Returns out [N, Nv, Dv].
    Verify (docs/SPEC.md 6d): query/key [N, K, Nk, Dk], value [N, K, Nv, Dv],
    beta/g/a [N, K, Nv]; dst_indices [N, K]: the state after token j into
    slot dst_indices[n, j]; output_states=True instead returns (out, states
    [N * K, Nv, ...]) and leaves the pool as it was. a, A_log, dt_bias,
    use_beta_sigmoid: the gate in the kernel; state_slot_stride as cgdr's."""
    gate = (a, A_log, dt_bias, use_beta_sigmoid)
    if output_states:
        if dst_indices is not None:
            raise ValueError("dst_indices: give either dst_indices or output_states=True, not both")
        return _ops["recurrent_step_states"](query, key, value, beta, state_pool, state_indices, g, scale,
                                             use_qk_l2norm_in_kernel, state_v_first, *gate, state_slot_stride)
    return _ops["recurrent_step"](query, key, value, beta, state_pool, state_indices, g, scale,
                                  use_qk_l2norm_in_kernel, state_v_first, *gate, dst_indices, state_slot_stride)


# ----------------------------------------------------------- transformers

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
    # Heads in transformers' terms here, before the fla entry checks them in fla's (q, v, HV).
    Nk, Nv = query.shape[2], value.shape[2]
    if Nk >= 1 and Nv % Nk != 0:
        raise ValueError(f"value: expected Nv to be a multiple of Nk = {Nk} (grouped heads), got Nv = {Nv}")


def _token_tensors(query, key, value, g, beta):
    """q, k, v, beta in one dtype cgdr takes (theirs when they agree on one,
    else float32 as transformers computes), g in any float dtype cgdr takes;
    detached (views when nothing needs changing)."""
    dts = {query.dtype, key.dtype, value.dtype, beta.dtype}
    dt = query.dtype if len(dts) == 1 and query.dtype in _NATIVE else torch.float32
    q, k, v, b = (x.detach().to(dt) for x in (query, key, value, beta))
    gc = g.detach() if g.dtype in _NATIVE else g.detach().to(torch.float32)
    return q, k, v, gc, b


def _state_buffer(initial_state, shape):
    """A fresh float32 [N, H, K, V] state: a copy of initial_state or zeros."""
    if initial_state is None:
        return torch.zeros(shape, dtype=torch.float32)
    return _initial_state(initial_state, shape).to(dtype=torch.float32, copy=True).contiguous()


def _initial_state(initial_state, shape):
    if not isinstance(initial_state, torch.Tensor):
        raise TypeError(f"initial_state: expected a torch.Tensor or None, got {type(initial_state).__name__}")
    if tuple(initial_state.shape) != tuple(shape):
        raise ValueError(f"initial_state: expected shape [N, H, K, V] = {list(shape)}, got {list(initial_state.shape)}")
    if initial_state.device.type != "cpu":
        raise TypeError(f"initial_state: expected a CPU tensor, got device {initial_state.device}")
    return initial_state.detach()


def _sequences(q, cu_seqlens):
    """N, the number of sequences: B, or len(cu_seqlens) - 1 for packed ones (B = 1)."""
    if cu_seqlens is None:
        return q.shape[0]
    if not isinstance(cu_seqlens, torch.Tensor):
        cu_seqlens = torch.as_tensor(cu_seqlens)
    return cu_seqlens.shape[0] - 1


def _run(query, key, value, g, beta, initial_state, output_final_state, l2norm, prefer_decode, cu_seqlens):
    _check(query, key, value, g, beta)
    q, k, v, gc, b = _token_tensors(query, key, value, g, beta)
    B, T = q.shape[:2]
    shape = (_sequences(q, cu_seqlens), v.shape[2], q.shape[3], v.shape[3])
    if prefer_decode and T == 1 and cu_seqlens is None:
        # A decode step: the states are a pool of B rows, updated in place.
        state = _state_buffer(initial_state, shape)
        rows = torch.arange(B, dtype=torch.int32)
        out = recurrent_step(q[:, 0], k[:, 0], v[:, 0], b[:, 0], state, rows, g=gc[:, 0],
                             use_qk_l2norm_in_kernel=l2norm).unsqueeze(1)
    else:
        init = None if initial_state is None else _initial_state(initial_state, shape).to(torch.float32)
        if cu_seqlens is not None and not isinstance(cu_seqlens, torch.Tensor):
            cu_seqlens = torch.as_tensor(cu_seqlens)
        out, state, _ = _chunk_op(q, k, v, gc, b, None, init, cu_seqlens, l2norm, False)
    return out.to(query.dtype), (state if output_final_state else None)


def torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                                 output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs):
    """transformers' torch_chunk_gated_delta_rule, computed by cgdr."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    return _run(query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel, False,
                kwargs.get("cu_seqlens"))


def torch_recurrent_gated_delta_rule(query, key, value, g, beta, initial_state=None, output_final_state=False,
                                     use_qk_l2norm_in_kernel=False, **kwargs):
    """transformers' torch_recurrent_gated_delta_rule, computed by cgdr (one
    token: the decode step on a pool of B states; more: the prefill)."""
    return _run(query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel, True,
                kwargs.get("cu_seqlens"))


def _run_kda(query, key, value, g, beta, initial_state, output_final_state, l2norm, cu_seqlens):
    """transformers' KDA functions: q, k [B, T, H, K], v [B, T, H, V], g [B, T, H, K] (log decays), beta
    [B, T, H]; scale 1/sqrt(K); out in query's dtype, the state [B, H, K, V] in float32."""
    if g is None or g.dim() != 4:
        raise ValueError(f"g: expected the per-channel decay [B, T, H, K], got {None if g is None else tuple(g.shape)}")
    init = None if initial_state is None else initial_state.to(torch.float32)
    if cu_seqlens is not None and not isinstance(cu_seqlens, torch.Tensor):
        cu_seqlens = torch.as_tensor(cu_seqlens)
    out, state = chunk_kda(query, key, value, g, beta, initial_state=init, output_final_state=True,
                           use_qk_l2norm_in_kernel=l2norm, cu_seqlens=cu_seqlens)
    if not output_final_state:
        state = None  # the layer asked for none (no cache)
    return out.to(query.dtype), state


def chunk_kimi_delta_attention(query, key, value, g, beta, chunk_size=64, initial_state=None,
                               output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs):
    """transformers' Kimi Linear chunk_kimi_delta_attention (KDA, docs/SPEC.md 10), computed by cgdr."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    return _run_kda(query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                    kwargs.get("cu_seqlens"))


def recurrent_kimi_delta_attention(query, key, value, g, beta, initial_state, output_final_state,
                                   use_qk_l2norm_in_kernel=False, **kwargs):
    """transformers' Kimi Linear recurrent_kimi_delta_attention (its decode step), computed by cgdr: the state
    it returns is a new tensor, as transformers' (the cache stores it)."""
    return _run_kda(query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                    kwargs.get("cu_seqlens"))


# transformers' models whose layers call torch_{chunk,recurrent}_gated_delta_rule,
# and Kimi Linear's, whose KDA layers call {chunk,recurrent}_kimi_delta_attention.
TRANSFORMERS_MODELS = ("qwen3_next", "qwen3_5", "qwen3_5_moe", "olmo_hybrid", "kimi_linear")
_FUNCTIONS = {"torch_chunk_gated_delta_rule": torch_chunk_gated_delta_rule,
              "torch_recurrent_gated_delta_rule": torch_recurrent_gated_delta_rule,
              "chunk_kimi_delta_attention": chunk_kimi_delta_attention,
              "recurrent_kimi_delta_attention": recurrent_kimi_delta_attention}


class TransformersPatch:
    """What patch_transformers() replaced; undo() (or leaving a `with`
    block) puts the originals back."""

    def __init__(self, replaced):
        self.replaced = replaced  # [(module, name, original)]

    @property
    def modules(self):
        return sorted({m.__name__ for m, _, _ in self.replaced})

    def undo(self):
        for module, name, original in reversed(self.replaced):
            setattr(module, name, original)
        self.replaced = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.undo()


def patch_transformers(models=None):
    """Makes transformers' gated-delta-rule layers compute with cgdr.

    transformers (5.x) decides at import which function stands behind the
    module-level names torch_chunk_gated_delta_rule and
    torch_recurrent_gated_delta_rule of a model's modeling file (fla's kernel
    if fla imports, else its pure-torch fallback), and every layer looks the
    name up when it runs. Kimi Linear's KimiLinearDeltaAttention (KDA, the
    per-channel gate) calls chunk_kimi_delta_attention and
    recurrent_kimi_delta_attention of modeling_kimi_linear the same way. So replacing those names works before or after a
    model is built or loaded. models: names under transformers.models
    (default: TRANSFORMERS_MODELS that this transformers has, plus any other
    already imported modeling module that defines the functions). Returns a
    TransformersPatch (a context manager; .undo() restores)."""
    names = list(models) if models is not None else list(TRANSFORMERS_MODELS)
    modules = []
    for name in names:
        path = f"transformers.models.{name}.modeling_{name}"
        try:
            modules.append(importlib.import_module(path))
        except ImportError:
            if models is not None:
                raise
    if models is None:
        modules += [m for n, m in list(sys.modules.items()) if n.startswith("transformers.models.") and m is not None
                    and m not in modules and any(hasattr(m, n) for n in _FUNCTIONS)]
    replaced = []
    for module in modules:
        found = [n for n in _FUNCTIONS if hasattr(module, n)]
        if not found:
            raise ValueError(f"models: {module.__name__} has none of {', '.join(_FUNCTIONS)} to replace")
        for n in found:
            replaced.append((module, n, getattr(module, n)))
            setattr(module, n, _FUNCTIONS[n])
    return TransformersPatch(replaced)
