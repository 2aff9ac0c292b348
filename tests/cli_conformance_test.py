"""Front-end conformance of the command line (issue 24): every flag of
`cgdr run` and `cgdr plan`, every metadata key and optional tensor of a case
file, every dtype, end to end against the FP64 reference.

The lists come from the tool itself: `cgdr flags run|plan` prints what each
command's parser accepts, and the case reader's messages name the metadata
keys and tensors it knows. A flag, key or tensor without a row here fails
test_every_flag_key_and_tensor_has_a_row.

Runs `cgdr` ($CGDR_CLI) on case files written here (safetensors, by hand),
reads the results back and judges them with the FP64 recurrence of
python/tests/_helpers.py. Bad input: exit 2, one line on stderr, and no
output file (SPEC 7), also when only one output is at fault (check_values).
"""
import itertools
import json
import os
import re
import struct
import subprocess

import numpy as np
import pytest
import torch

from _helpers import f64, gdr_fp64, limit, make, packed_inputs, rel_err, round_to

CLI = os.environ.get("CGDR_CLI")
pytestmark = pytest.mark.skipif(not CLI, reason="CGDR_CLI (the cgdr binary) not set")

NK, NV, DK, DV = 2, 4, 24, 16
LENS = [37, 0, 20]
_ST = {"f16": "F16", "bf16": "BF16", "f32": "F32", "i32": "I32"}
_CASES = itertools.count()


# ------------------------------------------------------------ case files

def raw(x, dtype):
    """float64 x as the bytes of dtype (bf16: round to nearest even, through torch)."""
    if dtype == "i32":
        return np.ascontiguousarray(x, np.int32).tobytes()
    t = make("torch", dtype, np.asarray(x, np.float64))
    return t.view(torch.int16 if dtype != "f32" else torch.int32).numpy().tobytes()


