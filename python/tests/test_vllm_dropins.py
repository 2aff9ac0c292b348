"""cgdr.vllm without vLLM: the drop-ins against the FP64 recurrence on vLLM's
shapes (strided pools, skipped rows, ragged verify), and the plugin's
install / hand-back / signature rules on a stand-in for vllm._custom_ops.
python/tests_vllm runs the same drop-ins against vLLM's own ops."""
import inspect
import logging
import sys
import types

import pytest
import torch

import cgdr.vllm as cv
from _vllm_cases import gate_fp64, gate_params, pool_storage, rel, run_fp64, tokens, untouched

H, HV, D = 2, 4, 32
DROP_INS = ("chunk_gated_delta_rule_cpu", "fused_sigmoid_gating_delta_rule_update_cpu",
            "fused_sigmoid_gating_delta_rule_update_spec_cpu", "fused_gdn_gating_cpu")


def test_prefill_on_a_strided_pool_matches_fp64():
    lens, P = [5, 0, 70], 6
    T = sum(lens)
    q, k, v, a, b = tokens(T, H, HV, D, seed=1, dtype=torch.float32)
    A_log, dt_bias = gate_params(HV, seed=1)
    g, beta = cv.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    storage = pool_storage(P, HV, D, seed=2)
    before = storage.clone()
    slots = torch.tensor([4, 1, 2], dtype=torch.int32)
    cu = torch.tensor([0, 5, 5, T], dtype=torch.int32)
    o, pool = cv.chunk_gated_delta_rule_cpu(q[None], k[None], v[None], g, beta, storage[:, :HV], True, cu, False, True,
                                            slots)
    assert o.shape == (1, T, HV, D) and pool.data_ptr() == storage.data_ptr()
    assert untouched(before, storage, HV, [4, 2])  # slot 1's sequence is empty: not written
    t0 = 0
    for n, length in enumerate(lens):
        out, states = run_fp64(before[int(slots[n]), :HV], q[t0:t0 + length], k[t0:t0 + length], v[t0:t0 + length],
                               g[0, t0:t0 + length], beta[0, t0:t0 + length], D)
        if length:
            assert rel(o[0, t0:t0 + length], out) < 2e-5
            assert rel(storage[int(slots[n]), :HV], states[-1]) < 2e-5
        t0 += length


def test_decode_skips_negative_rows():
    N, P = 3, 5
    q, k, v, a, b = tokens(N, H, HV, D, seed=3, dtype=torch.float32)
    A_log, dt_bias = gate_params(HV, seed=3)
    storage = pool_storage(P, HV, D, seed=4)
    before = storage.clone()
    slots = torch.tensor([3, -1, 0], dtype=torch.int32)
    o = cv.fused_sigmoid_gating_delta_rule_update_cpu(A_log, dt_bias.float(), q[None], k[None], v[None], a, b,
                                                      storage[:, :HV], slots, torch.arange(N + 1, dtype=torch.int32),
                                                      True)
    assert o.shape == (N, 1, HV, D) and torch.all(o[1] == 0)
    assert untouched(before, storage, HV, [3, 0])
    g, beta = gate_fp64(a, b, A_log, dt_bias.float())
    for n in (0, 2):
        s = int(slots[n])
        out, states = run_fp64(before[s, :HV], q[n:n + 1], k[n:n + 1], v[n:n + 1], g[n:n + 1], beta[n:n + 1], D)
        assert rel(o[n, 0], out[0]) < 2e-5 and rel(storage[s, :HV], states[-1]) < 2e-5


