"""transformers' Qwen3-Next as the oracle and the client: the same seeded
model run with transformers' own pure-torch gated delta rule and with cgdr
patched in (cgdr.torch.patch_transformers), on CPU: fp32 logits of a padded
batch, greedy generation with the cache (decode steps), the cache's states,
bf16, and packed sequences (cu_seqlens) at the function level."""
import torch
import transformers.models.qwen3_next.modeling_qwen3_next as qwen3_next

import cgdr.torch
from _qwen3_next import (NAMES, build_model, padded_prompts, rel, small_config, torch_fallback,
                         transformers_fallback, with_cgdr)

LENGTHS = [40, 27]  # a batch of 2 prompts, the second left-padded by 13 tokens


def test_patch_replaces_and_restores():
    before = {n: getattr(qwen3_next, n) for n in NAMES}
    with cgdr.torch.patch_transformers() as patch:
        assert "transformers.models.qwen3_next.modeling_qwen3_next" in patch.modules
        assert qwen3_next.torch_chunk_gated_delta_rule is cgdr.torch.torch_chunk_gated_delta_rule
        assert qwen3_next.torch_recurrent_gated_delta_rule is cgdr.torch.torch_recurrent_gated_delta_rule
    assert {n: getattr(qwen3_next, n) for n in NAMES} == before


def test_logits_fp32_padded_batch(figures):
    cfg = small_config()
    model = build_model(cfg)
    ids, mask = padded_prompts(cfg.vocab_size, LENGTHS)
    with torch.no_grad():
        with transformers_fallback():
            ref = model(input_ids=ids, attention_mask=mask).logits
        with with_cgdr():
            got = model(input_ids=ids, attention_mask=mask).logits
    valid = mask.bool()
    err = rel(got[valid], ref[valid])
    figures["transformers fp32 logits rel err (padded batch of 2)"] = err
    assert err <= 1e-4
    assert ref[valid].std() > 0.1  # logits that carry information, not a flat line


def test_greedy_generation_identical(figures):
    """32 greedy tokens for a batch of 2 padded prompts: the prompt goes
    through the chunked function, every later token through the one-token
    recurrent one (cgdr's decode step on the cache's states)."""
    cfg = small_config()
    model = build_model(cfg)
    ids, mask = padded_prompts(cfg.vocab_size, LENGTHS, seed=2)
    calls = []
    decode = cgdr.torch.torch_recurrent_gated_delta_rule

    def spy(query, *args, **kwargs):
        calls.append(query.shape[1])
        return decode(query, *args, **kwargs)

    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, attention_mask=mask, pad_token_id=0)
    with torch.no_grad():
        with transformers_fallback():
            ref = model.generate(ids, **kw)
        with with_cgdr():
            qwen3_next.torch_recurrent_gated_delta_rule = spy
            got = model.generate(ids, **kw)
    new_ref, new_got = ref[:, ids.shape[1]:], got[:, ids.shape[1]:]
    same = int((new_ref == new_got).sum())
    figures["transformers greedy tokens identical"] = f"{same}/{new_ref.numel()}"
    assert new_ref.shape == (2, 32)
    assert torch.equal(new_got, new_ref)
    assert len(set(new_ref[0].tolist())) > 4  # not one token repeated
    assert calls and set(calls) == {1} and len(calls) == 31 * 3  # 31 decode steps x 3 linear-attention layers


