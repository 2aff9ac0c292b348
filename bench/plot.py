#!/usr/bin/env python3
"""Figures of `cgdr bench --json` output.

    python bench/plot.py BENCH.json [MORE.json ...] -o FIGURE.png
    python bench/plot.py --run build/cgdr --t 512 1024 2048 4096 8192 [--threads N] [--save-json ALL.json] -o FIGURE.png
    python bench/plot.py --peers PEERS.json -o FIGURE.png

Left: every row of the JSON files (else of --run) as a percentage of the machine's peaks measured in the same
run (the FP32 FMA peak, `pct_peak` for the median rep and `pct_peak_best` for
the fastest; any other `*_peak_gflops` key a newer bench writes, e.g. an AMX
peak, adds its own bars). Right: time against T of the flagship shape for each
formulation (rows that differ only in T, one line per algo), drawn when the
inputs hold at least two T; `--run` makes such inputs by calling
`cgdr bench --shape qwen3-next --algo all --t T` for each T.

--peers draws instead the output of bench/compare_peers.py (its --json):
tokens/s of each implementation with its time against cgdr's, and the
errors of `out` and of the state against FP64.

Keys the script does not know are ignored, so newer bench output still plots.
Needs matplotlib (in the venv `make test-clients` makes).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

from compare_torch import cpu_name  # the script's folder is on sys.path


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", nargs="*", help="files written by `cgdr bench --json`")
    p.add_argument("--run", metavar="CGDR", help="run this cgdr binary's bench for each --t first")
    p.add_argument("--t", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    p.add_argument("--threads", type=int, help="passed to cgdr bench")
    p.add_argument("--reps", type=int, help="passed to cgdr bench")
    p.add_argument("--save-json", help="with --run: write all the rows here")
    p.add_argument("-o", "--output", required=True, help="PNG to write")
    p.add_argument("--title", help="first line of the title (default: the CPU's name)")
    p.add_argument("--peers", metavar="PEERS.json", help="draw bench/compare_peers.py's output instead")
    a = p.parse_args()
    if not a.json and not a.run and not a.peers:
        p.error("give bench JSON files, --run CGDR or --peers PEERS.json")
    return a


def run_bench(cgdr, Ts, threads, reps):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for T in Ts:
            path = os.path.join(tmp, f"bench-{T}.json")
            cmd = [cgdr, "bench", "--shape", "qwen3-next", "--algo", "all", "--t", str(T), "--json", path]
            cmd += ["--threads", str(threads)] if threads else []
            cmd += ["--reps", str(reps)] if reps else []
            print(" ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
            rows += load(path)
    return rows


def load(path):
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict):  # tolerate one row, or rows under a key
        data = data.get("rows", [data])
    return [r for r in data if isinstance(r, dict) and "seconds" in r]


def other_peaks(rows):
    """Peak keys besides the FMA one (`peak_gflops`): e.g. amx_peak_gflops."""
    keys = set()
    for r in rows:
        keys |= {k for k, v in r.items() if k.endswith("peak_gflops") and k != "peak_gflops"
                 and isinstance(v, (int, float)) and v > 0}
    return sorted(keys)


def label(r):
    algo = r.get("algo", "?")
    forced = r.get("algo_requested", "auto") not in ("auto", None)
    prec = r.get("precision", "fp32")
    return f"{r.get('name', '?')} T={r.get('T', '?')} {algo}{'!' if forced else ''}" + \
        ("" if prec in ("fp32", None) else f" {prec}")


def draw_peaks(ax, rows):
    import numpy as np
    extra = other_peaks(rows)
    y = np.arange(len(rows))
    h = 0.8 / (1 + len(extra))
    ax.barh(y, [r.get("pct_peak", 0) for r in rows], height=h, color="tab:blue", label="% of FP32 FMA peak (median)")
    ax.plot([r.get("pct_peak_best", np.nan) for r in rows], y, "k|", markersize=9, label="fastest rep")
    for i, key in enumerate(extra, 1):
        pct = [100.0 * r["gflops"] / r[key] if r.get(key) else 0 for r in rows]
        ax.barh(y + i * h, pct, height=h, label=f"% of {key.replace('_gflops', '').replace('_', ' ')}")
    ax.axvline(100, color="gray", lw=0.8, ls="--")
    ax.set_yticks(y + h * len(extra) / 2)
    ax.set_yticklabels([label(r) for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("algorithmic GFLOP/s as % of the peak measured in the run")
    ax.set_title("rows against the machine's peak", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)


def time_series(rows):
    """{formulation: [(T, seconds)]} over rows of one shape that differ in T."""
    shape = lambda r: (r.get("name"), r.get("B"), r.get("Nk"), r.get("Nv"), r.get("Dk"), r.get("Dv"),
                       r.get("threads"), r.get("precision", "fp32"))
    by_shape = {}
    for r in rows:
        by_shape.setdefault(shape(r), []).append(r)
    best = max(by_shape.values(), key=lambda rs: len({r.get("T") for r in rs}))
    series = {}
    for r in best:
        series.setdefault(r.get("algo_requested", "auto"), []).append((r["T"], r["seconds"]))
    return best[0], {k: sorted(v) for k, v in series.items()}


def draw_times(ax, ref, series):
    for name, pts in sorted(series.items()):
        ax.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], "o-" if name == "auto" else ".--",
                lw=2 if name == "auto" else 1, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens T")
    ax.set_ylabel("time (ms, median)")
    ax.set_title(f"{ref.get('name')}: Nk={ref.get('Nk')} Nv={ref.get('Nv')} Dk={ref.get('Dk')} Dv={ref.get('Dv')}, "
                 f"{ref.get('threads')} threads, per formulation", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)


def plot(peak_rows, time_rows, path, title):
    """peak_rows: the left panel's bars; time_rows: the right panel's lines (if they span two T or more)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ref, series = time_series(time_rows)
    with_times = max(len(pts) for pts in series.values()) > 1
    fig, axes = plt.subplots(1, 2 if with_times else 1, figsize=(13 if with_times else 7,
                                                                   2.5 + 0.2 * len(peak_rows)), dpi=90, squeeze=False)
    draw_peaks(axes[0][0], peak_rows)
    if with_times:
        draw_times(axes[0][1], ref, series)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


