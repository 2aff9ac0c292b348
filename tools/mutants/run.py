#!/usr/bin/env python3
"""Mutation testing of cgdr (issue 24): plants each single-point mutation of
tools/mutants/mutants.py alone, rebuilds incrementally, runs the test suite,
restores the file, and reports how many mutations the suite caught.

    make mutants                            # all, in build-mutants/
    tools/mutants/run.py --only api-,cli-   # ids starting with these
    tools/mutants/run.py --quick            # the conformance suite only (minutes, not hours)
    tools/mutants/run.py --check            # every snippet still found exactly once

A mutation is caught (killed) when any test of the suite fails with it in
place. Each mutation names the tests most likely to catch it; they run first
(ctest -R), and only if they pass does the whole suite run, so a survivor
has passed every test. The suite is ctest over the build directory, minus
--exclude (default: none). A mutation that does not compile is reported as
such and left out of the score (the list must not hold any).

--quick judges each mutation by the conformance suite of issue 24 alone:
it builds only the library, the CLI, the Python module and the conformance,
boundary and peak tests, and runs those tests and the cli_* scripts (for a
mutation under python/, python/tests/test_conformance.py). A survivor of
--quick may still be caught by the whole suite; a kill is a kill.

Builds use their own directory (default build-mutants: AVX3 and scalar
targets only, no benchmarks), one compile job at a time, under `nice`, so a
run can share a machine. A file is restored after its run, also on errors
and Ctrl-C; a run that was killed harder leaves tools/mutants/.planted,
which the next run (or --restore) puts back first.

Not part of `make test` or .ci/run (a full run takes hours on 2 cores).
"""
import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import MUTANTS  # noqa: E402

PLANTED = Path(__file__).resolve().parent / ".planted"  # {"file": ..., "original": full text} while one is planted


def check_list():
    """Every mutation applies: its snippet occurs exactly once, the replacement differs, ids are unique."""
    problems, ids = [], set()
    for m in MUTANTS:
        if m.id in ids:
            problems.append(f"{m.id}: duplicate id")
        ids.add(m.id)
        path = ROOT / m.file
        if not path.is_file():
            problems.append(f"{m.id}: no file {m.file}")
            continue
        n = path.read_text().count(m.original)
        if n != 1:
            problems.append(f"{m.id}: the snippet occurs {n} times in {m.file} (expected once): {m.original!r}")
        if m.original == m.replacement:
            problems.append(f"{m.id}: the replacement is the original")
    folders = {str(Path(m.file).parent) for m in MUTANTS}
    return problems, folders


def restore_planted():
    if PLANTED.exists():
        saved = json.loads(PLANTED.read_text())
        (ROOT / saved["file"]).write_text(saved["original"])
        PLANTED.unlink()
        print(f"restored {saved['file']} from an interrupted run", flush=True)


class Planted:
    """The mutation in place for the duration of a `with` block."""

    def __init__(self, m):
        self.m, self.path = m, ROOT / m.file

    def __enter__(self):
        self.original = self.path.read_text()
        PLANTED.write_text(json.dumps({"file": self.m.file, "original": self.original}))
        self.path.write_text(self.original.replace(self.m.original, self.m.replacement, 1))
        return self

    def __exit__(self, *exc):
        self.path.write_text(self.original)
        PLANTED.unlink()


def sh(cmd, log, timeout=None, cwd=ROOT):
    """Runs cmd niced, appending its output to log; returns (exit status, seconds)."""
    t0 = time.time()
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(map(str, cmd))}\n")
        f.flush()
        try:
            rc = subprocess.run(["nice", "-n", "10", *map(str, cmd)], cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            f.write(f"timed out after {timeout} s\n")
            rc = 124
    return rc, time.time() - t0


def configure(build, log):
    if (build / "CMakeCache.txt").exists():
        return 0
    return sh(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DCGDR_HWY_TARGETS=(HWY_AVX3|HWY_SCALAR)",
               "-DCGDR_BENCH=OFF", "-DPython3_EXECUTABLE=/usr/bin/python3"], log)[0]


# --quick: what it builds, and the tests it runs (ctest -R; pytest for python/).
QUICK_TARGETS = ["cgdr_cli", "_cgdr", "conformance_test", "boundaries_test", "peak_test"]
QUICK_TESTS = "Conformance|Boundaries|Peak|^cli_"
QUICK_PYTEST = "python/tests/test_conformance.py"


def build_tree(build, log, jobs, targets=()):
    cmd = ["cmake", "--build", build, "-j", str(jobs)]
    for t in targets:
        cmd += ["--target", t]
    return sh(cmd, log)[0]


