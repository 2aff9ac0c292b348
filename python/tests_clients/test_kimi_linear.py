"""transformers' Kimi Linear (KimiLinearForCausalLM) as the oracle and the
client of KDA (docs/SPEC.md 10): a small seeded model built from a config
(nothing downloaded) run with transformers' own pure-torch KDA
(chunk_kimi_delta_attention, recurrent_kimi_delta_attention of
modeling_kimi_linear) and with cgdr patched in (cgdr.torch.patch_transformers):
fp32 logits of a padded batch, greedy generation with the cache (the decode
steps' recurrent function), the cache's states, and the functions alone on
odd head sizes, without a state, in bf16."""
import contextlib
import inspect

import pytest
import torch

transformers = pytest.importorskip("transformers")
kimi = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")

import cgdr.torch  # noqa: E402
from _qwen3_next import padded_prompts, rel  # noqa: E402  (the prompts and the error of the Qwen3-Next tests)
from cgdr import reference_torch as R  # noqa: E402

NAMES = ("chunk_kimi_delta_attention", "recurrent_kimi_delta_attention")
LENGTHS = [40, 27]  # a batch of 2 prompts, the second left-padded by 13 tokens


def small_config():
    """4 layers, 3 of them KDA (4 heads of 40: not a multiple of 16), one MLA
    attention layer, a small MoE."""
    return transformers.KimiLinearConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=64, q_lora_rank=None, qk_rope_head_dim=16,
        qk_nope_head_dim=32, v_head_dim=32, num_local_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        linear_head_dim=40, linear_num_heads=4, linear_conv_kernel_dim=4, max_position_embeddings=512,
        initializer_range=0.1, pad_token_id=0, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False)


def build_model(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    model = transformers.KimiLinearForCausalLM(small_config()).eval()
    with torch.no_grad():  # decays that matter: A_log, dt_bias are left at their initial values otherwise
        for layer in model.model.layers:
            gate = getattr(getattr(layer, "self_attn", None), "forget_gate", None)
            if gate is not None:
                gate.A_log.uniform_(-1.0, 0.5)
                gate.dt_bias.uniform_(-1.0, 1.0)
    return model.to(dtype)


def fallback(name):
    """transformers' own pure-torch function behind `name` (the name may be wrapped for the kernel hub)."""
    fn = inspect.unwrap(getattr(kimi, name))
    assert fn.__module__ == kimi.__name__ and fn.__name__ == name, fn
    return fn


@contextlib.contextmanager
def transformers_fallback():
    saved = {n: getattr(kimi, n) for n in NAMES}
    try:
        for n in NAMES:
            setattr(kimi, n, fallback(n))
        yield
    finally:
        for n, fn in saved.items():
            setattr(kimi, n, fn)


def test_patch_replaces_and_restores():
    before = {n: getattr(kimi, n) for n in NAMES}
    with cgdr.torch.patch_transformers() as patch:
        assert kimi.__name__ in patch.modules
        assert kimi.chunk_kimi_delta_attention is cgdr.torch.chunk_kimi_delta_attention
        assert kimi.recurrent_kimi_delta_attention is cgdr.torch.recurrent_kimi_delta_attention
    assert {n: getattr(kimi, n) for n in NAMES} == before
    with cgdr.torch.patch_transformers(["kimi_linear"]) as patch:
        assert patch.modules == [kimi.__name__]


def test_logits_fp32_padded_batch(figures):
    model = build_model()
    ids, mask = padded_prompts(model.config.vocab_size, LENGTHS)
    with torch.no_grad():
        with transformers_fallback():
            ref = model(input_ids=ids, attention_mask=mask).logits
        with cgdr.torch.patch_transformers(["kimi_linear"]):
            got = model(input_ids=ids, attention_mask=mask).logits
    valid = mask.bool()
    err = rel(got[valid], ref[valid])
    figures["transformers Kimi Linear fp32 logits rel err (padded batch of 2)"] = err
    assert err <= 1e-4
    assert ref[valid].std() > 0.1  # logits that carry information


def test_greedy_generation_with_the_cache(figures):
    """Prefill then decode steps (recurrent_kimi_delta_attention on one token): the same tokens, close logits."""
    model = build_model(seed=3)
    ids, mask = padded_prompts(model.config.vocab_size, [24], seed=5)
    kw = dict(max_new_tokens=8, do_sample=False, output_logits=True, return_dict_in_generate=True,
              pad_token_id=0)
    with torch.no_grad():
        with transformers_fallback():
            ref = model.generate(input_ids=ids, attention_mask=mask, **kw)
        with cgdr.torch.patch_transformers(["kimi_linear"]):
            got = model.generate(input_ids=ids, attention_mask=mask, **kw)
    assert torch.equal(got.sequences, ref.sequences)
    err = max(rel(g, r) for g, r in zip(got.logits, ref.logits))
    figures["transformers Kimi Linear greedy decode logits rel err (8 steps)"] = err
    assert err <= 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_state", [True, False])
def test_functions_against_fp64(dtype, with_state):
    """The two functions alone against the FP64 recurrence (l2norm in the kernel, as the layer calls them),
    and against transformers' own at its accuracy; the state comes back float32 [B, H, K, V]."""
    gen = torch.Generator().manual_seed(11)
    B, T, H, K, V = 2, 37, 3, 40, 24
    q, k, v = (torch.randn(B, T, H, d, generator=gen).to(dtype) for d in (K, K, V))
    g = -torch.rand(B, T, H, K, generator=gen)
    beta = torch.rand(B, T, H, generator=gen).to(dtype)
    h0 = torch.randn(B, H, K, V, generator=gen) * 0.1 if with_state else None
    ro, rs = R.recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                          use_qk_l2norm_in_kernel=True, dtype=torch.float64)
    limit = 2e-5 if dtype == torch.float32 else 2 * rel(ro.to(dtype), ro) + 1e-6
    for name in NAMES:
        o, s = getattr(cgdr.torch, name)(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                         use_qk_l2norm_in_kernel=True)
        assert o.dtype == dtype and o.shape == (B, T, H, V)
        assert s.dtype == torch.float32 and s.shape == (B, H, K, V)
        assert rel(o, ro) <= limit, name
        assert rel(s, rs) <= 2e-5, name
        _, none = getattr(cgdr.torch, name)(q, k, v, g, beta, initial_state=h0, output_final_state=False,
                                            use_qk_l2norm_in_kernel=True)
        assert none is None
        if dtype == torch.float32:
            fo, fs = fallback(name)(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                    use_qk_l2norm_in_kernel=True)
            assert rel(fo, ro) <= 1e-4 and rel(s, fs.float()) <= 1e-4, name  # transformers' own agrees


def test_a_scalar_gate_is_refused_by_name():
    q = k = v = torch.randn(1, 4, 2, 16)
    with pytest.raises(ValueError, match=r"g: expected the per-channel decay \[B, T, H, K\], got \(1, 4, 2\)"):
        cgdr.torch.chunk_kimi_delta_attention(q, k, v, torch.zeros(1, 4, 2), torch.ones(1, 4, 2))
