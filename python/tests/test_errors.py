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
    with pytest.raises(ValueError, match=r"k: expected the shape of q, \[B, T, H, K\] = \[1, 6, 1, 5\], got \[1, 6, 1, 4\]"):
        cgdr.chunk_gated_delta_rule(q, np.ascontiguousarray(k[..., :4]), v, g, beta)
    with pytest.raises(ValueError, match=r"v: expected HV \(its heads\) to be a multiple of H = 2 \(the heads of q\), "
                                         r"got HV = 3"):
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
    with pytest.raises(ValueError, match="scale: expected a finite non-zero number"):
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


def short_error(exc_type, fn, *args, **kwargs):
    """The message of the exc_type fn raises; it must be one short line (never a dump of the arrays)."""
    with pytest.raises(exc_type) as e:
        fn(*args, **kwargs)
    msg = str(e.value)
    assert len(msg) < 200 and "\n" not in msg, msg
    return msg


def decode_inputs():
    rng = np.random.default_rng(44)
    x = packed_inputs(rng, 2, 1, 2, 4, 4, 3)
    return [make("numpy", "f32", x[n]) for n in ("q", "k", "v", "beta")], make("numpy", "f32", x["state"])


def test_out_of_range_options_give_short_errors():
    """threads=2**40 used to reach the native call and fail its int conversion
    with a TypeError that printed every argument array."""
    q, k, v, g, beta = fla_inputs()
    tnd = [a.reshape(a.shape[1:]) for a in (q, k, v, beta)]
    step, pool = decode_inputs()
    calls = [lambda **kw: cgdr.chunk_gated_delta_rule(q, k, v, g, beta, **kw),
             lambda **kw: cgdr.chunk_gated_delta_rule_tnd(*tnd, None, [6], **kw),
             lambda **kw: cgdr.recurrent_step(*step, pool.copy(), [0, 2], **kw)]
    for call in calls:
        for threads in (2**40, 4097, 0, -1, 1.5, "2", True):
            msg = short_error(ValueError, call, threads=threads)
            assert msg.startswith("threads: expected None (all cores) or an int in [1, 4096], got "), msg
        call(threads=np.int64(2))  # numpy integers are integers
        for scale in (float("nan"), float("inf"), -float("inf"), 0.0, 1e400, 10**400):
            msg = short_error(ValueError, call, scale=scale)
            assert msg.startswith("scale: expected a finite non-zero number or None (1/sqrt(K)), got "), msg
        for scale in ("0.5", [0.5], b"1"):
            assert short_error(TypeError, call, scale=scale).startswith("scale: expected a number or None")
        call(scale=np.float32(0.5))
        call(scale=torch.tensor(0.5))
        msg = short_error(ValueError, call, state_layout=np.array(["kv"]))
        assert msg.startswith("state_layout: expected 'kv' ([N, HV, K, V]) or 'vk' ([N, HV, V, K]), got a value of type ndarray"), msg
    assert short_error(ValueError, calls[0], algo=None).startswith("algo: expected one of auto, recurrent")
    assert short_error(ValueError, calls[0], precision=16).startswith("precision: expected one of auto, fp32, bf16")


def test_scale_nan_is_refused_not_replaced():
    """Like the CLI (a case's scale must be a finite number), NaN is an error,
    not 'use the default'."""
    q, k, v, g, beta = fla_inputs()
    with pytest.raises(ValueError, match="scale: expected a finite non-zero number or None .*, got nan"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, scale=float("nan"))


def test_empty_batch_is_named_in_the_entry_points_terms():
    """B = 0 used to surface as the native 'seq_lens: expected at least one sequence'."""
    q, k, v, g, beta = fla_inputs()
    empty = [a[:0] for a in (q, k, v, g, beta)]
    with pytest.raises(ValueError, match=r"^q: expected a batch of B >= 1 sequences \(\[B, T, H, K\]\), got B = 0 "
                                         r"\(shape \[0, 6, 1, 5\]\)$"):
        cgdr.chunk_gated_delta_rule(*empty)
    import cgdr.torch as ct
    tq, tk, tv, tg, tb = (torch.from_numpy(a[:0]) for a in (q, k, v, g, beta))
    with pytest.raises(ValueError, match=r"^query: expected a batch of B >= 1 sequences"):
        ct.torch_chunk_gated_delta_rule(tq, tk, tv, tg, tb)
    with pytest.raises(ValueError, match=r"^seq_lens: expected at least one sequence"):  # what the tnd caller passed
        cgdr.chunk_gated_delta_rule_tnd(*(a.reshape(a.shape[1:]) for a in (q, k, v, beta)), None, [])


def test_fla_shapes_in_fla_terms():
    q, k, v, g, beta = fla_inputs()
    with pytest.raises(ValueError, match=r"^g: expected shape \[B, T, HV\] = \[1, 6, 2\], got \[1, 6, 1\]$"):
        cgdr.chunk_gated_delta_rule(q, k, v, np.ascontiguousarray(g[..., :1]), beta)


def test_recurrent_step_check_values_scans_the_pool_rows_it_uses():
    step, pool = decode_inputs()
    pool[1, 1, 2, 3] = np.nan  # row 1: no index names it
    out = cgdr.recurrent_step(*step, pool, [0, 2], check_values=True)
    assert np.isfinite(out).all()
    pool[2, 0, 0, 1] = np.inf
    before = pool.copy()
    with pytest.raises(ValueError, match=r"^state_pool: non-finite value inf at index \[2, 0, 0, 1\] "
                                         r"\(the row of state_indices\[1\]; check_values\)$"):
        cgdr.recurrent_step(*step, pool, [0, 2], check_values=True)
    np.testing.assert_array_equal(pool, before)
