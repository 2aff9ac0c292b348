"""cgdr's torch custom ops (torch >= 2.4): torch.ops.cgdr.chunk_gated_delta_rule
and torch.ops.cgdr.recurrent_step, their fake implementations, and
torch.compile(fullgraph=True) of modules that call them. On older torch the
same functions run eagerly."""
import pytest
import torch

import cgdr
import cgdr.torch as ct
from _helpers import f64, rel_err

needs_ops = pytest.mark.skipif(not ct.HAS_CUSTOM_OPS,
                               reason=f"torch {torch.__version__} has no torch.library.custom_op")


def inputs(B=2, T=37, H=2, HV=4, K=16, V=24, seed=7):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
    v = torch.randn(B, T, HV, V, generator=gen)
    g = -torch.rand(B, T, HV, generator=gen) * 0.3
    beta = torch.rand(B, T, HV, generator=gen) * 0.9 + 0.05
    h0 = torch.rand(B, HV, K, V, generator=gen) - 0.5
    return q, k, v, g, beta, h0


def test_wrappers_match_the_package_entry_points():
    """Through the op (or eagerly on old torch): the same bits as cgdr.chunk_gated_delta_rule / recurrent_step."""
    q, k, v, g, beta, h0 = inputs()
    o, s = ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                     use_qk_l2norm_in_kernel=True)
    ro, rs = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                         use_qk_l2norm_in_kernel=True)
    assert torch.equal(o, ro) and torch.equal(s, rs)
    assert ct.chunk_gated_delta_rule(q, k, v, g, beta)[1] is None
    pool, pool2 = h0.clone(), h0.clone()
    idx = torch.tensor([1, -1], dtype=torch.int32)
    out = ct.recurrent_step(q[:, 0], k[:, 0], v[:, 0], beta[:, 0], pool, idx, g=g[:, 0])
    ref = cgdr.recurrent_step(q[:, 0], k[:, 0], v[:, 0], beta[:, 0], pool2, idx, g=g[:, 0])
    assert torch.equal(out, ref) and torch.equal(pool, pool2) and not torch.equal(pool, h0)


