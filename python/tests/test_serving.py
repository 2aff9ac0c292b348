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
