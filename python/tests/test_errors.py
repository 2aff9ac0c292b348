"""Bad input raises TypeError/ValueError with the tensor, expected and actual
values in the message, and writes nothing."""
import numpy as np
import pytest
import torch

import cgdr
from _helpers import make, packed_inputs


def fla_inputs(kind="numpy", dtype="f32", B=1, T=6, H=1, HV=2, K=5, V=3):
    rng = np.random.default_rng(41)
    x = packed_inputs(rng, B * T, H, HV, K, V, B)
    bt = lambda a: a.reshape((B, T) + a.shape[1:])
    q, k, v, beta = (make(kind, dtype, bt(x[n])) for n in ("q", "k", "v", "beta"))
    g = make(kind, "f32", bt(x["g"]))
    return q, k, v, g, beta


def test_mixed_kinds():
    q, k, v, g, beta = fla_inputs()
    with pytest.raises(TypeError, match="expected all tensors to be numpy arrays or all to be torch tensors, "
                                        "got q: numpy, k: torch"):
        cgdr.chunk_gated_delta_rule(q, torch.from_numpy(k), v, g, beta)


def test_not_a_tensor():
    q, k, v, g, beta = fla_inputs()
    with pytest.raises(TypeError, match="v: expected a numpy array or a torch tensor, got builtins.list"):
        cgdr.chunk_gated_delta_rule(q, k, v.tolist(), g, beta)


def test_unsupported_dtypes():
    q, k, v, g, beta = fla_inputs()
    with pytest.raises(TypeError, match="q: expected numpy dtype float16 or float32, got float64"):
        cgdr.chunk_gated_delta_rule(q.astype(np.float64), k, v, g, beta)
    tq, tk, tv, tg, tb = fla_inputs("torch")
    with pytest.raises(TypeError, match="q: expected torch dtype float16, bfloat16 or float32, got torch.float64"):
        cgdr.chunk_gated_delta_rule(tq.double(), tk, tv, tg, tb)


def test_dtype_mix_is_reported_by_the_native_validation():
    q, k, v, g, beta = fla_inputs()
    with pytest.raises(ValueError, match=r"key: expected dtype f32 \(same as query\), got f16"):
        cgdr.chunk_gated_delta_rule(q, k.astype(np.float16), v, g, beta)


def test_shapes():
    q, k, v, g, beta = fla_inputs()
    with pytest.raises(ValueError, match=r"q: expected rank 4 \[B, T, H, K\], got rank 3 \[1, 6, 1\]"):
        cgdr.chunk_gated_delta_rule(q[..., 0], k, v, g, beta)
    with pytest.raises(ValueError, match=r"beta: expected leading dimensions \[B, T\] = \[1, 6\] as q, got \[1, 5, 2\]"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta[:, :5])
    with pytest.raises(ValueError, match=r"key: expected shape \[T, Nk, Dk\] as query = \[6, 1, 5\], got \[6, 1, 4\]"):
        cgdr.chunk_gated_delta_rule(q, np.ascontiguousarray(k[..., :4]), v, g, beta)
    with pytest.raises(ValueError, match=r"value: expected Nv to be a multiple of Nk = 2"):
        cgdr.chunk_gated_delta_rule(np.concatenate([q, q], 2), np.concatenate([k, k], 2), np.concatenate([v, v[:, :, :1]], 2),
                                    np.concatenate([g, g[:, :, :1]], 2), np.concatenate([beta, beta[:, :, :1]], 2))
    with pytest.raises(ValueError, match=r"query: expected Dk in \[1, 256\], got Dk = 300"):
        big = np.zeros((1, 6, 1, 300), np.float32)
        cgdr.chunk_gated_delta_rule(big, big, v, g, beta)