@pytest.mark.parametrize("lens,accepted", [([3, 3], [1, 3]), ([3, 0, 1], [2, 1, 0])])
def test_verify_matches_fp64(lens, accepted):
    N, S, T = len(lens), 3, sum(lens)
    q, k, v, a, b = tokens(T, H, HV, D, seed=5, dtype=torch.float32)
    A_log, dt_bias = gate_params(HV, seed=5)
    spec = torch.arange(1, N * S + 1, dtype=torch.int32).reshape(N, S)
    storage = pool_storage(N * S + 2, HV, D, seed=6)
    before = storage.clone()
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    o = cv.fused_sigmoid_gating_delta_rule_update_spec_cpu(A_log, dt_bias.float(), q, k, v, a, b, storage[:, :HV], spec,
                                                           torch.tensor(accepted, dtype=torch.int32), cu, True)
    assert o.shape == (T, HV, D)
    written = [int(spec[n, t]) for n, length in enumerate(lens) for t in range(length)]
    assert untouched(before, storage, HV, written)
    g, beta = gate_fp64(a, b, A_log, dt_bias.float())
    t0 = 0
    for n, length in enumerate(lens):
        sl = slice(t0, t0 + length)
        src = int(spec[n, max(accepted[n] - 1, 0)])  # no draft accepted: column 0, as vLLM
        out, states = run_fp64(before[src, :HV], q[sl], k[sl], v[sl], g[sl], beta[sl], D)
        if length:
            assert rel(o[sl], out) < 2e-5
        for t in range(length):
            assert rel(storage[int(spec[n, t]), :HV], states[t]) < 2e-5
        t0 += length


def test_refusals_write_nothing():
    q, k, v, a, b = tokens(4, H, HV, D, seed=7, dtype=torch.float32)
    storage = pool_storage(3, HV, D, seed=8)
    before = storage.clone()
    g, beta = cv.fused_gdn_gating_cpu(*gate_params(HV, seed=7)[:1], a, b, torch.zeros(HV))
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(cv.Unsupported, match="head_first"):
        cv.chunk_gated_delta_rule_cpu(q[None], k[None], v[None], g, beta, storage[:, :HV], True, cu, True, True,
                                      torch.tensor([0], dtype=torch.int32))
    with pytest.raises(ValueError, match="initial_state_indices"):
        cv.chunk_gated_delta_rule_cpu(q[None], k[None], v[None], g, beta, storage[:, :HV], True, cu, False, True,
                                      torch.tensor([7], dtype=torch.int32))
    A_log, dt_bias = gate_params(HV, seed=7)
    with pytest.raises(cv.Unsupported, match="softplus"):
        cv.fused_sigmoid_gating_delta_rule_update_cpu(A_log, dt_bias, q[None, :1], k[None, :1], v[None, :1], a[:1],
                                                      b[:1], storage[:, :HV], torch.tensor([0], dtype=torch.int32),
                                                      cu, True, softplus_threshold=10.0)
    assert torch.equal(before, storage)