@needs_ops
def test_ops_are_registered_with_fake_kernels():
    q, k, v, g, beta, h0 = inputs()
    assert hasattr(torch.ops.cgdr, "chunk_gated_delta_rule") and hasattr(torch.ops.cgdr, "recurrent_step")
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    fq, fk, fv, fb = (mode.from_tensor(x.to(torch.bfloat16)) for x in (q, k, v, beta))
    fg, cu = mode.from_tensor(g), mode.from_tensor(torch.tensor([0, 5, 37]))
    fpool, fidx = mode.from_tensor(h0.clone()), mode.from_tensor(torch.tensor([1, 0], dtype=torch.int32))
    with mode:
        o, s, ck = torch.ops.cgdr.chunk_gated_delta_rule(fq, fk, fv, fg, fb, None, None, None, True, True)
        assert o.shape == (2, 37, 4, 24) and o.dtype == torch.bfloat16
        assert s.shape == (2, 4, 24, 16) and s.dtype == torch.float32  # state_v_first: [N, HV, V, K]
        assert ck.shape == (0, 4, 24, 16) and ck.dtype == torch.float32  # no checkpoints
        _, s, _ = torch.ops.cgdr.chunk_gated_delta_rule(fq[:1], fk[:1], fv[:1], fg[:1], fb[:1], None, None, cu, True,
                                                        False)
        assert s.shape == (2, 4, 16, 24)
        _, _, ck = torch.ops.cgdr.chunk_gated_delta_rule(fq, fk, fv, fg, fb, None, None, None, True, False,
                                                         checkpoint_every=8)
        assert ck.shape == (2 * (37 // 8), 4, 16, 24)  # [B, T] inputs: a static count
        o, ck = torch.ops.cgdr.chunk_gated_delta_rule_pool(fq, fk, fv, fg, fb, fpool, fidx, checkpoint_every=16)
        assert o.shape == (2, 37, 4, 24) and ck.shape == (4, 4, 16, 24)
        o, st = torch.ops.cgdr.recurrent_step_states(fq[:, :3], fk[:, :3], fv[:, :3], fb[:, :3], fpool, fidx,
                                                     fg[:, :3])
        assert o.shape == (2, 3, 4, 24) and st.shape == (6, 4, 16, 24) and st.dtype == torch.float32


@needs_ops
def test_opcheck():
    """torch.library.opcheck: schema, fake kernel, declared mutation (state_pool) and dispatch agree."""
    q, k, v, g, beta, h0 = inputs(T=9)
    torch.library.opcheck(torch.ops.cgdr.chunk_gated_delta_rule, (q, k, v, g, beta, 0.3, h0, None, True, False))
    torch.library.opcheck(torch.ops.cgdr.chunk_gated_delta_rule,
                          (q[:1], k[:1], v[:1], None, beta[:1], None, None, torch.tensor([0, 4, 9]), False, True))
    torch.library.opcheck(torch.ops.cgdr.recurrent_step,
                          (q[:, 0], k[:, 0], v[:, 0], beta[:, 0], h0.clone(), torch.tensor([1, 0], dtype=torch.int32),
                           g[:, 0], None, True, False))
    # The serving arguments (docs/SPEC.md 6d): the gate, checkpoints, pools, verify.
    a_log, dt_bias = torch.rand(4) - 0.5, torch.rand(4) - 0.5
    torch.library.opcheck(torch.ops.cgdr.chunk_gated_delta_rule,
                          (q, k, v, -g, beta, None, h0, None, False, False, True, a_log, dt_bias, True, 4))
    idx = torch.tensor([2, 0], dtype=torch.int32)
    torch.library.opcheck(torch.ops.cgdr.chunk_gated_delta_rule_pool,
                          (q, k, v, g, beta, torch.cat([h0, h0]), idx), {"checkpoint_every": 4})
    qk, kk, vk, bk, gk = (x[:, :3] for x in (q, k, v, beta, g))
    torch.library.opcheck(torch.ops.cgdr.recurrent_step,
                          (qk, kk, vk, bk, torch.cat([h0, h0]), idx, gk),
                          {"dst_indices": torch.tensor([[1, 3, 2], [0, -1, -1]], dtype=torch.int32)})
    torch.library.opcheck(torch.ops.cgdr.recurrent_step_states, (qk, kk, vk, bk, torch.cat([h0, h0]), idx, gk))
    # The caller's buffers (out=, final_state=): declared mutated, nothing returned aliases them.
    out = torch.empty(2, 9, 4, 24)
    torch.library.opcheck(torch.ops.cgdr.chunk_gated_delta_rule_out,
                          (q, k, v, g, beta, out, torch.empty(2, 4, 16, 24), 0.3, h0, None, True, False, True))
    torch.library.opcheck(torch.ops.cgdr.chunk_gated_delta_rule_out,
                          (q, k, v, g, beta, out, None, None, None, None, False, False, True), {"checkpoint_every": 4})
    torch.library.opcheck(torch.ops.cgdr.chunk_gated_delta_rule_pool_out,
                          (q, k, v, g, beta, torch.cat([h0, h0]), idx, out), {"checkpoint_every": 4})


def test_serving_arguments_match_the_package_entry_points():
    """Through the ops: the gate, pools, checkpoints and verify give the bits of cgdr's own functions."""
    q, k, v, g, beta, h0 = inputs()
    a_log, dt_bias = torch.rand(4) - 0.5, torch.rand(4) - 0.5
    gate = dict(use_gate_in_kernel=True, A_log=a_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True)
    got = ct.chunk_gated_delta_rule(q, k, v, -g, beta, initial_state=h0, output_final_state=True, checkpoint_every=8,
                                    **gate)
    want = cgdr.chunk_gated_delta_rule(q, k, v, -g, beta, initial_state=h0, output_final_state=True,
                                       checkpoint_every=8, **gate)
    assert len(got) == 3 and all(torch.equal(a, b) for a, b in zip(got, want))
    # A pool: slots 3 and 0 of 4, updated in place; the other slots untouched.
    pool, pool2 = torch.cat([h0, h0]), torch.cat([h0, h0])
    idx = torch.tensor([3, 0], dtype=torch.int32)
    o, fin, ck = ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool, output_final_state=True,
                                           initial_state_indices=idx, checkpoint_every=16)
    ro, rfin, rck = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool2, output_final_state=True,
                                                initial_state_indices=idx, checkpoint_every=16)
    assert fin is pool and torch.equal(o, ro) and torch.equal(pool, pool2) and torch.equal(ck, rck)
    assert torch.equal(pool[[1, 2]], torch.cat([h0, h0])[[1, 2]]) and not torch.equal(pool[3], h0[1])
    # Verify: K = 3 tokens per sequence, states into dst slots or dense.
    qk, kk, vk, bk, gk = (x[:, :3] for x in (q, k, v, beta, g))
    dst = torch.tensor([[1, 0, -1], [3, -1, 2]], dtype=torch.int32)
    src = torch.tensor([1, 2], dtype=torch.int32)
    pool, pool2 = torch.cat([h0, h0]), torch.cat([h0, h0])
    out = ct.recurrent_step(qk, kk, vk, bk, pool, src, g=gk, dst_indices=dst)
    ref = cgdr.recurrent_step(qk, kk, vk, bk, pool2, src, g=gk, dst_indices=dst)
    assert out.shape == (2, 3, 4, 24) and torch.equal(out, ref) and torch.equal(pool, pool2)
    before = pool.clone()
    out, states = ct.recurrent_step(qk, kk, vk, bk, pool, src, g=gk, output_states=True)
    rout, rstates = cgdr.recurrent_step(qk, kk, vk, bk, pool2.clone(), src, g=gk, output_states=True)
    assert torch.equal(out, rout) and torch.equal(states, rstates) and torch.equal(pool, before)


