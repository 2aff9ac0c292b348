"""Serving features through the Python entry points (docs/SPEC.md 6d): the
gate in the kernel with fla's argument names against the FP64 formula, verify
(a token axis in recurrent_step) bitwise equal to single steps into named
slots or dense states, prefill state pools bitwise equal to dense states,
checkpoints bitwise equal to prefills of their prefixes; bad input refused."""
import numpy as np
import pytest

import cgdr
from _helpers import f64, gdr_fp64, limit, packed_inputs, rel_err

NK, NV, DK, DV = 2, 4, 8, 6


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def gate_inputs(rng, T):
    return rng.uniform(-3, 0.5, (T, NV)), rng.uniform(-1, 0.5, NV), rng.uniform(-1, 0, NV), rng.uniform(-3, 3, (T, NV))


def test_fla_gate_in_kernel_meets_spec6():
    rng = np.random.default_rng(5)
    T = 40
    x = packed_inputs(rng, T, NK, NV, DK, DV, 1)
    a, a_log, dt_bias, b = gate_inputs(rng, T)
    f32 = lambda y: np.ascontiguousarray(y, dtype=np.float32)
    o, s = cgdr.chunk_gated_delta_rule(f32(x["q"])[None], f32(x["k"])[None], f32(x["v"])[None], f32(a)[None],
                                       f32(b)[None], initial_state=f32(x["state"]), output_final_state=True,
                                       use_gate_in_kernel=True, A_log=f32(a_log), dt_bias=f32(dt_bias),
                                       use_beta_sigmoid_in_kernel=True)
    g = -np.exp(f64(f32(a_log))) * softplus(f64(f32(a)) + f64(f32(dt_bias)))
    beta = 1.0 / (1.0 + np.exp(-f64(f32(b))))
    ref_o, ref_s = gdr_fp64(f32(x["q"]), f32(x["k"]), f32(x["v"]), beta, g, f32(x["state"]), [T], layout="kv")
    assert rel_err(o[0], ref_o) <= limit(ref_o, "f32")
    assert rel_err(s, ref_s) <= limit(ref_s, "f32")


def test_gate_needs_a_log():
    rng = np.random.default_rng(6)
    x = packed_inputs(rng, 8, NK, NV, DK, DV, 1)
    f32 = lambda y: np.ascontiguousarray(y, dtype=np.float32)
    with pytest.raises(ValueError, match="A_log: given without the raw gate a"):
        cgdr.chunk_gated_delta_rule_tnd(f32(x["q"]), f32(x["k"]), f32(x["v"]), f32(x["beta"]), None, [8],
                                        A_log=np.zeros(NV, np.float32))


def draft(seed, N, K):
    rng = np.random.default_rng(seed)
    x = packed_inputs(rng, N * K, NK, NV, DK, DV, N)
    a, a_log, dt_bias, b = gate_inputs(rng, N * K)
    f32 = lambda y: np.ascontiguousarray(y, dtype=np.float32)
    tok = lambda y: f32(y).reshape((N, K) + y.shape[1:])
    return dict(q=tok(x["q"]), k=tok(x["k"]), v=tok(x["v"]), beta=tok(b), a=tok(a), A_log=f32(a_log),
                dt_bias=f32(dt_bias), state=f32(x["state"]))


@pytest.mark.parametrize("mode", ["slots", "states"])
def test_verify_equals_single_steps_bitwise(mode):
    N, K, P = 3, 4, 20
    d = draft(7, N, K)
    src = [19, 18, 17]
    pool = np.zeros((P, NV, DK, DV), np.float32)
    pool[src] = d["state"]
    gate = dict(A_log=d["A_log"], dt_bias=d["dt_bias"], use_beta_sigmoid=True)
    # K single steps on a copy: the outputs and the state after each token.
    ref_pool = pool.copy()
    ref_out, ref_states = [], []
    for j in range(K):
        ref_out.append(cgdr.recurrent_step(d["q"][:, j], d["k"][:, j], d["v"][:, j], d["beta"][:, j], ref_pool, src,
                                           a=d["a"][:, j].copy(), **gate))
        ref_states.append(ref_pool[src].copy())
    dst = np.arange(N * K, dtype=np.int32).reshape(N, K)
    if mode == "slots":
        out = cgdr.recurrent_step(d["q"], d["k"], d["v"], d["beta"], pool, src, a=d["a"], dst_indices=dst, **gate)
        got = [pool[dst[:, j]] for j in range(K)]
        np.testing.assert_array_equal(pool[src], d["state"])  # the sources stay (rollback keeps them)
    else:
        out, states = cgdr.recurrent_step(d["q"], d["k"], d["v"], d["beta"], pool, src, a=d["a"],
                                          output_states=True, **gate)
        assert states.shape == (N * K, NV, DK, DV)
        got = [states.reshape(N, K, NV, DK, DV)[:, j] for j in range(K)]
    assert out.shape == (N, K, NV, DV)
    for j in range(K):
        np.testing.assert_array_equal(out[:, j], ref_out[j])
        np.testing.assert_array_equal(got[j], ref_states[j])