def plot_peers(result, path):
    """compare_peers' result (its JSON): left, tokens/s per implementation
    (log scale) labelled with its time against cgdr's; right, the normwise
    errors of out and of the final state against FP64 (log scale)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    rows = sorted(result["rows"], key=lambda r: -r["tokens_per_s"])
    y = np.arange(len(rows))
    colors = ["tab:green" if r["key"].startswith("cgdr") else "tab:gray" for r in rows]
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(11, 2.0 + 0.45 * len(rows)), dpi=100,
                                     gridspec_kw=dict(width_ratios=[3, 2]))
    ax_t.barh(y, [r["tokens_per_s"] for r in rows], color=colors)
    for i, r in enumerate(rows):
        ratio = "the baseline" if r["key"] == "cgdr" else f"{r['ratio']:.{2 if r['ratio'] < 10 else 1}f}x cgdr's time"
        ax_t.annotate(f" {r['tokens_per_s']:,.0f}/s, {ratio}", (r["tokens_per_s"], i), va="center", fontsize=8)
    ax_t.set_xscale("log")
    lo, hi = min(r["tokens_per_s"] for r in rows), max(r["tokens_per_s"] for r in rows)
    ax_t.set_xlim(lo / 3, hi * 12)
    ax_t.set_yticks(y)
    ax_t.set_yticklabels([r["label"] for r in rows], fontsize=8)
    ax_t.invert_yaxis()
    ax_t.set_xlabel("tokens/s (median; higher is faster)")
    ax_t.grid(True, axis="x", which="both", alpha=0.3)
    h = 0.38
    ax_e.barh(y - h / 2, [r["err_out"] for r in rows], height=h, color="tab:blue", label="out")
    ax_e.barh(y + h / 2, [r["err_state"] for r in rows], height=h, color="tab:orange", label="final state")
    floor = result.get("floor")
    if floor:  # the FP64 answer rounded to the outputs' dtypes: no implementation can do better
        ax_e.axvline(floor["out"], color="tab:blue", ls="--", lw=0.8, label="out: FP64 rounded to bf16")
        ax_e.axvline(floor["state"], color="tab:orange", ls="--", lw=0.8, label="state: FP64 rounded to FP32")
    ax_e.set_xscale("log")
    ax_e.set_yticks(y)
    ax_e.set_yticklabels([])
    ax_e.invert_yaxis()
    ax_e.set_xlabel("normwise relative error vs FP64 (lower is better)")
    ax_e.grid(True, axis="x", which="both", alpha=0.3)
    ax_e.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2)
    load = result["load_before"][0]  # before the run: the load after counts the run's own threads
    fig.suptitle(f"gated delta rule, T={result['T']}, Nk={result['Nk']} Nv={result['Nv']} Dk={result['Dk']} "
                 f"Dv={result['Dv']} {result['dtype']}, {result['threads']} threads, {result['date']}\n"
                 f"{result['cpu']}; load average before the run {load:.2f}"
                 f"{' (other processes ran: provisional)' if load > 0.5 else ''}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


def main():
    a = parse()
    if a.peers:
        with open(a.peers) as f:
            plot_peers(json.load(f), a.output)
        return
    run_rows, file_rows = [], []
    if a.run:
        run_rows = run_bench(a.run, a.t, a.threads, a.reps)
        if a.save_json:
            with open(a.save_json, "w") as f:
                json.dump(run_rows, f, indent=1)
                f.write("\n")
    for path in a.json:
        file_rows += load(path)
    rows = run_rows + file_rows
    if not rows:
        sys.exit("plot: no bench rows in the input")
    first = rows[0]
    when = datetime.date.today().isoformat() if a.run else datetime.date.fromtimestamp(
        os.path.getmtime(a.json[0])).isoformat()
    title = f"{a.title or first.get('cpu') or cpu_name()}, cgdr bench, target {first.get('target', '?')}, {when}"
    # The bars show the files' rows (a whole bench) when there are any, the
    # lines every row that varies T (--run's, or files of several T).
    plot(file_rows or run_rows, rows, a.output, title)


if __name__ == "__main__":
    main()
