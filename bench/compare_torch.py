#!/usr/bin/python3
"""cgdr against a pure-torch chunked implementation, in one run.

The peer is cgdr.reference_torch.chunked_gated_delta_rule: SPEC section 4
written in plain torch the way transformers' Qwen3-Next CPU fallback computes
(FP32, chunks of 64, the (I + L)^-1 by row-by-row forward substitution, a
sequential pass over chunks). Both get the same inputs in transformers'
layout ([B, T, H, K], q/k l2-normalised in the kernel, grouped heads) and the
same number of threads; the report gives both median times, the speedup, and
each one's normwise relative error against an FP64 token-by-token reference
on a sample of value heads.

    /usr/bin/python3 bench/compare_torch.py [--build-dir build] [--t 4096 ...]
        [--b 1] [--h 16] [--hv 32] [--dk 128] [--dv 128] [--dtype f32|bf16|f16]
        [--threads N] [--repeats 3] [--error-heads 2] [--json FILE] [--plot FILE.png]

Several --t give one row each; --plot draws their times against T (needs
matplotlib, e.g. in the venv `make test-clients` makes).
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time


def import_cgdr(build_dir):
    """cgdr from --build-dir, else an installed one, else a build tree beside this script."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [build_dir] if build_dir else [None] + [os.path.join(here, "..", d) for d in ("build", "build-py")]
    for cand in candidates:
        if cand is not None:
            sys.path.insert(0, os.path.join(os.path.abspath(cand), "python"))
        try:
            import cgdr  # noqa: F401
            import cgdr.reference_torch  # noqa: F401
            import cgdr.torch  # noqa: F401
            return
        except ImportError:
            if cand is not None:
                sys.path.pop(0)
    sys.exit("compare_torch: cannot import cgdr; build it and pass --build-dir BUILD (the CMake build directory)")


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", help="CMake build directory holding python/cgdr")
    p.add_argument("--b", type=int, default=1)
    p.add_argument("--t", type=int, nargs="+", default=[4096])
    p.add_argument("--h", type=int, default=16, help="q/k heads")
    p.add_argument("--hv", type=int, default=32, help="value heads (a multiple of --h)")
    p.add_argument("--dk", type=int, default=128)
    p.add_argument("--dv", type=int, default=128)
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    p.add_argument("--threads", type=int, default=0, help="0: all cores (both implementations)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--error-heads", type=int, default=2, help="value heads sampled for the FP64 error")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the result rows here")
    p.add_argument("--plot", help="draw the times against T here (PNG)")
    a = p.parse_args()
    if a.hv % a.h:
        p.error("--hv must be a multiple of --h")
    return a


def make_inputs(torch, a, T):
    """Qwen3-Next-like inputs: raw q/k (l2norm in the kernel), sigmoid beta,
    negative softplus decay, a random initial state."""
    gen = torch.Generator().manual_seed(a.seed)
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    q = torch.randn(a.b, T, a.h, a.dk, generator=gen).to(dt)
    k = torch.randn(a.b, T, a.h, a.dk, generator=gen).to(dt)
    v = torch.randn(a.b, T, a.hv, a.dv, generator=gen).to(dt)
    beta = torch.sigmoid(torch.randn(a.b, T, a.hv, generator=gen)).to(dt)
    g = -torch.nn.functional.softplus(torch.randn(a.b, T, a.hv, generator=gen) - 3.0)
    s0 = (torch.rand(a.b, a.hv, a.dk, a.dv, generator=gen) - 0.5) * 0.1
    return q, k, v, g, beta, s0


def median_time(fn, repeats):
    fn()  # warm-up: thread pools, dispatch, page faults
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cpu_name():
    """The CPU for a figure's caption, as `cgdr bench` names it: cgdr's
    cpu_description() (brand string, AMD's core generation, family and model:
    a VM's brand string can be "AMD EPYC" on Zen 3, 4 and 5 alike). Without
    cgdr (bench/plot.py in a bare Python), /proc/cpuinfo's model name with its
    family and model."""
    try:
        import cgdr
        return cgdr.cpu_description()
    except (ImportError, AttributeError):
        pass
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = info.get("model name", "unknown CPU")
    return f"{name} (family {info['cpu family']} model {info['model']})" if "cpu family" in info else name


def error_heads(hv, n):
    """n value heads spread over 0 .. hv - 1 (first, last, ...): where the FP64 judge runs."""
    return sorted({round(i * (hv - 1) / max(1, n - 1)) for i in range(n)})


