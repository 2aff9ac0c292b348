"""cgdr.recurrent_step: decode steps continue a prefill exactly (to FP32
rounding), on pools of every dtype, numpy and torch, both layouts; skipped
rows; bad indices rejected before anything is written."""
import numpy as np
import pytest
import torch

import cgdr
from _helpers import KINDS_DTYPES, dtype_of, f64, gdr_fp64, kind_of, limit, make, packed_inputs, rel_err

DK, DV = 7, 9


@pytest.mark.parametrize("kind,dtype", KINDS_DTYPES)
@pytest.mark.parametrize("layout", ["kv", "vk"])
def test_steps_match_fp64(kind, dtype, layout):
    """3 sequences of different lengths decoded token by token in a pool of 6
    (rows 4, 0, 2), finished sequences skipped with -1."""
    rng = np.random.default_rng(21)
    lens = [4, 1, 3]
    N, Nk, Nv, T = len(lens), 2, 4, sum(lens)
    x = packed_inputs(rng, T, Nk, Nv, DK, DV, N, raw_qk=True)
    state = x["state"] if layout == "kv" else x["state"].transpose(0, 1, 3, 2)
    q, k, v, beta = (make(kind, dtype, x[n]) for n in ("q", "k", "v", "beta"))
    g = make(kind, "f32", x["g"])
    rows = [4, 0, 2]
    pool_np = rng.uniform(-1, 1, (6,) + state.shape[1:])
    pool_np[rows] = state
    pool = make(kind, "f32", pool_np)
    untouched = f64(pool)[[1, 3, 5]].copy()
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
    outs = np.zeros((T, Nv, DV))
    for t in range(max(lens)):
        live = [t < n for n in lens]
        tok = [int(offsets[b]) + min(t, lens[b] - 1) for b in range(N)]
        pick = lambda a: a[tok] if kind == "numpy" else a[torch.tensor(tok)]
        idx = [rows[b] if live[b] else -1 for b in range(N)]
        o = cgdr.recurrent_step(pick(q), pick(k), pick(v), pick(beta), pool, idx, g=pick(g),
                                use_qk_l2norm_in_kernel=True, state_layout=layout)
        assert kind_of(o) == kind and dtype_of(o) == dtype and tuple(o.shape) == (N, Nv, DV)
        for b in range(N):
            if live[b]:
                outs[tok[b]] = f64(o)[b]
            else:
                assert np.all(f64(o)[b] == 0)
    ref_o, ref_s = gdr_fp64(q, k, v, beta, g, make("numpy", "f32", state), lens, l2norm=True, layout=layout)
    assert rel_err(outs, ref_o) <= limit(ref_o, dtype)
    assert rel_err(f64(pool)[rows], ref_s) <= 2e-5
    np.testing.assert_array_equal(f64(pool)[[1, 3, 5]], untouched)


@pytest.mark.parametrize("kind,pool_dtype", [("numpy", "f16"), ("torch", "bf16"), ("torch", "f16")])
def test_16bit_pool_one_step(kind, pool_dtype):
    """A 16-bit pool: FP32 math, the state rounded once per step."""
    rng = np.random.default_rng(22)
    x = packed_inputs(rng, 2, 1, 2, DK, DV, 2)
    q, k, v, beta, g = (make(kind, "f32", x[n]) for n in ("q", "k", "v", "beta", "g"))
    pool = make(kind, pool_dtype, x["state"])
    before = f64(pool).copy()
    o = cgdr.recurrent_step(q, k, v, beta, pool, np.array([1, 0], np.int32), g=g)
    ref_o, ref_s = gdr_fp64(q[[0]], k[[0]], v[[0]], beta[[0]], g[[0]], before[[1]], [1], layout="kv")
    assert rel_err(f64(o)[:1], ref_o) <= 2e-5  # same (16-bit) starting state on both sides
    assert rel_err(f64(pool)[1:], ref_s) <= limit(ref_s, pool_dtype)


