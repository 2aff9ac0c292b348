#!/usr/bin/env python3
"""KDA (Kimi Delta Attention, docs/SPEC.md 10) on a CPU: cgdr against fla's
pure-torch references, in one process, on the same inputs and threads.

Kimi Linear's KDA layer shape (32 heads, Dk = Dv = 128, one sequence), bf16
q/k/v/beta, the per-channel decay g [B, T, HV, K] in f32 from Kimi's gate
(g = -exp(A_log) softplus(a + dt_bias), or with --lower-bound X fla's bounded
gate X sigmoid(exp(A_log) (a + dt_bias))), an f32 initial state, q/k
l2-normalised beforehand (fla's naive functions take no l2norm; cgdr is given
the same normalised rows). Timed in turn, rep by rep:

- cgdr.chunk_kda (the plan's choice of C; --precision / --engine pass a
  mode and an engine, e.g. --engine amx for bf16x3 on the AMX tiles) and
  cgdr.fused_recurrent_kda with algo="recurrent" (cgdr's token-by-token
  form);
- fla's naive_chunk_kda (fla/ops/kda/naive.py, chunks of 64, FP32) and, with
  --with-fla-recurrent, its naive_recurrent_kda, loaded from the file (`import
  fla` needs a GPU build of triton).

Reported: each one's median time, tokens/s, SPEC 8's GFLOP/s (6 Dk Dv per
token and head) and its share of the FP32 FMA peak measured in the same
process (cgdr's own probe), the ratios, and each one's normwise relative
error against the FP64 recurrence on a sample of value heads.

    ~/.cache/cgdr/venv-clients/bin/python bench/compare_kda.py [--build-dir build] [--t 2048 8192]
        [--threads N] [--reps 5] [--slow-reps 1] [--error-heads 2] [--lower-bound -5]
        [--precision auto|fp32|bf16|bf16x3|bf16x4] [--engine auto|vector|amx|amx-emu] [--json F]
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
for sub in (HERE, HERE.parent / "python" / "tests_clients"):
    sys.path.insert(0, str(sub))

from compare_torch import cpu_name, error_heads, import_cgdr  # noqa: E402

H, D = 32, 128  # Kimi-Linear-48B-A3B's linear_attn_config: num_heads 32, head_dim 128


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", help="CMake build directory holding python/cgdr (default: an installed cgdr)")
    p.add_argument("--t", type=int, nargs="+", default=[2048, 8192], help="tokens of the one sequence (multiples of 64)")
    p.add_argument("--threads", type=int, default=0, help="every implementation's threads (0: all CPUs)")
    p.add_argument("--reps", type=int, default=5, help="timed reps of cgdr's calls")
    p.add_argument("--slow-reps", type=int, default=1, help="timed reps of fla's (seconds each)")
    p.add_argument("--error-heads", type=int, default=2, help="value heads sampled for the FP64 error")
    p.add_argument("--lower-bound", type=float, default=None, help="fla's bounded gate (e.g. -5)")
    p.add_argument("--with-fla-recurrent", action="store_true", help="also time fla's naive_recurrent_kda")
    p.add_argument("--precision", default="auto", help="cgdr's precision mode for chunk_kda (docs/SPEC.md 6c, 10.4)")
    p.add_argument("--engine", default="auto", help="cgdr's engine for chunk_kda: auto, vector, amx, amx-emu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args()
    if any(t % 64 for t in a.t):
        p.error("--t: fla's naive_chunk_kda asserts T % 64 == 0")
    return a


def make_inputs(torch, fla, T, lower_bound, seed):
    gen = torch.Generator().manual_seed(seed)
    l2 = lambda x: x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)  # noqa: E731
    q = l2(torch.randn(1, T, H, D, generator=gen)).to(torch.bfloat16)
    k = l2(torch.randn(1, T, H, D, generator=gen)).to(torch.bfloat16)
    v = torch.randn(1, T, H, D, generator=gen).to(torch.bfloat16)
    beta = torch.sigmoid(torch.randn(1, T, H, generator=gen)).to(torch.bfloat16)
    a = torch.randn(1, T, H, D, generator=gen)
    A_log = torch.rand(H, generator=gen) * 1.5 - 1.0
    dt_bias = torch.rand(H * D, generator=gen) - 1.0
    if lower_bound is None:
        g = fla.naive_kda_gate(a, A_log, dt_bias=dt_bias)
    else:
        g = fla.naive_kda_lowerbound_gate(a, A_log, dt_bias=dt_bias, lower_bound=lower_bound)
    g = g.float().reshape(1, T, H, D).contiguous()
    s0 = (torch.rand(1, H, D, D, generator=gen) - 0.5) * 0.1
    return q, k, v, g, beta, s0


def time_in_turn(torch, calls, reps, slow):
    """Median seconds of each call, the calls run in turn rep by rep; those
    named in `slow` only in the first `slow[name]` reps."""
    for fn in calls.values():
        fn()  # warm-up
    times = {name: [] for name in calls}
    for rep in range(reps):
        for name, fn in calls.items():
            if rep >= slow.get(name, reps):
                continue
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def fp64_errors(torch, R, inputs, heads, results):
    q, k, v, g, beta, s0 = inputs
    ro, rs = R.recurrent_gated_delta_rule(q[:, :, heads], k[:, :, heads], v[:, :, heads], g[:, :, heads],
                                          beta[:, :, heads], s0[:, heads], True, dtype=torch.float64)

    def err(x, r):
        return float((x.to(torch.float64) - r).norm() / r.norm())

    return {name: (err(o[:, :, heads], ro), err(s[:, heads], rs)) for name, (o, s) in results.items()}


def compare(torch, cgdr, R, fla, a, T, threads, peak):
    inputs = make_inputs(torch, fla, T, a.lower_bound, a.seed)
    q, k, v, g, beta, s0 = inputs
    common = dict(initial_state=s0, output_final_state=True)
    results = {}

    def run(name, fn):
        def call():
            with torch.no_grad():
                results[name] = fn()
        return call

    calls = {
        "cgdr_chunk": run("cgdr_chunk", lambda: cgdr.chunk_kda(q, k, v, g, beta, **common, threads=threads,
                                                               precision=a.precision, engine=a.engine)),
        "cgdr_recurrent": run("cgdr_recurrent", lambda: cgdr.fused_recurrent_kda(
            q, k, v, g, beta, **common, threads=threads, algo="recurrent")),
        "fla_naive_chunk": run("fla_naive_chunk", lambda: fla.naive_chunk_kda(q, k, v, g, beta, **common)),
    }
    slow = {"fla_naive_chunk": a.slow_reps}
    if a.with_fla_recurrent:
        calls["fla_naive_recurrent"] = run("fla_naive_recurrent", lambda: fla.naive_recurrent_kda(
            q, k, v, g, beta, **common))
        slow["fla_naive_recurrent"] = a.slow_reps
    seconds = time_in_turn(torch, calls, max(a.reps, a.slow_reps), slow)
    errs = fp64_errors(torch, R, inputs, error_heads(H, a.error_heads), results)
    flops = 6.0 * D * D * T * H
    row = dict(name="compare_kda", B=1, T=T, H=H, Dk=D, Dv=D, dtype="bf16", g_dtype="f32", state_dtype="f32",
               lower_bound=a.lower_bound, precision=a.precision, engine=a.engine, threads=threads,
               fma_peak_gflops=peak, torch_version=torch.__version__,
               simd_target=cgdr.active_target(), cpu=cpu_name(), date=datetime.date.today().isoformat(), impls={})
    for name, s in seconds.items():
        gflops = flops / s / 1e9
        row["impls"][name] = dict(seconds=s, tokens_per_s=T / s, gflops=gflops, pct_fma_peak=100 * gflops / peak,
                                  rel_err_out=errs[name][0], rel_err_state=errs[name][1])
    base = seconds["cgdr_chunk"]
    row["speedup_vs_fla_naive_chunk"] = seconds["fla_naive_chunk"] / base
    row["speedup_vs_cgdr_recurrent"] = seconds["cgdr_recurrent"] / base
    if a.with_fla_recurrent:
        row["speedup_vs_fla_naive_recurrent"] = seconds["fla_naive_recurrent"] / base
    return row


def main():
    a = parse()
    threads = a.threads or os.cpu_count()
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before libgomp loads
    import_cgdr(a.build_dir)
    import torch
    import cgdr
    import cgdr._cgdr as native
    from cgdr import reference_torch as R
    from _fla import load_kda
    fla = load_kda()
    torch.set_num_threads(threads)
    peak = native.fma_peak(threads, 0.25)
    print(f"KDA: B=1 H={H} Dk=Dv={D} bf16 (g, state f32), lower_bound={a.lower_bound}, cgdr precision="
          f"{a.precision} engine={a.engine}, {threads} threads, "
          f"{cpu_name()}, cgdr SIMD {cgdr.active_target()}, torch {torch.__version__}")
    print(f"FP32 FMA peak measured now: {peak:.1f} GFLOP/s on {threads} threads")
    print(f"{'T':>6} {'impl':<20}{'seconds':>10}{'tokens/s':>11}{'GFLOP/s':>9}{'%peak':>7}{'err out':>10}"
          f"{'err state':>11}   (vs FP64)")
    rows = []
    for T in a.t:
        r = compare(torch, cgdr, R, fla, a, T, threads, peak)
        rows.append(r)
        for name, x in r["impls"].items():
            print(f"{T:>6} {name:<20}{x['seconds']:>10.4f}{x['tokens_per_s']:>11.0f}{x['gflops']:>9.1f}"
                  f"{x['pct_fma_peak']:>7.1f}{x['rel_err_out']:>10.2e}{x['rel_err_state']:>11.2e}")
        extra = f", {r['speedup_vs_fla_naive_recurrent']:.0f}x fla's naive_recurrent_kda" if a.with_fla_recurrent else ""
        print(f"{T:>6} cgdr chunk_kda: {r['speedup_vs_fla_naive_chunk']:.0f}x fla's naive_chunk_kda, "
              f"{r['speedup_vs_cgdr_recurrent']:.2f}x cgdr's recurrent form{extra}")
    peak_after = native.fma_peak(threads, 0.25)
    print(f"FP32 FMA peak measured again: {peak_after:.1f} GFLOP/s")
    for r in rows:
        r["fma_peak_gflops_after"] = peak_after
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