def fp64_errors(torch, ref, inputs, heads, results, floor=None):
    """Normwise relative errors against the FP64 token-by-token recurrence
    (q/k l2-normalised in the kernel) on the value heads `heads`.
    inputs: (q, k, v, g, beta, s0) in transformers' layout, grouped heads;
    results: {name: (out [B, T, HV, V], final state [B, HV, K, V])}.
    Returns {name: (error of out, error of the final state)}; with floor a
    name, also floor: the FP64 answer itself rounded to q's dtype (out) and
    to FP32 (the state), the least error an implementation can show."""
    q, k, v, g, beta, s0 = inputs
    group = v.shape[2] // q.shape[2]
    kh = [h // group for h in heads]
    ro, rs = ref.recurrent_gated_delta_rule(q[:, :, kh], k[:, :, kh], v[:, :, heads], g[:, :, heads],
                                            beta[:, :, heads], s0[:, heads], True, use_qk_l2norm_in_kernel=True,
                                            dtype=torch.float64)

    def err(x, r):
        x = x.to(torch.float64)
        return float((x - r).norm() / r.norm())

    errs = {name: (err(o[:, :, heads], ro), err(s[:, heads], rs)) for name, (o, s) in results.items()}
    if floor is not None:
        errs[floor] = (err(ro.to(q.dtype), ro), err(rs.to(torch.float32), rs))
    return errs


def compare(torch, cgdr, ref, a, T, threads):
    """One row: both implementations on the same inputs of T tokens."""
    from cgdr.torch import torch_chunk_gated_delta_rule
    q, k, v, g, beta, s0 = make_inputs(torch, a, T)
    common = dict(initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    results = {}

    def run_cgdr():
        results["cgdr"] = torch_chunk_gated_delta_rule(q, k, v, g, beta, 64, **common)

    def run_torch():
        with torch.no_grad():
            results["torch"] = ref.chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, **common)

    t_cgdr = median_time(run_cgdr, a.repeats)
    t_torch = median_time(run_torch, a.repeats)
    heads = error_heads(a.hv, a.error_heads)
    errs = fp64_errors(torch, ref, (q, k, v, g, beta, s0), heads, results)
    return dict(name="compare_torch", B=a.b, T=T, Nk=a.h, Nv=a.hv, Dk=a.dk, Dv=a.dv, dtype=a.dtype, threads=threads,
                torch_version=torch.__version__, simd_target=cgdr.active_target(), cpu=cpu_name(),
                date=datetime.date.today().isoformat(),
                cgdr_seconds=t_cgdr, torch_seconds=t_torch, speedup=t_torch / t_cgdr,
                cgdr_tokens_per_s=a.b * T / t_cgdr, torch_tokens_per_s=a.b * T / t_torch,
                cgdr_rel_err_out=errs["cgdr"][0], cgdr_rel_err_state=errs["cgdr"][1],
                torch_rel_err_out=errs["torch"][0], torch_rel_err_state=errs["torch"][1], error_heads=heads)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    r0 = rows[0]
    Ts = [r["T"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    ax.plot(Ts, [r["torch_seconds"] * 1e3 for r in rows], "o-", label="pure torch, chunked (transformers' way)")
    ax.plot(Ts, [r["cgdr_seconds"] * 1e3 for r in rows], "s-", label="cgdr")
    for r in rows:
        ax.annotate(f"{r['speedup']:.0f}x", (r["T"], r["cgdr_seconds"] * 1e3), textcoords="offset points",
                    xytext=(4, -12), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens T per sequence")
    ax.set_ylabel("time (ms, median)")
    ax.set_title(f"gated delta rule B={r0['B']} Nk={r0['Nk']} Nv={r0['Nv']} Dk={r0['Dk']} Dv={r0['Dv']} "
                 f"{r0['dtype']}, {r0['threads']} threads\n{r0['cpu']}, torch {r0['torch_version']}, {r0['date']}",
                 fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


def main():
    a = parse()
    threads = a.threads or os.cpu_count()
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before libgomp loads: cgdr's "all threads" is this many
    import_cgdr(a.build_dir)
    import torch
    import cgdr
    import cgdr.reference_torch as ref

    torch.set_num_threads(threads)
    print(f"shape B={a.b} Nk={a.h} Nv={a.hv} Dk={a.dk} Dv={a.dv} {a.dtype}, threads={threads}, "
          f"torch {torch.__version__}, cgdr SIMD {cgdr.active_target()}")
    print(f"{'T':>6} {'impl':<12}{'seconds':>10}{'tokens/s':>12}{'err out':>12}{'err state':>12}   (vs FP64)")
    rows = []
    for T in a.t:
        r = compare(torch, cgdr, ref, a, T, threads)
        rows.append(r)
        for impl, label in (("cgdr", "cgdr"), ("torch", "pure torch")):
            print(f"{T:>6} {label:<12}{r[impl + '_seconds']:>10.4f}{r[impl + '_tokens_per_s']:>12.0f}"
                  f"{r[impl + '_rel_err_out']:>12.2e}{r[impl + '_rel_err_state']:>12.2e}")
        print(f"{T:>6} speedup: {r['speedup']:.1f}x  (error heads {r['error_heads']})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
            f.write("\n")
    if a.plot:
        plot(rows, a.plot)


if __name__ == "__main__":
    main()