def test_decode_continues_prefill():
    """Prefill T-1 tokens, then decode the last: same output and state as a
    prefill of T tokens."""
    rng = np.random.default_rng(23)
    T, Nk, Nv = 70, 1, 2
    x = packed_inputs(rng, T, Nk, Nv, 16, 16, 1)
    a = {n: make("numpy", "f32", x[n]) for n in ("q", "k", "v", "beta", "g")}
    full_o, full_s = cgdr.chunk_gated_delta_rule_tnd(a["q"], a["k"], a["v"], a["beta"], None, [T], g=a["g"],
                                                     state_layout="kv")
    part_o, part_s = cgdr.chunk_gated_delta_rule_tnd(*(a[n][:-1] for n in ("q", "k", "v", "beta")), None, [T - 1],
                                                     g=a["g"][:-1], state_layout="kv")
    pool = np.ascontiguousarray(part_s)
    out = np.full((1, Nv, 16), np.nan, np.float32)
    ret = cgdr.recurrent_step(*(a[n][-1:] for n in ("q", "k", "v", "beta")), pool, [0], g=a["g"][-1:], out=out)
    assert ret is out
    assert rel_err(out[0], f64(full_o[-1])) <= 1e-5
    assert rel_err(pool, f64(full_s)) <= 1e-5


def bad_step_setup(kind):
    rng = np.random.default_rng(24)
    x = packed_inputs(rng, 3, 1, 2, DK, DV, 4)
    args = [make(kind, "f32", x[n]) for n in ("q", "k", "v", "beta")]
    pool = make(kind, "f32", x["state"])
    out = make(kind, "f32", np.full((3, 2, DV), 7.0))
    return args, pool, out


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("indices,message", [
    ([0, 4, 1], "state_indices: expected indices < P = 4 (pool size) or negative (skip), got 4 at index [1]"),
    ([2, 1, 2], "state_indices: expected distinct non-negative indices, got 2 at indices [0] and [2]"),
])
def test_bad_indices_write_nothing(kind, indices, message):
    args, pool, out = bad_step_setup(kind)
    pool_before, out_before = f64(pool).copy(), f64(out).copy()
    with pytest.raises(ValueError) as e:
        cgdr.recurrent_step(*args, pool, indices, out=out)
    assert message in str(e.value)
    np.testing.assert_array_equal(f64(pool), pool_before)
    np.testing.assert_array_equal(f64(out), out_before)


def test_pool_must_be_writable_in_place():
    args, pool, out = bad_step_setup("torch")
    strided = torch.zeros(4, 2, DV, DK).transpose(2, 3)  # right shape, not contiguous, nor dense slots
    with pytest.raises(ValueError, match="state_pool: expected a contiguous pool, or a view of one whose slots are "
                                         "dense"):
        cgdr.recurrent_step(*args, strided, [0, 1, 2])
    # A view of dense slots further apart than one slot (vLLM's pools) is taken in place.
    roomy = torch.zeros(4, 3, DV, DK)
    before = roomy.clone()
    cgdr.recurrent_step(*args, roomy[:, :2], [0, 1, 2], state_layout="vk")
    assert torch.equal(roomy[:, 2], before[:, 2]), "the memory between the slots was written"
    assert not torch.equal(roomy[:3, :2], before[:3, :2]), "the view's slots were not updated in place"
    args, pool, out = bad_step_setup("numpy")
    pool.flags.writeable = False
    with pytest.raises(ValueError, match="state_pool: expected a writable array"):
        cgdr.recurrent_step(*args, pool, [0, 1, 2])


def test_index_types():
    """Indices as list, numpy int64 and torch int64 tensors; values beyond int32 rejected."""
    args, pool, out = bad_step_setup("torch")
    for idx in ([3, -1, 0], np.array([3, -1, 0], np.int64), torch.tensor([3, -1, 0])):
        cgdr.recurrent_step(*args, pool.clone(), idx)
    with pytest.raises(ValueError, match="state_indices: values must fit in int32"):
        cgdr.recurrent_step(*args, pool, np.array([2**40, 0, 1]))
    with pytest.raises(TypeError, match="state_indices: expected integers"):
        cgdr.recurrent_step(*args, pool, [0.5, 1.0, 2.0])