@pytest.mark.parametrize("kw,pattern", [
    (dict(initial_state_indices=torch.tensor([1, 1], dtype=torch.int32)),
     r"initial_state_indices: expected distinct non-negative indices"),
    (dict(checkpoint_every=-1), r"checkpoint_every: expected 0 \(none\) or a positive token count, got -1"),
    (dict(use_gate_in_kernel=True), r"A_log: required with the raw gate a"),
    (dict(state_slot_stride=5), r"options\.state_slot_stride: expected 0 \(dense\) or"),
])
def test_serving_bad_input_through_the_ops(kw, pattern):
    q, k, v, g, beta, h0 = inputs()
    pool = torch.cat([h0, h0])
    before = pool.clone()
    with pytest.raises(ValueError, match=pattern):
        ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool if "initial_state_indices" in kw else h0,
                                  output_final_state=True, **kw)
    assert torch.equal(pool, before)


def test_verify_bad_input_through_the_ops():
    q, k, v, g, beta, h0 = inputs()
    qk, kk, vk, bk, gk = (x[:, :3] for x in (q, k, v, beta, g))
    pool = torch.cat([h0, h0])
    before = pool.clone()
    src = torch.tensor([1, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"dst_indices: give either dst_indices or output_states=True"):
        ct.recurrent_step(qk, kk, vk, bk, pool, src, g=gk, dst_indices=torch.zeros(2, 3, dtype=torch.int32),
                          output_states=True)
    with pytest.raises(ValueError, match=r"dst_indices: "):
        ct.recurrent_step(qk, kk, vk, bk, pool, src, g=gk, dst_indices=torch.tensor([[0, 0, 3], [4, 5, 6]],
                                                                                    dtype=torch.int32))
    with pytest.raises(ValueError, match=r"A_log: required with the raw gate a"):
        ct.recurrent_step(qk, kk, vk, bk, pool, src, a=gk)
    assert torch.equal(pool, before)


def test_caller_buffers_through_the_ops():
    """out= / final_state=: the same bits as without them, written into the caller's tensors and returned."""
    q, k, v, g, beta, h0 = inputs()
    ro, rs = ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    out, final = torch.full_like(ro, 7.0), torch.full_like(rs, 7.0)
    o, s = ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True, out=out,
                                     final_state=final)
    assert o is out and s is final and torch.equal(o, ro) and torch.equal(s, rs)
    o, s = ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                     out=torch.full_like(ro, 7.0))  # out= alone: the state is new
    assert torch.equal(o, ro) and torch.equal(s, rs)
    o, s = ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                     final_state=final.fill_(7.0))  # final_state= alone: o is new
    assert s is final and torch.equal(o, ro) and torch.equal(s, rs)
    o, s, ck = ct.chunk_gated_delta_rule(q, k, v, g, beta, out=out.fill_(7.0), checkpoint_every=8)
    ro, _, rck = ct.chunk_gated_delta_rule(q, k, v, g, beta, checkpoint_every=8)
    assert o is out and s is None and torch.equal(o, ro) and torch.equal(ck, rck) and ck.shape[0] == 8
    # A pool: out= is the caller's, the pool is written in place as without it.
    idx = torch.tensor([2, 0], dtype=torch.int32)
    want_pool, got_pool = torch.cat([h0, h0]), torch.cat([h0, h0])
    ro, _ = ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=want_pool, output_final_state=True,
                                      initial_state_indices=idx)
    o, p = ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=got_pool, output_final_state=True,
                                     initial_state_indices=idx, out=out.fill_(7.0))
    assert o is out and p is got_pool and torch.equal(o, ro) and torch.equal(got_pool, want_pool)