def test_cache_states_and_decode_step(figures):
    """The cache after a prefill holds the same recurrent states, and one
    decode step from it gives the same logits."""
    cfg = small_config()
    model = build_model(cfg, seed=3)
    ids, mask = padded_prompts(cfg.vocab_size, LENGTHS, seed=3)
    nxt = torch.tensor([[5], [7]])
    mask2 = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], 1)
    runs = {}
    with torch.no_grad():
        for name, ctx in (("torch", transformers_fallback), ("cgdr", with_cgdr)):
            with ctx():
                out = model(input_ids=ids, attention_mask=mask, use_cache=True)
                cache = out.past_key_values
                states = [cache.get_recurrent_state(i, state_idx=0).clone()
                          for i, t in enumerate(cfg.layer_types) if t == "linear_attention"]
                step = model(input_ids=nxt, attention_mask=mask2, past_key_values=cache, use_cache=True).logits
                runs[name] = (states, step)
    (ref_states, ref_step), (states, step) = runs["torch"], runs["cgdr"]
    assert len(states) == 3 and all(s.dtype == torch.float32 for s in states)
    err_state = max(rel(s, r) for s, r in zip(states, ref_states))
    err_step = rel(step, ref_step)
    figures["transformers cache state rel err (max over layers)"] = err_state
    figures["transformers decode-step logits rel err"] = err_step
    assert err_state <= 1e-4 and err_step <= 1e-4


def test_logits_bf16(figures):
    """bf16 weights and activations: both paths compute the rule in FP32 and
    round the output to bf16, so they differ by bf16 roundings that the
    following layers amplify; each is compared with the fp32 model too."""
    cfg = small_config()
    ids, mask = padded_prompts(cfg.vocab_size, LENGTHS, seed=4)
    valid = mask.bool()
    with torch.no_grad():
        with transformers_fallback():
            ref32 = build_model(cfg).model(input_ids=ids, attention_mask=mask).last_hidden_state
        model = build_model(cfg, dtype=torch.bfloat16)
        with transformers_fallback():
            ref = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        with with_cgdr():
            got = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert got.dtype == torch.bfloat16
    err, err_torch32, err_cgdr32 = rel(got[valid], ref[valid]), rel(ref[valid], ref32[valid]), rel(got[valid],
                                                                                                   ref32[valid])
    figures["transformers bf16 hidden rel err cgdr vs torch"] = err
    figures["transformers bf16 hidden rel err torch vs fp32"] = err_torch32
    figures["transformers bf16 hidden rel err cgdr vs fp32"] = err_cgdr32
    assert err <= 2e-2
    assert err_cgdr32 <= 1.5 * err_torch32 + 1e-3  # cgdr's bf16 run is no further from fp32 than transformers'


def test_packed_sequences_cu_seqlens(figures):
    """Sequences packed along T with cu_seqlens, as transformers passes them
    (cu_seq_lens_q -> cu_seqlens): its dispatcher refuses them when only the
    torch fallback is there; cgdr keeps them apart, and each sequence must
    equal the fallback run on that sequence alone."""
    gen = torch.Generator().manual_seed(5)
    lens, H, HV, K, V = [17, 64, 1, 50], 2, 4, 64, 128
    T = sum(lens)
    q, k = torch.randn(1, T, H, K, generator=gen), torch.randn(1, T, H, K, generator=gen)
    v = torch.randn(1, T, HV, V, generator=gen)
    g = -torch.nn.functional.softplus(torch.randn(1, T, HV, generator=gen))
    beta = torch.rand(1, T, HV, generator=gen)
    h0 = torch.randn(len(lens), HV, K, V, generator=gen) * 0.1
    cu = torch.tensor([0, 17, 81, 82, 132])
    o, s = cgdr.torch.torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True,
                                                   use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    fallback = torch_fallback("torch_chunk_gated_delta_rule")
    errs = []
    for n in range(len(lens)):
        a, b = int(cu[n]), int(cu[n + 1])
        # transformers' fallback repeats q/k per value head itself
        ro, rs = fallback(q[:, a:b], k[:, a:b], v[:, a:b], g=g[:, a:b], beta=beta[:, a:b], initial_state=h0[n:n + 1],
                          output_final_state=True, use_qk_l2norm_in_kernel=True)
        errs += [rel(o[:, a:b], ro), rel(s[n:n + 1], rs)]
    figures["transformers packed sequences rel err (max)"] = max(errs)
    assert max(errs) <= 1e-5
