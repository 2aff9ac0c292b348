"""vLLM's four GDN ops computed exactly (the FP64 recurrence of
_vllm_cases.run_fp64, token by token; the result rounded once to vLLM's
dtypes), with vLLM's signatures: the referee of the model tests, put into
vllm._custom_ops by _serve.py when asked. Slow, and only for tiny models."""
import torch

from _vllm_cases import gate_fp64, run_fp64


def _rows(pool, slot):
    return pool[slot].double()


def chunk_gated_delta_rule_cpu(query, key, value, g, beta, initial_state, output_final_state, cu_seqlens, head_first,
                               use_qk_l2norm_in_kernel, initial_state_indices, eps=1e-5):
    assert not head_first and use_qk_l2norm_in_kernel and eps == 1e-5
    D = query.shape[-1]
    o = torch.empty(query.shape[:2] + value.shape[2:], dtype=query.dtype)
    cu = cu_seqlens.tolist()
    for n, slot in enumerate(initial_state_indices.tolist()):
        t0, t1 = cu[n], cu[n + 1]
        if t1 == t0:
            continue
        out, states = run_fp64(_rows(initial_state, slot), query[0, t0:t1], key[0, t0:t1], value[0, t0:t1],
                               g[0, t0:t1], beta[0, t0:t1], D)
        o[0, t0:t1] = out.to(o.dtype)
        if output_final_state:
            initial_state[slot] = states[-1].to(initial_state.dtype)
    return o, initial_state


def fused_sigmoid_gating_delta_rule_update_cpu(A_log, dt_bias, q, k, v, a, b, initial_state_source,
                                               initial_state_indices, cu_seqlens, use_qk_l2norm_in_kernel,
                                               softplus_beta=1.0, softplus_threshold=20.0):
    g, beta = gate_fp64(a, b, A_log, dt_bias)
    N, D = v.shape[1], q.shape[-1]
    o = torch.zeros((N, 1) + tuple(v.shape[2:]), dtype=q.dtype)
    for n, slot in enumerate(initial_state_indices.tolist()):
        if slot < 0:
            continue
        out, states = run_fp64(_rows(initial_state_source, slot), q[0, n:n + 1], k[0, n:n + 1], v[0, n:n + 1],
                               g[n:n + 1], beta[n:n + 1], D)
        o[n] = out.to(o.dtype)
        initial_state_source[slot] = states[-1].to(initial_state_source.dtype)
    return o


def fused_sigmoid_gating_delta_rule_update_spec_cpu(A_log, dt_bias, q, k, v, a, b, initial_state_source,
                                                    spec_state_indices, num_accepted_tokens, cu_seqlens,
                                                    use_qk_l2norm_in_kernel, softplus_beta=1.0,
                                                    softplus_threshold=20.0):
    g, beta = gate_fp64(a, b, A_log, dt_bias)
    D = q.shape[-1]
    o = torch.zeros(tuple(v.shape), dtype=q.dtype)
    cu = cu_seqlens.tolist()
    for n, accepted in enumerate(num_accepted_tokens.tolist()):
        t0, t1 = cu[n], cu[n + 1]
        if t1 == t0:
            continue
        src = int(spec_state_indices[n, max(accepted - 1, 0)])
        out, states = run_fp64(_rows(initial_state_source, src), q[t0:t1], k[t0:t1], v[t0:t1], g[t0:t1],
                               beta[t0:t1], D)
        o[t0:t1] = out.to(o.dtype)
        for t in range(t1 - t0):
            initial_state_source[int(spec_state_indices[n, t])] = states[t].to(initial_state_source.dtype)
    return o


def fused_gdn_gating_cpu(A_log, a, b, dt_bias):
    g, beta = gate_fp64(a, b, A_log, dt_bias)
    return g.float().unsqueeze(0), beta.to(b.dtype).unsqueeze(0)


def install():
    import vllm._custom_ops as ops
    for fn in (chunk_gated_delta_rule_cpu, fused_sigmoid_gating_delta_rule_update_cpu,
               fused_sigmoid_gating_delta_rule_update_spec_cpu, fused_gdn_gating_cpu):
        setattr(ops, fn.__name__, fn)