def test_initial_state_shape_names_the_layout():
    q, k, v, g, beta = fla_inputs()
    bad = np.zeros((1, 2, 3, 5), np.float32)  # vk shape given with the default kv layout
    with pytest.raises(ValueError, match=r"initial_state: expected shape \[B, Nv, Dk, Dv\] \(layout kv\) = "
                                         r"\[1, 2, 5, 3\], got \[1, 2, 3, 5\]"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=bad)


def test_cu_seqlens_checks():
    q, k, v, g, beta = fla_inputs()
    with pytest.raises(ValueError, match="cu_seqlens: expected the last offset to be T = 6, got 5"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=[0, 2, 5])
    with pytest.raises(ValueError, match="cu_seqlens: expected the first offset to be 0, got 1"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=[1, 6])
    with pytest.raises(ValueError, match="cu_seqlens: expected non-decreasing offsets, got 4 then 3 at"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=[0, 4, 3, 6])
    q2, k2, v2, g2, b2 = fla_inputs(B=2)
    with pytest.raises(ValueError, match="cu_seqlens: expected B = 1 when cu_seqlens is given"):
        cgdr.chunk_gated_delta_rule(q2, k2, v2, g2, b2, cu_seqlens=[0, 6])


def test_seq_lens_checks_from_native():
    rng = np.random.default_rng(42)
    x = packed_inputs(rng, 6, 1, 1, 4, 4, 2)
    a = [make("numpy", "f32", x[n]) for n in ("q", "k", "v", "beta")]
    with pytest.raises(ValueError, match="seq_lens: expected the lengths to sum to T = 6, got 5"):
        cgdr.chunk_gated_delta_rule_tnd(*a, None, [2, 3])
    with pytest.raises(ValueError, match=r"seq_lens: expected lengths >= 0, got -1 at index \[0\]"):
        cgdr.chunk_gated_delta_rule_tnd(*a, None, [-1, 7])


def test_options():
    q, k, v, g, beta = fla_inputs()
    with pytest.raises(ValueError, match="state_layout: expected 'kv'"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, state_layout="xy")
    with pytest.raises(ValueError, match="threads: expected None"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, threads=0)
    with pytest.raises(ValueError, match="algo: expected one of"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, algo="fast")
    with pytest.raises(ValueError, match="scale: expected a non-zero number"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, scale=0)


def test_check_values():
    q, k, v, g, beta = fla_inputs()
    g = g.copy()
    g[0, 2, 1] = 0.5
    cgdr.chunk_gated_delta_rule(q, k, v, g, beta)  # not checked unless asked
    with pytest.raises(ValueError, match="g: expected log-decay <= 0, got 0.5"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, check_values=True)
    v = v.copy()
    v[0, 1, 0, 0] = np.nan
    with pytest.raises(ValueError, match="value: non-finite value nan"):
        cgdr.chunk_gated_delta_rule(q, k, v, np.minimum(g, 0), beta, check_values=True)


def test_decode_out_untouched_on_error():
    rng = np.random.default_rng(43)
    x = packed_inputs(rng, 2, 1, 2, 4, 4, 2)
    a = [make("torch", "bf16", x[n]) for n in ("q", "k", "v", "beta")]
    pool = make("torch", "f32", x["state"])
    out = torch.full((2, 2, 4), 3.0, dtype=torch.float32)  # wrong dtype for bf16 queries
    pool_before = pool.clone()
    with pytest.raises(ValueError, match=r"out: expected dtype bf16 \(same as query\), got f32"):
        cgdr.recurrent_step(*a, pool, [0, 1], out=out)
    assert torch.equal(pool, pool_before) and torch.all(out == 3.0)
    with pytest.raises(ValueError, match=r"state_pool: expected shape \[P, Nv, Dk, Dv\] \(layout kv\)"):
        cgdr.recurrent_step(*a, pool[:, :1].contiguous(), [0, 1])
    with pytest.raises(ValueError, match=r"state_indices: expected shape \[N\] with N of query = \[2\], got \[3\]"):
        cgdr.recurrent_step(*a, pool, [0, 1, -1])
