"""A small Qwen3-Next built from a config (random seeded weights, nothing
downloaded), and the two ways of running its gated delta rule: transformers'
own pure-torch fallback, and cgdr through cgdr.torch.patch_transformers()."""
import contextlib
import inspect

import torch
import transformers
import transformers.models.qwen3_next.modeling_qwen3_next as qwen3_next

import cgdr.torch

NAMES = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")


def small_config(**overrides):
    """4 layers, 3 of them linear attention; GQA 4 key heads / 8 value heads
    (the real model's 1:2), key head dim 64, value head dim 128; a small MoE."""
    cfg = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
               layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
               num_attention_heads=4, num_key_value_heads=2, head_dim=64,
               linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=128,
               linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128,
               shared_expert_intermediate_size=128, max_position_embeddings=512, initializer_range=0.1,
               pad_token_id=0, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False)
    cfg.update(overrides)
    return transformers.Qwen3NextConfig(**cfg)


def build_model(config, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    model = transformers.Qwen3NextForCausalLM(config).eval()
    return model.to(dtype)


def torch_fallback(name):
    """transformers' pure-torch function behind `name` (the module-level name
    may stand for fla's kernel when fla imports, wrapped either way)."""
    fn = inspect.unwrap(getattr(qwen3_next, name))
    assert fn.__module__ == qwen3_next.__name__ and fn.__name__ == name, fn
    return fn


@contextlib.contextmanager
def transformers_fallback():
    """The layers compute with transformers' own pure-torch fallback."""
    saved = {n: getattr(qwen3_next, n) for n in NAMES}
    fallbacks = {n: torch_fallback(n) for n in NAMES}
    try:
        for n in NAMES:
            setattr(qwen3_next, n, fallbacks[n])
        yield
    finally:
        for n, fn in saved.items():
            setattr(qwen3_next, n, fn)


@contextlib.contextmanager
def with_cgdr():
    """The layers compute with cgdr (docs/python.md's recipe)."""
    with cgdr.torch.patch_transformers(["qwen3_next"]) as patch:
        yield patch


def padded_prompts(vocab, lengths, seed=1, pad=0):
    """Left-padded random prompts (as a tokenizer pads for generation) and their attention mask."""
    gen = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.full((len(lengths), T), pad, dtype=torch.long)
    mask = torch.zeros((len(lengths), T), dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, T - n:] = torch.randint(2, vocab, (n,), generator=gen)
        mask[i, T - n:] = 1
    return ids, mask


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return float((x - ref).norm() / ref.norm())