def write_safetensors(path, tensors, metadata):
    """tensors: name -> (dtype, shape, bytes)."""
    header, data = {}, b""
    for name, (dtype, shape, b) in tensors.items():
        header[name] = {"dtype": _ST[dtype], "shape": list(shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def read_safetensors(path):
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        lo, hi = h["data_offsets"]
        chunk = b[8 + n + lo:8 + n + hi]
        if h["dtype"] == "BF16":
            a = (np.frombuffer(chunk, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(chunk, {"F16": np.float16, "F32": np.float32}[h["dtype"]])
        out[name] = a.astype(np.float64).reshape(h["shape"])
    return out


def kda_fp64(q, k, v, beta, g, initial_state, seq_lens, scale=None, l2norm=False, layout="vk", eps=1e-6):
    """KDA (docs/SPEC.md 10) in FP64, written here on its own: g [T, Nv, Dk],
    one log-decay per key channel, S = (I - beta k k^T) Diag(exp(g_t)) S +
    beta k v^T. Returns (out [T, Nv, Dv], final_state [B, Nv, ...] in `layout`)."""
    q, k, v, beta, g = f64(q), f64(k), f64(v), f64(beta), f64(g)
    T, Nk, Dk = q.shape
    Nv, Dv = v.shape[1:]
    if l2norm:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + eps)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + eps)
    q, k = np.repeat(q, Nv // Nk, axis=1), np.repeat(k, Nv // Nk, axis=1)
    scale = 1.0 / np.sqrt(Dk) if scale is None else scale
    out, finals, t0 = np.zeros((T, Nv, Dv)), [], 0
    for b, n in enumerate(int(x) for x in seq_lens):
        S = np.zeros((Nv, Dk, Dv)) if initial_state is None else f64(initial_state)[b]
        S = S.copy() if layout == "kv" or initial_state is None else S.transpose(0, 2, 1).copy()
        for t in range(t0, t0 + n):
            S *= np.exp(g[t])[:, :, None]  # [Nv, Dk]: row i of the state (key channel i) decays by exp(g[t, h, i])
            u = beta[t][:, None] * (v[t] - np.einsum("hkv,hk->hv", S, k[t]))
            S += k[t][:, :, None] * u[:, None, :]
            out[t] = scale * np.einsum("hkv,hk->hv", S, q[t])
        finals.append(S if layout == "kv" else S.transpose(0, 2, 1))
        t0 += n
    return out, np.stack(finals)


def kda_gate(a, a_log, dt_bias, lower_bound):
    """The raw gate of a per-channel gate (docs/SPEC.md 6d.1, 10) in FP64: a [T, Nv, Dk], a_log [Nv] or None,
    dt_bias [Nv * Dk]."""
    x = a + dt_bias.reshape(1, NV, DK)
    if a_log is None and not lower_bound:
        return None  # no gate: cgdr refuses the case (A_log is required without a bound)
    if lower_bound:
        scaled = x if a_log is None else np.exp(a_log)[None, :, None] * x
        return lower_bound / (1.0 + np.exp(-scaled))
    return -np.exp(a_log)[None, :, None] * np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


class Case:
    """A synthetic case (SPEC 6 conditioning), its file, and its FP64 reference.
    kda: None, "g" (a per-channel g [T, Nv, Dk]) or "raw" (a [T, Nv, Dk],
    A_log [Nv] unless no_a_log, dt_bias [Nv * Dk], metadata gate_lower_bound
    when lower_bound is not None), KDA of docs/SPEC.md 10."""

    def __init__(self, tmp, dtype="f32", state_dtype="f32", g_dtype="f32", layout="vk", l2norm=False, scale=None,
                 g=True, state=True, plant=None, metadata=None, extra=None, drop=(), eps=None, kda=None,
                 lower_bound=None, no_a_log=False):
        x = packed_inputs(np.random.default_rng(5), sum(LENS), NK, NV, DK, DV, len(LENS), raw_qk=l2norm)
        self.kda = kda
        if kda is not None:
            rng = np.random.default_rng(7)
            T = sum(LENS)
            if kda == "g":
                x["g"] = rng.uniform(-0.3, 0.0, (T, NV, DK))
            else:
                a = round_to(rng.uniform(-3.0, 0.5, (T, NV, DK)), "f32")
                a_log = None if no_a_log else round_to(rng.uniform(-1.0, 0.5, NV), "f32")
                dt_bias = round_to(rng.uniform(-1.0, 0.0, NV * DK), "f32")
                self.gate = kda_gate(a, a_log, dt_bias, lower_bound)
                g = False
                raw_gate = {"a": ("f32", a.shape, raw(a, "f32")), "dt_bias": ("f32", dt_bias.shape, raw(dt_bias, "f32"))}
                if a_log is not None:
                    raw_gate["A_log"] = ("f32", a_log.shape, raw(a_log, "f32"))
                extra = {**raw_gate, **(extra or {})}
            if lower_bound is not None:
                metadata = {"gate_lower_bound": repr(lower_bound), **(metadata or {})}
        if plant == "nan_value":
            x["v"][1, 1, 3] = np.nan
        elif plant == "huge_query":  # out overflows, the state never reads q
            x["q"][3, 0, :] = 3e38
        elif plant == "huge_last_value":  # an f16 final_state overflows, out (f32) does not
            x["v"][LENS[0] - 1, 1, :] = 1e8
            state_dtype = "f16"
        s = x["state"] if layout == "kv" else x["state"].transpose(0, 1, 3, 2)
        self.t = {n: make("numpy" if dtype != "bf16" else "torch", dtype, x[n]) for n in ("q", "k", "v", "beta")}
        self.t["g"] = make("torch", g_dtype, x["g"]) if g else None
        self.t["state"] = make("torch", state_dtype, s) if state else None
        self.layout, self.l2norm, self.scale, self.dtype, self.eps = layout, l2norm, scale, dtype, eps
        self.state_dtype = state_dtype if state else dtype
        tensors = {"query": (dtype, x["q"].shape, raw(x["q"], dtype)), "key": (dtype, x["k"].shape, raw(x["k"], dtype)),
                   "value": (dtype, x["v"].shape, raw(x["v"], dtype)), "beta": (dtype, x["beta"].shape, raw(x["beta"], dtype)),
                   "seq_lens": ("i32", (len(LENS),), raw(LENS, "i32"))}
        if g:
            tensors["g"] = (g_dtype, x["g"].shape, raw(x["g"], g_dtype))
        if state:
            tensors["initial_state"] = (state_dtype, s.shape, raw(s, state_dtype))
        tensors.update(extra or {})
        for name in drop:
            tensors.pop(name)
        md = {"state_layout": layout, "use_qk_l2norm": "true" if l2norm else "false"}
        if scale is not None:
            md["scale"] = repr(scale)
        if eps is not None:
            md["qk_l2norm_eps"] = repr(eps)
        md.update(metadata or {})
        self.path = tmp / f"case{next(_CASES)}.safetensors"
        write_safetensors(self.path, tensors, {k: v for k, v in md.items() if v is not None})

    def reference(self):
        if self.kda is not None:
            g = self.t["g"] if self.kda == "g" else self.gate
            return kda_fp64(self.t["q"], self.t["k"], self.t["v"], self.t["beta"], g, self.t["state"], LENS,
                            scale=self.scale, l2norm=self.l2norm, layout=self.layout,
                            eps=1e-6 if self.eps is None else self.eps)
        return gdr_fp64(self.t["q"], self.t["k"], self.t["v"], self.t["beta"], self.t["g"], self.t["state"], LENS,
                        scale=self.scale, l2norm=self.l2norm, layout=self.layout,
                        eps=1e-6 if self.eps is None else self.eps)


def cgdr(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300)


def run_ok(case, out, *flags):
    p = cgdr("run", "--input", case.path, "--output", out, *flags)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return p


def run_fails(case, out, want, *flags):
    """Exit 2, one line `cgdr: error: ...` naming the problem, no output file."""
    p = cgdr("run", "--input", case.path, "--output", out, *flags)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("cgdr: error: "), p.stderr
    assert re.search(want, p.stderr), p.stderr
    assert not out.exists(), "an output file was written"
    assert not [f for f in out.parent.iterdir() if ".tmp-" in f.name], "a temporary file was left"


def tolerance(precision, ref, dtype):
    lim = limit(ref, dtype)
    if precision == "bf16":
        return max(1.5e-2, 2 * lim)
    return 2 * lim if precision in ("bf16x3", "bf16x4") else lim


def check_result(case, out, precision="auto"):
    r = read_safetensors(out)
    ref_out, ref_state = case.reference()
    assert rel_err(r["out"], ref_out) <= tolerance(precision, ref_out, case.dtype), "out"
    assert rel_err(r["final_state"], ref_state) <= tolerance(precision, ref_state, case.state_dtype), "final_state"
    return r


def plan_line(p):
    """The CGDR_PLAN line's fields (--print-plan, `cgdr plan`)."""
    line = next(s for s in p.stdout.splitlines() if s.startswith("CGDR_PLAN "))
    return dict(kv.split("=", 1) for kv in line.split()[1:])


# ------------------------------------------------------------ the rows

# `cgdr run` flags: (flag, value or None for a switch, context flags, check).
# Checks: ("plan", {field: value}) the run's plan says so and the result
# matches FP64; ("differs", other) and ("same", other) against the result of
# the `other` flags on the same case; ("error", regex[, plant]).
BF16X3 = ["--precision", "bf16x3", "--algo", "chunk16"]
VECTOR_BF16X3 = BF16X3 + ["--engine", "vector"]
RUN_ROWS = [
    ("--threads", "1", [], ("plan", {"threads": "1"})),
    ("--threads", "3", [], ("plan", {"threads": "3"})),
    ("--threads", "4096", [], ("plan", {"threads": "4096"})),
    ("--threads", "4097", [], ("error", r"--threads: expected an integer in \[0, 4096\], got '4097'")),
    *[("--algo", a, [], ("plan", {"algo": a})) for a in ("recurrent", "chunk16", "chunk32", "chunk64")],
    ("--algo", "chunk16", [], ("differs", ["--algo", "chunk64"])),
    ("--algo", "chunk128", [], ("error", r"--algo: expected auto, recurrent, chunk16, chunk32 or chunk64")),
    *[("--precision", p, ["--algo", "chunk16", "--engine", "vector"], ("plan", {"precision": p}))
      for p in ("fp32", "bf16", "bf16x3", "bf16x4")],
    ("--precision", "bf16", ["--algo", "chunk16", "--engine", "vector"], ("differs", ["--algo", "chunk16"])),
    ("--precision", "auto", ["--algo", "chunk16", "--engine", "amx-emu"], ("plan", {"precision": "fp32"})),  # f32 case
    ("--precision", "fp16", [], ("error", r"--precision: expected auto, fp32")),
    ("--engine", "vector", BF16X3, ("plan", {"engine": None})),  # the SIMD target's name
    ("--engine", "amx-emu", BF16X3, ("plan", {"engine": "amx-emu"})),
    ("--engine", "amx-emu", BF16X3, ("differs", VECTOR_BF16X3)),
    ("--engine", "amx", BF16X3, ("plan", {})),
    ("--engine", "tiles", [], ("error", r"--engine: expected auto, vector, amx or amx-emu")),
    ("--check-values", None, [], ("same", [])),
    ("--check-values", None, [], ("error", r"value: non-finite value nan at index \[1, 1, 3\]", "nan_value")),
    ("--check-values", None, [], ("error", r"error: [^:]*: out: non-finite value .* computed from finite inputs",
                                  "huge_query")),
    ("--check-values", None, [], ("error", r"error: [^:]*: final_state: non-finite value inf at index \[0, 1, ",
                                  "huge_last_value")),
    # Checkpoints (docs/SPEC.md 6d): the run with them still matches FP64; cli_test.sh's serving section checks them.
    ("--checkpoint-every", "16", [], ("plan", {"T": "57"})),
    ("--checkpoint-every", "-1", [], ("error", r"--checkpoint-every: expected an integer in \[0, ")),
    ("--print-plan", None, [], ("plan", {"T": "57", "Dk": "24"})),
    ("--quiet", None, [], ("plan", {"T": "57"})),
    ("--quiet", None, [], ("same", [])),
    ("--input", "missing.safetensors", [], ("error", r"missing\.safetensors: cannot open")),
    ("--output", "no/such/dir/out.safetensors", [], ("error", r"cannot create a temporary file")),
]

# Case metadata and tensors: (name, Case keywords, expected error or None).
CASE_ROWS = [
    ("scale", {"scale": 0.37}, None), ("scale", {"scale": -0.5}, None),
    ("scale", {"metadata": {"scale": "0.37x"}}, r"metadata 'scale' is \"0\.37x\", expected a finite decimal"),
    ("state_layout", {"layout": "kv"}, None),
    ("state_layout", {"metadata": {"state_layout": "xy"}}, r"metadata 'state_layout' is \"xy\""),
    ("use_qk_l2norm", {"l2norm": True}, None),
    ("use_qk_l2norm", {"metadata": {"use_qk_l2norm": "yes"}}, r"metadata 'use_qk_l2norm' is \"yes\""),
    ("qk_l2norm_eps", {"l2norm": True, "eps": 0.5}, None),  # far from 1e-6: the FP64 check fails unless it is read
    ("qk_l2norm_eps", {"metadata": {"qk_l2norm_eps": "0"}}, r"qk_l2norm_eps: expected a finite number > 0, got 0"),
    ("qk_l2norm_eps", {"metadata": {"qk_l2norm_eps": "tiny"}}, r"metadata 'qk_l2norm_eps' is \"tiny\""),
    ("format", {"metadata": {"format": "pt"}}, None),
    ("g", {"g": False}, None), ("initial_state", {"state": False}, None),
    # The gate in the kernel (docs/SPEC.md 6d; a gated case is run and checked by cli_test.sh's layouts_and_dtypes).
    ("use_beta_sigmoid", {"metadata": {"use_beta_sigmoid": "yes"}}, r"metadata 'use_beta_sigmoid' is \"yes\""),
    ("a", {"extra": {"a": ("f32", (sum(LENS), NV), raw([0] * (sum(LENS) * NV), "f32"))}},
     r"a: expected either g or the raw gate a"),
    ("A_log", {"extra": {"A_log": ("f32", (NV,), raw([0] * NV, "f32"))}}, r"A_log: given without the raw gate 'a'"),
    ("dt_bias", {"extra": {"dt_bias": ("f32", (NV,), raw([0] * NV, "f32"))}}, r"dt_bias: given without the raw gate 'a'"),
    # KDA (docs/SPEC.md 10): the per-channel gate, g or a [T, Nv, Dk] with dt_bias [Nv * Dk], against kda_fp64
    # (an FP64 recurrence of its own, above); the bounded gate from the metadata gate_lower_bound. More algos:
    # test_kda_algo; make-case, decode and verify: cli_test.sh's kda section.
    ("g", {"kda": "g"}, None),
    ("g", {"kda": "g", "extra": {"g": ("f32", (sum(LENS), NV, DK + 1), raw([0] * (sum(LENS) * NV * (DK + 1)), "f32"))}},
     r"g: expected shape \[T, Nv, Dk\] = \[57, 4, 24\], got \[57, 4, 25\]"),
    ("a", {"kda": "raw"}, None),
    ("dt_bias", {"kda": "raw", "extra": {"dt_bias": ("f32", (NV,), raw([0] * NV, "f32"))}},
     r"dt_bias: expected shape \[Nv \* Dk\] \(a per-channel gate\) = \[96\], got \[4\]"),
    ("gate_lower_bound", {"kda": "raw", "lower_bound": -5.0}, None),
    ("gate_lower_bound", {"kda": "raw", "lower_bound": -5.0, "no_a_log": True}, None),  # a bounded gate may omit A_log
    ("A_log", {"kda": "raw", "no_a_log": True}, r"A_log: required tensor is missing"),
    ("gate_lower_bound", {"kda": "raw", "lower_bound": 0.5},
     r"options\.gate_lower_bound: expected 0 \(none\) or a finite bound < 0, got 0\.5"),
    ("gate_lower_bound", {"metadata": {"gate_lower_bound": "-5"}},
     r"options\.gate_lower_bound: given without the raw gate 'a' it applies to"),
    ("gate_lower_bound", {"metadata": {"gate_lower_bound": "nan"}}, r"metadata 'gate_lower_bound' is \"nan\""),
    # State pools, checkpoints, decode cases (docs/SPEC.md 6d; run and checked by cli_test.sh's serving sections).
    ("state_indices", {"extra": {"state_indices": ("i32", (3,), raw([0, 1, 2], "i32"))}}, None),  # the dense form
    ("state_indices", {"extra": {"state_indices": ("i32", (3,), raw([1, 1, 0], "i32"))}},
     r"state_indices: expected distinct non-negative indices"),
    ("state_indices", {"extra": {"state_indices": ("f32", (3,), raw([0, 1, 2], "f32"))}}, r"state_indices: expected dtype i32"),
    ("dst_indices", {"extra": {"dst_indices": ("i32", (3, 1), raw([0, 1, 2], "i32"))}}, r"dst_indices: only in a decode case"),
    ("checkpoint_every", {"metadata": {"checkpoint_every": "16"}}, None),
    ("checkpoint_every", {"metadata": {"checkpoint_every": "often"}}, r"metadata 'checkpoint_every' is \"often\""),
    ("output_states", {"metadata": {"output_states": "true"}}, r"metadata 'output_states': only in a decode case"),
    ("out", {"extra": {"out": ("f32", (2,), raw([1, 2], "f32"))}}, None),  # expected results ride along, ignored
    ("final_state", {"extra": {"final_state": ("f32", (1,), raw([3], "f32"))}}, None),
]

# `cgdr plan` flags: (flag, value, CGDR_PLAN field, value shown).
PLAN_BASE = ["--t", "100", "--nk", "2", "--nv", "4", "--dk", "40", "--dv", "24", "--precision", "bf16x3"]
PLAN_ROWS = [("--t", "1000", "T", "1000"), ("--nk", "1", "Nk", "1"), ("--nv", "8", "Nv", "8"), ("--dk", "100", "Dk", "100"),
             ("--dv", "72", "Dv", "72"), ("--b", "3", "B", "3"), ("--threads", "5", "threads", "5"),
             ("--dtype", "bf16", "dtype", "bf16"), ("--algo", "chunk32", "chunk", "32"),
             ("--precision", "bf16x4", "precision", "bf16x4"), ("--engine", "amx-emu", "engine", "amx-emu"),
             ("--per-channel-gate", None, "gate", "per-channel")]


# ------------------------------------------------------------ the tests

def flags_of(command):
    p = cgdr("flags", command)
    assert p.returncode == 0, p.stderr
    return [line.split()[0] for line in p.stdout.splitlines()]


def listed_by_reader(tmp_path, **kw):
    """The names a case reader's error lists after 'expected'."""
    case = Case(tmp_path, **kw)
    p = cgdr("run", "--input", case.path, "--output", tmp_path / "o.safetensors")
    m = re.search(r"\(expected ([A-Za-z0-9_, ]+)\)", p.stderr)
    assert p.returncode == 2 and m, p.stderr
    return m.group(1).split(", ")


def test_every_flag_key_and_tensor_has_a_row(tmp_path):
    run_flags = flags_of("run")
    assert {"--input", "--output", "--threads"} <= set(run_flags), run_flags
    assert sorted(set(run_flags) - {r[0] for r in RUN_ROWS}) == [], "cgdr run flags without a row"
    plan_flags = flags_of("plan")
    assert sorted(set(plan_flags) - {r[0] for r in PLAN_ROWS}) == [], "cgdr plan flags without a row"
    keys = listed_by_reader(tmp_path, metadata={"bogus": "1"})
    tensors = listed_by_reader(tmp_path, extra={"bogus": ("f32", (1,), raw([0], "f32"))})
    required = []
    for name in tensors:
        if name in ("out", "final_state"):  # expected results that may ride along: never required
            continue
        # The gate's and the serving tensors: not in the base case.
        optional = ("g", "initial_state", "a", "A_log", "dt_bias", "state_indices", "dst_indices")
        p = cgdr("run", "--input", Case(tmp_path, drop=[name] if name not in optional else [],
                                        g=name != "g", state=name != "initial_state").path,
                 "--output", tmp_path / "o.safetensors")
        if "missing required tensor" in p.stderr:
            required.append(name)
    assert required == ["query", "key", "value", "beta", "seq_lens"], required
    covered = {r[0] for r in CASE_ROWS}
    assert sorted(set(keys) - covered) == [], "metadata keys without a row"
    assert sorted(set(tensors) - set(required) - covered) == [], "optional tensors without a row"
    assert {"out", "final_state"} <= covered


@pytest.mark.parametrize("flag,value,ctx,check", RUN_ROWS, ids=lambda x: str(x) if isinstance(x, str) else None)
def test_run_flag(tmp_path, flag, value, ctx, check):
    kind = check[0]
    case = Case(tmp_path, plant=check[2] if kind == "error" and len(check) > 2 else None)
    given = [flag] + ([value] if value is not None else [])
    out = tmp_path / "r.safetensors"
    if flag in ("--input", "--output"):  # a bad one of the two
        path = tmp_path / value
        args = ["run", "--input", path if flag == "--input" else case.path, "--output",
                path if flag == "--output" else out]
        p = cgdr(*args)
        assert p.returncode == 2 and re.search(check[1], p.stderr) and p.stderr.count("\n") == 1, p.stderr
        assert not path.exists() and not out.exists()
        return
    if kind == "error":
        run_fails(case, out, check[1], *ctx, *given)
        return
    flags = ctx + given
    p = run_ok(case, out, *flags, *([] if "--print-plan" in flags else ["--print-plan"]))
    precision = dict(zip(ctx[::2], ctx[1::2])).get("--precision", value if flag == "--precision" else "auto")
    r = check_result(case, out, precision)
    if kind == "plan":
        fields = plan_line(p)
        for k, v in check[1].items():
            assert fields[k] == v if v is not None else fields[k] not in ("amx", "amx-emu"), (k, fields[k])
        plain = [f for f in flags if f not in ("--print-plan", "--quiet")]
        quiet = run_ok(case, tmp_path / "quiet.safetensors", *plain, "--quiet")
        assert quiet.stdout == "", "stdout with --quiet and without --print-plan"
        assert (tmp_path / "quiet.safetensors").read_bytes() == out.read_bytes(), "--print-plan changed the result"
        summary = run_ok(case, tmp_path / "summary.safetensors", *plain)
        assert summary.stdout.count("\n") == 1 and "tokens/s" in summary.stdout, summary.stdout
    else:
        other = tmp_path / "other.safetensors"
        run_ok(case, other, *check[1])
        o = read_safetensors(other)
        same = all(np.array_equal(r[n], o[n]) for n in ("out", "final_state"))
        assert same == (kind == "same")


@pytest.mark.parametrize("name,kw,error", CASE_ROWS, ids=lambda x: str(x)[:40])
def test_case_key_or_tensor(tmp_path, name, kw, error):
    case = Case(tmp_path, **kw)
    out = tmp_path / "r.safetensors"
    if error:
        run_fails(case, out, error)
        return
    run_ok(case, out)
    check_result(case, out)


# KDA's per-channel gate on every formulation `cgdr run` offers: token by token
# (C = 1) and the chunked kernel (C = 16, 32, 64, auto), f32 and f16, both
# layouts, against kda_fp64; and `cgdr check`, whose FP64 reference must agree.
KDA_ALGOS = ["recurrent", "chunk16", "chunk32", "chunk64", "auto"]


@pytest.mark.parametrize("algo", KDA_ALGOS)
@pytest.mark.parametrize("kw", [{"kda": "g"}, {"kda": "g", "dtype": "f16", "state_dtype": "f16", "layout": "kv"},
                                {"kda": "raw", "lower_bound": -5.0, "l2norm": True}],
                         ids=["g", "g_f16_kv", "raw_bounded"])
def test_kda_algo(tmp_path, algo, kw):
    case = Case(tmp_path, **kw)
    out = tmp_path / "r.safetensors"
    run_ok(case, out, "--algo", algo)
    check_result(case, out)
    p = cgdr("check", "--input", case.path, "--result", out)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("precision,engine", [("bf16", "vector"), ("bf16x3", "vector"), ("bf16x3", "amx-emu"),
                                              ("bf16x4", "amx-emu")])
def test_kda_precision(tmp_path, precision, engine):
    """A KDA case file run in a named precision mode on a named engine
    (docs/SPEC.md 10.4): the plan takes both, the result is within the mode's
    bound of kda_fp64, and it is not fp32's answer."""
    case = Case(tmp_path, kda="g")
    out = tmp_path / "r.safetensors"
    p = run_ok(case, out, "--algo", "chunk16", "--precision", precision, "--engine", engine, "--print-plan")
    fields = plan_line(p)
    assert (fields["gate"], fields["precision"]) == ("per-channel", precision), fields
    assert (fields["engine"] == "amx-emu") == (engine == "amx-emu"), fields
    r = check_result(case, out, precision)
    fp32 = tmp_path / "fp32.safetensors"
    run_ok(case, fp32, "--algo", "chunk16", "--precision", "fp32")
    assert not np.array_equal(r["out"], read_safetensors(fp32)["out"])


def write_result(path, out, final_state, layout):
    write_safetensors(path, {"out": ("f32", out.shape, raw(out, "f32")),
                             "final_state": ("f32", final_state.shape, raw(final_state, "f32"))},
                      {"state_layout": layout})


@pytest.mark.parametrize("kw", [{"kda": "g", "layout": "kv"}, {"kda": "raw"}, {"kda": "raw", "lower_bound": -5.0},
                                {"kda": "raw", "lower_bound": -2.5, "no_a_log": True}],
                         ids=["g_kv", "raw", "raw_bounded", "raw_bounded_no_A_log"])
def test_check_agrees_with_kda_fp64(tmp_path, kw):
    """`cgdr check`'s FP64 reference of a KDA case is this file's kda_fp64 (the
    per-channel gate and its raw forms read from the case, as the kernels read
    them): kda_fp64's answer passes, and one that decays per head does not."""
    case = Case(tmp_path, **kw)
    ref_out, ref_state = case.reference()
    res = tmp_path / "fp64.safetensors"
    write_result(res, ref_out, ref_state, case.layout)
    p = cgdr("check", "--input", case.path, "--result", res)
    assert p.returncode == 0, p.stdout + p.stderr
    g = f64(case.t["g"]) if case.kda == "g" else case.gate
    per_head = np.repeat(g.mean(-1, keepdims=True), DK, axis=-1)  # the same decay for every channel of a head
    wrong_out, wrong_state = kda_fp64(case.t["q"], case.t["k"], case.t["v"], case.t["beta"], per_head,
                                      case.t["state"], LENS, layout=case.layout)
    write_result(res, wrong_out, wrong_state, case.layout)
    p = cgdr("check", "--input", case.path, "--result", res)
    assert p.returncode == 1 and "FAIL" in p.stdout, p.stdout + p.stderr


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_every_dtype(tmp_path, dtype):
    """query/key/value/beta (and out), initial_state (and final_state) and g of every dtype."""
    for state_dtype in ("f16", "bf16", "f32"):
        for g_dtype in ("f16", "bf16", "f32"):
            case = Case(tmp_path, dtype=dtype, state_dtype=state_dtype, g_dtype=g_dtype)
            out = tmp_path / f"r_{state_dtype}_{g_dtype}.safetensors"
            run_ok(case, out)
            check_result(case, out)


@pytest.mark.parametrize("flag,value,field,shown", PLAN_ROWS)
def test_plan_flag(flag, value, field, shown):
    args = list(PLAN_BASE)
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag] + ([] if value is None else [value])  # None: a switch
    p = cgdr("plan", *args)
    assert p.returncode == 0, p.stderr
    assert plan_line(p)[field] == shown


def test_bench_rows_report_each_formulations_own_error(tmp_path):
    """A KDA bench row times its recurrent form in turn with the chunked one;
    each reports the error of its own result. In bf16x3 the chunked products
    round the state to 16 bits (~3e-6) where the recurrent form keeps FP32
    (~5e-8), so a row showing the other's error is seen."""
    path = tmp_path / "kda.json"
    p = cgdr("bench", "--shape", "kimi-linear-T2048", "--reps", "1", "--precision", "bf16x3", "--engine", "vector",
             "--algo", "chunk16", "--json", path)
    assert p.returncode == 0, p.stderr
    rows = {r["algo"]: r for r in json.loads(path.read_text())}
    assert set(rows) == {"chunk16", "recurrent"}, rows.keys()
    assert rows["chunk16"]["rel_err_state"] > 5e-7, rows["chunk16"]
    assert rows["recurrent"]["rel_err_state"] < 5e-7, rows["recurrent"]


def test_bench_target_runs_every_row_and_the_peak_there(tmp_path):
    """`cgdr bench --target NAME` (an AVX2 build timed on an AVX-512 CPU): the
    rows' engine and the FMA peak, measured before and after the rows, name
    the target asked for. The lowest usable target is asked for, so that the
    flag narrows dispatch on every CPU (a scalar-only build has nothing to
    narrow and runs as before)."""
    p = cgdr("bench", "--target", "bogus")
    assert p.returncode != 0
    usable = re.search(r"this CPU \(([^)]*)\)", p.stderr).group(1).split(", ")
    lowest = usable[-1]
    path = tmp_path / "bench.json"
    p = cgdr("bench", "--shape", "npu-B1-H8-T64-D64x64", "--reps", "1", "--target", lowest, "--json", path)
    assert p.returncode == 0, p.stderr
    assert f"kernel target {lowest.upper()} (--target)" in p.stdout, p.stdout
    assert re.search(rf"lanes, {lowest.upper()}\)", p.stdout), p.stdout
    rows = json.loads(path.read_text())
    assert rows and all(r["target"] == lowest.upper() and r["engine"] == lowest for r in rows), rows
    # The CPU named in the header and on every row, with its family and model.
    cpu = re.search(r"^cgdr bench: (.*\(family \d+ model \d+\)), kernel target", p.stdout, re.M)
    assert cpu, p.stdout
    assert all(r["cpu"] == cpu.group(1) for r in rows), rows


def test_bench_precision_table_has_the_kda_section(tmp_path):
    """`cgdr bench --precision all` times Kimi Linear's KDA layer (bf16 in,
    f32 state) in every mode beside the flagship: each row its own mode's
    error, and auto keeping KDA in fp32 (docs/SPEC.md 10.4). No timing is
    asserted."""
    path = tmp_path / "precision.json"
    p = cgdr("bench", "--precision", "all", "--quick", "--t", "128", "--threads", "1", "--reps", "1", "--json", path)
    assert p.returncode == 0, p.stderr
    kda = {r["name"]: r for r in json.loads(path.read_text()) if r["name"].startswith("kimi-linear-bf16-")}
    by_mode = {r["precision"]: r for name, r in kda.items() if not name.endswith("-auto-auto")}
    assert {"fp32", "bf16", "bf16x3", "bf16x4"} <= set(by_mode), sorted(kda)
    for r in kda.values():
        assert r["per_channel_gate"] and r["Nk"] == 32 and r["dtype"] == "bf16" and r["state_dtype"] == "f32", r
    assert by_mode["fp32"]["rel_err_state"] < 1e-6, by_mode["fp32"]
    assert by_mode["fp32"]["rel_err_state"] < by_mode["bf16x3"]["rel_err_state"] < 2e-5, by_mode["bf16x3"]
    assert kda["kimi-linear-bf16-auto-auto"]["precision"] == "fp32"


def test_plan_splits_t_evenly():
    """B sequences split T: the first T % B one token longer, summing to T."""
    p = cgdr("plan", "--t", "1000", "--b", "3", "--nk", "1", "--nv", "1", "--dk", "16", "--dv", "16", "--threads", "1")
    assert p.returncode == 0, p.stderr
    tokens = {int(m.group(1)): int(m.group(2))
              for m in re.finditer(r"^group \d+: seq (\d+), heads \d+\.\.\d+, \d+ items of (\d+) tokens$", p.stdout, re.M)}
    assert tokens == {0: 334, 1: 333, 2: 333}, p.stdout


def test_check_judges_the_whole_pool(tmp_path):
    """`cgdr check` of a pool case (docs/SPEC.md 6d): a slot no sequence names
    must keep its value; a result that changed one fails (exit 1)."""
    case, res = tmp_path / "pool.safetensors", tmp_path / "pool.result.safetensors"
    p = cgdr("make-case", "--out", case, "--lens", "9,0,21", "--slots", "3,-1,0", "--pool", "5")
    assert p.returncode == 0, p.stderr
    assert cgdr("run", "--input", case, "--output", res).returncode == 0
    assert cgdr("check", "--input", case, "--result", res).returncode == 0
    b = bytearray(res.read_bytes())
    n = struct.unpack("<Q", b[:8])[0]
    lo, hi = json.loads(b[8:8 + n])["final_state"]["data_offsets"]
    slot = (hi - lo) // 5
    b[8 + n + lo + slot + 4:8 + n + lo + slot + 8] = struct.pack("<f", 1e3)  # slot 1, its second element
    res.write_bytes(bytes(b))
    p = cgdr("check", "--input", case, "--result", res)
    assert p.returncode == 1 and "final_state" in p.stdout and "FAIL" in p.stdout, p.stdout