def test_verify_refuses_a_slot_written_twice():
    d = draft(8, 2, 2)
    pool = np.zeros((6, NV, DK, DV), np.float32)
    before = pool.copy()
    with pytest.raises(ValueError, match="dst_indices: expected distinct non-negative indices"):
        cgdr.recurrent_step(d["q"], d["k"], d["v"], d["beta"], pool, [4, 5], dst_indices=[[0, 1], [1, 2]])
    np.testing.assert_array_equal(pool, before)


def prefill_inputs(seed, lens):
    rng = np.random.default_rng(seed)
    x = packed_inputs(rng, sum(lens), NK, NV, DK, DV, len(lens))
    f32 = lambda y: np.ascontiguousarray(y, dtype=np.float32)
    return [f32(x[n]) for n in ("q", "k", "v", "beta", "g")], f32(x["state"])


def test_prefill_pool_bitwise_equals_dense():
    lens = [9, 0, 5]
    ins, state = prefill_inputs(9, lens)
    want_o, want_s = cgdr.chunk_gated_delta_rule_tnd(*ins[:4], state, lens, g=ins[4], state_layout="kv")
    pool = np.full((6,) + state.shape[1:], 7.0, np.float32)
    slots = [5, -1, 2]
    pool[5], pool[2] = state[0], state[2]
    o, fin = cgdr.chunk_gated_delta_rule_tnd(*ins[:4], pool, lens, g=ins[4], state_layout="kv", state_indices=slots)
    assert fin is pool
    np.testing.assert_array_equal(o, want_o)
    np.testing.assert_array_equal(pool[5], want_s[0])
    np.testing.assert_array_equal(pool[2], want_s[2])
    assert (pool[[0, 1, 3, 4]] == 7.0).all()


@pytest.mark.parametrize("algo,every", [("recurrent", 3), ("chunk16", 16)])
def test_checkpoints_equal_prefix_prefills(algo, every):
    lens = [37, 20]
    ins, state = prefill_inputs(10, lens)
    o, fin, ckpt = cgdr.chunk_gated_delta_rule_tnd(*ins[:4], state, lens, g=ins[4], algo=algo, state_layout="kv",
                                                   checkpoint_every=every)
    assert ckpt.shape == (37 // every + 20 // every, NV, DK, DV) and ckpt.dtype == np.float32
    row, first = 0, 0
    for b, n in enumerate(lens):
        for i in range(1, n // every + 1):
            m = i * every
            part = [x[first:first + m] for x in ins]
            _, want = cgdr.chunk_gated_delta_rule_tnd(*part[:4], state[b:b + 1], [m], g=part[4], algo=algo,
                                                      state_layout="kv")
            np.testing.assert_array_equal(ckpt[row], want[0])
            row += 1
        first += n


def fla_packed(ins, state=None):
    """The packed inputs in fla's layout: [1, T, ...] with cu_seqlens."""
    return [None if x is None else x[None] for x in ins]


def test_fla_pool_bitwise_equals_dense():
    """The fla entry with sglang's initial_state_indices: the pool is read and
    written in place at the named slots, bitwise as the dense call."""
    lens = [9, 0, 5]
    cu = np.cumsum([0] + lens)
    ins, state = prefill_inputs(11, lens)
    q, k, v, beta, g = fla_packed(ins)
    want_o, want_s = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=state, output_final_state=True,
                                                 cu_seqlens=cu)
    pool = np.full((6,) + state.shape[1:], 7.0, np.float32)
    pool[5], pool[2] = state[0], state[2]
    o, fin = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool, output_final_state=True, cu_seqlens=cu,
                                         initial_state_indices=[5, -1, 2])
    assert fin is pool
    np.testing.assert_array_equal(o[0, :9], want_o[0, :9])
    np.testing.assert_array_equal(o[0, 9:], want_o[0, 9:])
    np.testing.assert_array_equal(pool[5], want_s[0])
    np.testing.assert_array_equal(pool[2], want_s[2])
    assert (pool[[0, 1, 3, 4]] == 7.0).all()
    # Without output_final_state the pool is only read.
    before = pool.copy()
    o2, none = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu,
                                           initial_state_indices=[5, -1, 2])
    assert none is None
    np.testing.assert_array_equal(pool, before)