SEVENS = lambda *shape, dtype=torch.float32: torch.full(shape, 7.0, dtype=dtype)
POOL_IDX = torch.tensor([2, 0], dtype=torch.int32)


@pytest.mark.parametrize("kw, pattern", [
    (dict(out=SEVENS(2, 37, 4, 23), final_state=SEVENS(2, 4, 16, 24)), r"out: expected shape \[2, 37, 4, 24\]"),
    (dict(out=SEVENS(2, 37, 4, 24, dtype=torch.bfloat16)), r"out: expected dtype f32 \(the call.s result\), got bf16"),
    (dict(out=SEVENS(2, 37, 4, 24).numpy()), r"out: expected a torch.Tensor \(or None\), got ndarray"),
    (dict(out=SEVENS(2, 37, 4, 24), final_state=SEVENS(2, 4, 16, 24), output_final_state=False),
     r"final_state: given with output_final_state=False"),
    (dict(out=SEVENS(2, 37, 4, 24), final_state=SEVENS(2, 4, 24, 16)), r"final_state: expected shape"),
    (dict(out=SEVENS(2, 37, 4, 23), initial_state_indices=POOL_IDX), r"out: expected shape"),
    (dict(final_state=SEVENS(3, 4, 16, 24), initial_state_indices=POOL_IDX), r"final_state: not taken with a pool"),
])
def test_caller_buffers_bad_input_through_the_ops(kw, pattern):
    """A bad buffer is refused before anything is written: every buffer and the pool keep their 7s."""
    q, k, v, g, beta, h0 = inputs()
    state = SEVENS(3, 4, 16, 24) if "initial_state_indices" in kw else h0
    kw = dict(dict(output_final_state=True), **kw)
    with pytest.raises((ValueError, TypeError), match=pattern):
        ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=state, **kw)
    for name in ("out", "final_state"):
        assert name not in kw or (torch.as_tensor(kw[name]) == 7.0).all(), f"{name} was written before the error"
    assert "initial_state_indices" not in kw or (state == 7.0).all(), "the pool was written before the error"


class PrefillInto(torch.nn.Module):
    """A serving loop's prefill into preallocated buffers: dense, then on a pool."""

    def forward(self, q, k, v, g, beta, h0, out, final, pool, idx):
        o, s = ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True, out=out,
                                         final_state=final)
        o2, _ = ct.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool, output_final_state=True,
                                          initial_state_indices=idx, out=torch.empty_like(o))
        return o.sum() + s.sum() + o2.sum()


