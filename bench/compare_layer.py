#!/usr/bin/env python3
"""One Qwen3-Next linear-attention layer (transformers' Qwen3NextGatedDeltaNet)
at the real model's size, its whole forward with transformers' own pure-torch
gated delta rule and with cgdr patched in (cgdr.torch.patch_transformers).

The layer is built from a config (hidden 2048, 16 key heads and 32 value
heads of 128, as Qwen3-Next-80B-A3B; random seeded weights, nothing
downloaded) and run on the same input both ways, with the same threads. The
report gives both median times, their ratio (the layer's speedup: the
projections, the convolution and the gated norm are the same torch code in
both runs), and the relative difference of the outputs.

Needs torch and transformers (5.x); `make test-clients` makes such a venv
(~/.cache/cgdr/venv-clients). Run with that venv's python:

    python bench/compare_layer.py [--t 2048] [--b 1] [--hidden 2048] [--nk 16] [--nv 32] [--dk 128] [--dv 128]
        [--dtype f32|bf16] [--threads N] [--repeats 3] [--json FILE] [--plot FILE.png]
"""
import argparse
import datetime
import inspect
import json
import os
import sys

from compare_torch import cpu_name, median_time  # the script's folder is on sys.path


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--t", type=int, nargs="+", default=[2048], help="sequence length(s)")
    p.add_argument("--b", type=int, default=1)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--nk", type=int, default=16, help="linear_num_key_heads")
    p.add_argument("--nv", type=int, default=32, help="linear_num_value_heads")
    p.add_argument("--dk", type=int, default=128, help="linear_key_head_dim")
    p.add_argument("--dv", type=int, default=128, help="linear_value_head_dim")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--threads", type=int, default=0, help="0: all cores")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--plot", help="draw the times here (PNG; needs matplotlib)")
    return p.parse_args()


def build_layer(torch, transformers, a):
    cfg = transformers.Qwen3NextConfig(hidden_size=a.hidden, linear_num_key_heads=a.nk, linear_num_value_heads=a.nv,
                                       linear_key_head_dim=a.dk, linear_value_head_dim=a.dv, num_hidden_layers=1,
                                       layer_types=["linear_attention"], vocab_size=16, num_experts=1,
                                       num_experts_per_tok=1)
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet
    torch.manual_seed(a.seed)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    return Qwen3NextGatedDeltaNet(cfg, layer_idx=0).eval().to(dtype), dtype


def run_row(torch, layer, dtype, a, T):
    import transformers.models.qwen3_next.modeling_qwen3_next as qwen3_next
    import cgdr.torch

    x = torch.randn(a.b, T, a.hidden, generator=torch.Generator().manual_seed(a.seed + 1)).to(dtype)
    names = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
    saved = {n: getattr(qwen3_next, n) for n in names}
    outputs = {}
    try:
        for n in names:  # transformers' own pure-torch functions, whatever the module-level names dispatch to
            setattr(qwen3_next, n, inspect.unwrap(saved[n]))

        def torch_forward():
            with torch.no_grad():
                outputs["torch"] = layer(x)

        t_torch = median_time(torch_forward, a.repeats)
    finally:
        for n, fn in saved.items():
            setattr(qwen3_next, n, fn)

    def cgdr_forward():
        with torch.no_grad():
            outputs["cgdr"] = layer(x)

    with cgdr.torch.patch_transformers(["qwen3_next"]):
        t_cgdr = median_time(cgdr_forward, a.repeats)
    ref, got = outputs["torch"].double(), outputs["cgdr"].double()
    return dict(name="compare_layer", B=a.b, T=T, hidden=a.hidden, Nk=a.nk, Nv=a.nv, Dk=a.dk, Dv=a.dv,
                dtype=a.dtype, threads=torch.get_num_threads(), repeats=a.repeats, torch_seconds=t_torch,
                cgdr_seconds=t_cgdr, speedup=t_torch / t_cgdr, rel_diff=float((got - ref).norm() / ref.norm()))


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    Ts = [r["T"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    ax.plot(Ts, [r["torch_seconds"] for r in rows], "o-", label="transformers' pure-torch fallback")
    ax.plot(Ts, [r["cgdr_seconds"] for r in rows], "s-", label="cgdr patched in")
    for r in rows:
        ax.annotate(f"{r['speedup']:.1f}x", (r["T"], r["cgdr_seconds"]), textcoords="offset points", xytext=(4, -12))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens T (batch 1)")
    ax.set_ylabel("layer forward time (s)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main():
    a = parse()
    threads = a.threads or os.cpu_count()
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before libgomp loads: cgdr's "all threads" is this many
    try:
        import torch
        import transformers
    except ImportError as e:
        sys.exit(f"compare_layer: needs torch and transformers ({e}); run it with the venv `make test-clients` makes")
    torch.set_num_threads(threads)
    layer, dtype = build_layer(torch, transformers, a)
    rows = []
    print(f"Qwen3NextGatedDeltaNet hidden={a.hidden} Nk={a.nk} Nv={a.nv} Dk={a.dk} Dv={a.dv} {a.dtype} B={a.b}, "
          f"threads={threads}, torch {torch.__version__}, transformers {transformers.__version__}, {cpu_name()}")
    print(f"{'T':>6}{'torch s':>10}{'cgdr s':>10}{'speedup':>9}{'rel diff':>10}")
    for T in a.t:
        r = run_row(torch, layer, dtype, a, T)
        r.update(torch_version=torch.__version__, transformers_version=transformers.__version__, cpu=cpu_name(),
                 date=datetime.date.today().isoformat())
        rows.append(r)
        print(f"{T:>6}{r['torch_seconds']:>10.3f}{r['cgdr_seconds']:>10.3f}{r['speedup']:>8.1f}x{r['rel_diff']:>10.2e}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
            f.write("\n")
    if a.plot:
        plot(rows, a.plot, f"Qwen3-Next linear-attention layer (hidden {a.hidden}, {a.nk}/{a.nv} heads of "
                           f"{a.dk}/{a.dv}, {a.dtype}), {threads} threads\n{cpu_name()}, {rows[0]['date']}")


if __name__ == "__main__":
    main()