def test_decode_bad_input_writes_nothing():
    """The decode drop-in's own checks (it skips recurrent_step's): a clear
    error naming the tensor, and the pool as it was."""
    N = 2
    q, k, v, a, b = tokens(N, H, HV, D, seed=9, dtype=torch.float32)
    A_log, dt_bias = gate_params(HV, seed=9)
    storage = pool_storage(3, HV, D, seed=10)
    before = storage.clone()
    slots, cu = torch.tensor([2, 0], dtype=torch.int32), torch.arange(N + 1, dtype=torch.int32)

    def step(**kw):
        x = dict(A_log=A_log, dt_bias=dt_bias.float(), q=q[None], k=k[None], v=v[None], a=a, b=b,
                 initial_state_source=storage[:, :HV], initial_state_indices=slots, cu_seqlens=cu,
                 use_qk_l2norm_in_kernel=True)
        x.update(kw)
        return cv.fused_sigmoid_gating_delta_rule_update_cpu(**x)
    with pytest.raises(TypeError, match=r"^a: expected a torch tensor, got list"):
        step(a=a.tolist())
    with pytest.raises(TypeError, match=r"^query: expected torch dtype float16, bfloat16 or float32"):
        step(q=q[None].double())
    with pytest.raises(ValueError, match=r"^initial_state_indices: "):
        step(initial_state_indices=torch.tensor([2, 3], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^state_pool: expected a contiguous pool"):
        step(initial_state_source=storage[:, :HV].transpose(2, 3))
    with pytest.raises(ValueError, match=r"^beta: "):
        step(b=b[:, :1])
    assert torch.equal(before, storage)
    step()  # the same call with good inputs runs
    assert not torch.equal(before, storage)


# ---- the plugin, on a stand-in for vllm._custom_ops -----------------------------

def stand_in(changed=None):
    """A module with vLLM's four functions (the drop-ins' signatures), each
    recording its calls; `changed` names one given an extra parameter."""
    ops = types.ModuleType("fake_custom_ops")
    ops.calls = []
    for name in DROP_INS:
        params = list(inspect.signature(getattr(cv, name)).parameters.values())
        if name == changed:
            params.append(inspect.Parameter("new_arg", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None))

        def theirs(*args, _name=name, **kwargs):
            ops.calls.append(_name)
            return "vllm"
        theirs.__signature__ = inspect.Signature(params)
        setattr(ops, name, theirs)
    return ops


@pytest.fixture
def plugin():
    cv.uninstall()
    cv.reset_call_counts()
    yield cv
    cv.uninstall()
    cv.reset_call_counts()


def test_off_unless_asked(plugin, monkeypatch):
    monkeypatch.delenv("CGDR_VLLM", raising=False)
    monkeypatch.setitem(sys.modules, "vllm._custom_ops", None)  # importing it would fail: it is never imported
    cv.register()
    assert cv.installed() == []


def test_a_misspelt_switch_is_logged_and_installs_nothing(plugin, monkeypatch, caplog):
    """CGDR_VLLM=true is neither 0 nor 1: register() logs the value it did
    not understand and leaves vLLM's ops alone (a plugin never raises)."""
    monkeypatch.setenv("CGDR_VLLM", "true")
    monkeypatch.setitem(sys.modules, "vllm._custom_ops", None)  # importing it would fail: it is never imported
    monkeypatch.setattr(cv, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="vllm.cgdr"):
        cv.register()
    assert cv.installed() == []
    assert "not installed into vLLM" in caplog.text and "CGDR_VLLM: expected 0 (off) or 1 (on), got 'true'" in caplog.text


def test_install_serves_and_hands_back(plugin, caplog):
    ops = stand_in()
    own = {n: getattr(ops, n) for n in DROP_INS}
    caplog.set_level(logging.INFO, logger="vllm.cgdr")
    assert sorted(cv.install(ops)) == sorted(DROP_INS)
    assert cv.install(ops) == []  # once
    assert "serving vLLM's chunk_gated_delta_rule_cpu" in caplog.text
    A_log, dt_bias = gate_params(HV, seed=9)
    _, _, _, a, b = tokens(3, H, HV, D, seed=9)
    g, beta = ops.fused_gdn_gating_cpu(A_log, a, b, dt_bias)  # served by cgdr
    assert g.shape == (1, 3, HV) and ops.calls == []
    q, k, v, _, _ = tokens(3, H, HV, D, seed=9)
    storage = pool_storage(2, HV, D, seed=9)
    for _ in range(2):  # head_first: handed back to vLLM's own op, logged once
        assert ops.chunk_gated_delta_rule_cpu(q[None], k[None], v[None], g, beta, storage[:, :HV], True,
                                              torch.tensor([0, 3], dtype=torch.int32), True, True,
                                              torch.tensor([0], dtype=torch.int32)) == "vllm"
    assert ops.calls == ["chunk_gated_delta_rule_cpu"] * 2
    assert caplog.text.count("handed back to vLLM's own op") == 1
    counts = cv.call_counts()
    assert counts["fused_gdn_gating_cpu"] == {"cgdr": 1, "vllm": 0}
    assert counts["chunk_gated_delta_rule_cpu"] == {"cgdr": 0, "vllm": 2}
    cv.uninstall()
    assert {n: getattr(ops, n) for n in DROP_INS} == own


def test_other_signatures_replace_nothing(plugin, caplog):
    ops = stand_in(changed="fused_sigmoid_gating_delta_rule_update_cpu")
    own = {n: getattr(ops, n) for n in DROP_INS}
    with caplog.at_level(logging.WARNING, logger="vllm.cgdr"):
        assert cv.install(ops) == []
    assert {n: getattr(ops, n) for n in DROP_INS} == own and cv.installed() == []
    assert "fused_sigmoid_gating_delta_rule_update_cpu" in caplog.text and "nothing replaced" in caplog.text


def test_register_never_raises(plugin, monkeypatch, caplog):
    monkeypatch.setenv("CGDR_VLLM", "1")
    monkeypatch.setitem(sys.modules, "vllm._custom_ops", None)  # import fails
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    with caplog.at_level(logging.WARNING, logger="vllm.cgdr"):
        cv.register()
    assert cv.installed() == [] and "not installed into vLLM" in caplog.text