@needs_ops
def test_compile_fullgraph_caller_buffers():
    """torch.compile(fullgraph=True) traces the buffer ops, and the buffers hold what eager writes."""
    q, k, v, g, beta, h0 = inputs()
    idx = torch.tensor([1, 0], dtype=torch.int32)
    bufs = lambda: (torch.empty(2, 37, 4, 24), torch.empty(2, 4, 16, 24), torch.cat([h0, h0]))
    want, got = bufs(), bufs()
    with torch.no_grad():
        want_y = PrefillInto()(q, k, v, g, beta, h0, *want, idx)
        torch._dynamo.reset()
        got_y = torch.compile(PrefillInto(), fullgraph=True, backend="aot_eager")(q, k, v, g, beta, h0, *got, idx)
    assert torch.equal(got_y, want_y)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


class ServingBlock(torch.nn.Module):
    """Prefill on a pool with checkpoints and the gate in the kernel, then a verify of K = 2 tokens."""

    def forward(self, q, k, v, a, beta, pool, idx, a_log, dt_bias, dst):
        o, pool_out, ck = ct.chunk_gated_delta_rule(q, k, v, a, beta, initial_state=pool, output_final_state=True,
                                                    initial_state_indices=idx, checkpoint_every=8,
                                                    use_gate_in_kernel=True, A_log=a_log, dt_bias=dt_bias)
        o1 = ct.recurrent_step(q[:, :2] * 2, k[:, :2], v[:, :2], beta[:, :2], pool, idx, a=a[:, :2], A_log=a_log,
                               dt_bias=dt_bias, dst_indices=dst)
        o2, states = ct.recurrent_step(q[:, :2], k[:, :2], v[:, :2], beta[:, :2], pool, idx, g=-a[:, :2].abs(),
                                       output_states=True)
        return o.sum() + o1.sum() + o2.sum(), ck * 2, states + 1


@needs_ops
def test_compile_fullgraph_serving():
    q, k, v, g, beta, h0 = inputs()
    a_log, dt_bias = torch.rand(4) - 0.5, torch.rand(4) - 0.5
    idx, dst = torch.tensor([3, 0], dtype=torch.int32), torch.tensor([[1, 2], [-1, 5]], dtype=torch.int32)
    args = lambda pool: (q, k, v, -g, beta, pool, idx, a_log, dt_bias, dst)
    want_pool, got_pool = torch.cat([h0, h0, h0]), torch.cat([h0, h0, h0])
    with torch.no_grad():
        want = ServingBlock()(*args(want_pool))
        torch._dynamo.reset()
        got = torch.compile(ServingBlock(), fullgraph=True, backend="aot_eager")(*args(got_pool))
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert torch.equal(got_pool, want_pool)


class Block(torch.nn.Module):
    """A toy gated-delta-rule block: projections around the op, prefill then one decode step."""

    def __init__(self, D=32, H=2, HV=4, K=16, V=8):
        super().__init__()
        self.H, self.HV, self.K, self.V = H, HV, K, V
        self.qk = torch.nn.Linear(D, 2 * H * K)
        self.vbg = torch.nn.Linear(D, HV * (V + 2))
        self.out = torch.nn.Linear(HV * V, D)

    def split(self, x):
        B, T, _ = x.shape
        q, k = self.qk(x).view(B, T, 2, self.H, self.K).unbind(2)
        vbg = self.vbg(x).view(B, T, self.HV, self.V + 2)
        v, b, a = vbg[..., :self.V], vbg[..., self.V], vbg[..., self.V + 1]
        return q, k, v, -torch.nn.functional.softplus(a), torch.sigmoid(b)

    def forward(self, x, x_next):
        q, k, v, g, beta = self.split(x)
        o, state = ct.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
        q1, k1, v1, g1, b1 = self.split(x_next)
        rows = torch.arange(x.shape[0], dtype=torch.int32)
        o1 = ct.recurrent_step(q1[:, 0], k1[:, 0], v1[:, 0], b1[:, 0], state, rows, g=g1[:, 0],
                               use_qk_l2norm_in_kernel=True)
        y = torch.cat([o, o1.unsqueeze(1)], 1)
        return self.out(y.flatten(2)), state