def test_fla_checkpoints_equal_the_packed_entry():
    lens = [37, 20]
    cu = np.cumsum([0] + lens)
    ins, state = prefill_inputs(12, lens)
    q, k, v, beta, g = fla_packed(ins)
    o, fin, ckpt = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=state, output_final_state=True,
                                               cu_seqlens=cu, checkpoint_every=8, algo="chunk16")
    want = cgdr.chunk_gated_delta_rule_tnd(*ins[:4], state, lens, g=ins[4], state_layout="kv", checkpoint_every=8,
                                           algo="chunk16")
    assert ckpt.shape == (37 // 8 + 20 // 8, NV, DK, DV) and ckpt.dtype == np.float32
    np.testing.assert_array_equal(o[0], want[0])
    np.testing.assert_array_equal(fin, want[1])
    np.testing.assert_array_equal(ckpt, want[2])
    # [B, T] batches: every sequence has T tokens.
    qb, kb, vb, bb, gb = (x.reshape((2, 20) + x.shape[1:]) for x in (x[:40] for x in ins))
    _, _, ck = cgdr.chunk_gated_delta_rule(qb, kb, vb, gb, bb, checkpoint_every=6)
    assert ck.shape == (2 * (20 // 6), NV, DK, DV)


@pytest.mark.parametrize("kw,exc,pattern", [
    (dict(initial_state_indices=[0, 0]), ValueError, r"initial_state_indices: expected distinct non-negative indices"),
    (dict(initial_state_indices=[0, 9]), ValueError, r"initial_state_indices: .*9"),
    (dict(initial_state_indices=[0]), ValueError, r"initial_state_indices: expected N = 2 slots \(one per sequence\)"),
    (dict(initial_state_indices=[0.5, 1.0]), TypeError, r"initial_state_indices: expected integers"),
    (dict(initial_state_indices=[0, 1], initial_state=None), ValueError,
     r"initial_state: required with initial_state_indices"),
    (dict(checkpoint_every=-4), ValueError, r"checkpoint_every: expected 0 \(none\) or a positive token count, got -4"),
    (dict(checkpoint_every=2.5), ValueError, r"checkpoint_every: expected an int, got 2.5"),
    (dict(state_slot_stride=3), ValueError, r"options\.state_slot_stride: expected 0 \(dense\) or"),
])
def test_fla_serving_bad_input(kw, exc, pattern):
    """Bad pool or checkpoint arguments: fla's (sglang's) names, one line, nothing written."""
    lens = [6, 4]
    ins, state = prefill_inputs(13, lens)
    q, k, v, beta, g = fla_packed(ins)
    pool = np.concatenate([state, state])
    before = pool.copy()
    args = dict(initial_state=pool, output_final_state=True, cu_seqlens=np.cumsum([0] + lens))
    args.update(kw)
    with pytest.raises(exc, match=pattern) as err:
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, **args)
    assert "\n" not in str(err.value)
    np.testing.assert_array_equal(pool, before)


@pytest.mark.parametrize("entry", ["tnd", "fla", "step"])
def test_slot_stride_beyond_a_contiguous_tensor_is_refused(entry):
    """The native layer sees only a tensor's shape: a stride past one slot's
    size would reach beyond a contiguous pool's memory; refused, nothing written."""
    lens = [6, 4]
    ins, state = prefill_inputs(14, lens)
    pool = np.concatenate([state, state])
    before = pool.copy()
    stride = 2 * NV * DK * DV
    want = r"state_slot_stride: 4 slots of (initial_state|state_pool) 384 elements apart"
    with pytest.raises(ValueError, match=want):
        if entry == "tnd":
            cgdr.chunk_gated_delta_rule_tnd(*ins[:4], pool, lens, g=ins[4], state_layout="kv", state_indices=[0, 1],
                                            state_slot_stride=stride)
        elif entry == "fla":
            q, k, v, beta, g = fla_packed(ins)
            cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool, output_final_state=True,
                                        cu_seqlens=np.cumsum([0] + lens), initial_state_indices=[0, 1],
                                        state_slot_stride=stride)
        else:
            d = draft(15, 2, 1)
            cgdr.recurrent_step(d["q"][:, 0], d["k"][:, 0], d["v"][:, 0], d["beta"][:, 0], pool, [0, 1],
                                state_slot_stride=stride)
    np.testing.assert_array_equal(pool, before)


def test_serving_loop_example():
    """examples/serving_loop.py: pieces resumed from slots, a prefix resumed
    from a checkpoint, speculative drafts accepted at random lengths and rolled
    back, all equal to one uninterrupted prefill per sequence within SPEC 6."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "serving_loop.py"
    spec = importlib.util.spec_from_file_location("serving_loop", path)
    loop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loop)
    for seed in (0, 1):
        err, skipped = loop.run(seed)
        assert err <= 2e-5 and skipped == 64