def run_pytest(build, log, path, timeout):
    """pytest on one file against the build's Python module: (passed, failures)."""
    start = Path(log).stat().st_size if Path(log).exists() else 0
    env = ["env", f"PYTHONPATH={build / 'python'}", "PYTHONDONTWRITEBYTECODE=1"]
    rc, _ = sh([*env, "/usr/bin/python3", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", ROOT / path], log,
               timeout=timeout)
    failed = re.findall(r"^FAILED (\S+)", Path(log).read_text()[start:], re.M)
    return rc == 0, [f.split("::")[-1] for f in failed]


def failed_tests(log_start, log):
    """Names of the tests ctest's summary lists as failed in the log since `log_start`."""
    text = Path(log).read_text()[log_start:]
    return sorted(set(re.findall(r"^\s*\d+ - (\S+)(?: .*)? \([^()]+\)$", text, re.M)))


def run_tests(build, log, regex, exclude, test_jobs, timeout):
    """ctest: True if every selected test passed; and the names of failures."""
    cmd = ["ctest", "--test-dir", build, "-j", str(test_jobs), "--timeout", str(timeout), "--stop-on-failure",
           "--output-on-failure"]
    if regex:
        cmd += ["-R", regex]
    if exclude:
        cmd += ["-E", exclude]
    start = Path(log).stat().st_size if Path(log).exists() else 0
    rc, secs = sh(cmd, log)
    return rc == 0, failed_tests(start, log), secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=str(ROOT / "build-mutants"))
    ap.add_argument("--only", default="", help="comma-separated id prefixes")
    ap.add_argument("--exclude", default="", help="ctest -E regex of tests left out of the suite")
    ap.add_argument("--jobs", type=int, default=1, help="compile jobs")
    ap.add_argument("--test-jobs", type=int, default=1, help="ctest -j")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per test")
    ap.add_argument("--quick", action="store_true", help="judge by the conformance suite alone (see above)")
    ap.add_argument("--check", action="store_true", help="only check that every mutation applies")
    ap.add_argument("--list", action="store_true", help="list the mutations")
    ap.add_argument("--restore", action="store_true", help="put back a file an interrupted run left mutated")
    args = ap.parse_args()

    problems, folders = check_list()
    if args.list:
        for m in MUTANTS:
            print(f"{m.id:32} {m.file}: {m.original!r} -> {m.replacement!r}")
        print(f"{len(MUTANTS)} mutations in {len(folders)} folders: {', '.join(sorted(folders))}")
    if problems or args.check:
        for p in problems:
            print(f"mutants: {p}", file=sys.stderr)
        if not problems:
            print(f"mutants: {len(MUTANTS)} mutations apply, in {len(folders)} folders")
        return 1 if problems else 0
    if args.list:
        return 0
    restore_planted()
    if args.restore:
        return 0

    build = Path(args.build_dir).resolve()
    build.mkdir(parents=True, exist_ok=True)
    log = build / "mutants.log"
    report_path = build / "mutants-report.json"
    prefixes = [p for p in args.only.split(",") if p]
    chosen = [m for m in MUTANTS if not prefixes or any(m.id.startswith(p) for p in prefixes)]
    print(f"mutants: {len(chosen)} mutations; build {build}; log {log}", flush=True)

    targets = QUICK_TARGETS if args.quick else ()

    def suite(file, first=""):
        """(passed, failures) of the suite that judges a mutation of `file`;
        `first`: the tests to try before the whole suite."""
        if not args.quick:
            if first:
                ok, by, _ = run_tests(build, log, first, args.exclude, args.test_jobs, args.timeout)
                if not ok:
                    return ok, by
            return run_tests(build, log, None, args.exclude, args.test_jobs, args.timeout)[:2]
        if file.startswith("python/"):
            return run_pytest(build, log, QUICK_PYTEST, args.timeout)
        return run_tests(build, log, QUICK_TESTS, args.exclude, args.test_jobs, args.timeout)[:2]

    if configure(build, log) != 0 or build_tree(build, log, args.jobs, targets) != 0:
        print("mutants: the unmutated tree does not build (see the log)", file=sys.stderr)
        return 2
    t0 = time.time()
    for file in ["src/"] + (["python/"] if args.quick else []):  # the unmutated tree, by each suite used
        ok, failed = suite(file)
        if not ok:
            print(f"mutants: the unmutated suite fails ({', '.join(failed)}); fix that first", file=sys.stderr)
            return 2
    print(f"mutants: the unmutated suite passes ({time.time() - t0:.0f} s)", flush=True)

    results = []
    for i, m in enumerate(chosen, 1):
        t0 = time.time()
        with Planted(m):
            if build_tree(build, log, args.jobs, targets) != 0:
                status, by = "does not compile", []
            else:
                ok, by = suite(m.file, m.tests)
                status = "survived" if ok else "killed"
        results.append({"id": m.id, "file": m.file, "status": status, "by": by, "seconds": round(time.time() - t0),
                        "why": m.why})
        print(f"[{i}/{len(chosen)}] {m.id:32} {status:16} {', '.join(by)[:70]} ({time.time() - t0:.0f} s)", flush=True)
        report_path.write_text(json.dumps(results, indent=1))
    build_tree(build, log, args.jobs, targets)  # the object files of the restored sources

    killed = sum(r["status"] == "killed" for r in results)
    survived = [r for r in results if r["status"] == "survived"]
    broken = [r for r in results if r["status"] == "does not compile"]
    scored = killed + len(survived)
    suite_name = "the conformance suite (--quick)" if args.quick else "the whole suite"
    print(f"\nmutation score by {suite_name}: {killed}/{scored} killed ({100.0 * killed / max(scored, 1):.1f}%); "
          f"{len(broken)} did not compile; report {report_path}")
    for r in survived:
        print(f"  survived: {r['id']} ({r['file']}): {r['why'] or 'no reason recorded'}")
    for r in broken:
        print(f"  does not compile: {r['id']} ({r['file']})")
    return 0 if not broken else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        restore_planted()
        sys.exit(130)