@needs_ops
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_matches_eager(backend):
    torch.manual_seed(0)
    block = Block().eval()
    x, x_next = torch.randn(2, 21, 32), torch.randn(2, 1, 32)
    with torch.no_grad():
        want_y, want_s = block(x, x_next)
        torch._dynamo.reset()
        got_y, got_s = torch.compile(block, fullgraph=True, backend=backend)(x, x_next)
    assert rel_err(got_y, f64(want_y)) <= 1e-6 and rel_err(got_s, f64(want_s)) <= 1e-6


@needs_ops
def test_compile_transformers_dropins():
    """The transformers drop-ins themselves trace whole (their dtype and
    shape handling is plain torch around the ops)."""
    q, k, v, g, beta, h0 = inputs(H=4, HV=4)

    def layer(q, k, v, g, beta, h0):
        o, s = ct.torch_chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                               use_qk_l2norm_in_kernel=True)
        o1, s1 = ct.torch_recurrent_gated_delta_rule(q[:, :1], k[:, :1], v[:, :1], g[:, :1], beta[:, :1], s, True,
                                                     use_qk_l2norm_in_kernel=True)
        return o, o1, s1

    want = layer(q, k, v, g, beta, h0)
    torch._dynamo.reset()
    got = torch.compile(layer, fullgraph=True, backend="aot_eager")(q, k, v, g, beta, h0)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def kda_inputs(B=2, T=9, H=1, HV=2, K=17, V=8, seed=3):
    """KDA's (docs/SPEC.md 10): g [B, T, HV, K], one log-decay per key channel."""
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
    v = torch.randn(B, T, HV, V, generator=gen)
    g = -torch.rand(B, T, HV, K, generator=gen) * 0.3
    beta = torch.rand(B, T, HV, generator=gen) * 0.9 + 0.05
    h0 = torch.rand(B, HV, K, V, generator=gen) - 0.5
    return q, k, v, g, beta, h0


@needs_ops
@pytest.mark.parametrize("name", ["chunk_kda", "fused_recurrent_kda"])
def test_kda_ops(name):
    """torch.ops.cgdr.chunk_kda / fused_recurrent_kda: fake kernel shapes and opcheck (the gate, bound, layouts)."""
    op = getattr(torch.ops.cgdr, name)
    q, k, v, g, beta, h0 = kda_inputs()
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    fq, fk, fv, fg, fb = (mode.from_tensor(x.to(torch.bfloat16)) for x in (q, k, v, g, beta))
    with mode:
        o, s, ck = op(fq, fk, fv, fg, fb, None, None, None, True, True)
        assert o.shape == (2, 9, 2, 8) and o.dtype == torch.bfloat16
        assert s.shape == (2, 2, 8, 17) and s.dtype == torch.float32 and ck.shape == (0, 2, 8, 17)
        _, _, ck = op(fq, fk, fv, fg, fb, checkpoint_every=4)
        assert ck.shape == (4, 2, 17, 8)
    torch.library.opcheck(op, (q, k, v, g, beta, 0.3, h0, None, True, False))
    torch.library.opcheck(op, (q[:1], k[:1], v[:1], g[:1], beta[:1], None, None, torch.tensor([0, 4, 9]), False, True))
    torch.library.opcheck(op, (q, k, v, g * 10, beta, None, h0, None, False, False, True, torch.zeros(2),
                               torch.rand(34), True, True, -5.0))  # gate, bound, 2 * sigmoid(beta)
    torch.library.opcheck(op, (q, k, v, g, beta), {"use_gate_in_kernel": True, "lower_bound": -2.0,
                                                   "checkpoint_every": 4})


@needs_ops
def test_compile_fullgraph_kda():
    q, k, v, g, beta, h0 = kda_inputs()

    def f(q, k, v, g, beta, h0):
        o, s = ct.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                            use_qk_l2norm_in_kernel=True)
        o2, _ = ct.fused_recurrent_kda(q, k, v, g, beta, initial_state=s)
        return o + o2

    want = f(q, k, v, g, beta, h0)
    got = torch.compile(f, fullgraph=True, backend="eager")(q, k, v, g, beta, h0)
    assert torch.equal(got, want)
