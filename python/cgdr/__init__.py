"""cgdr: the chunk gated delta rule (Gated DeltaNet linear attention of
Qwen3-Next) on the CPU.

Entry points (numpy float16/float32 arrays or CPU torch float16/bfloat16/float32
tensors; results come back as the same kind of object):

- chunk_gated_delta_rule: flash-linear-attention's layout and signature.
- chunk_gated_delta_rule_tnd: the packed [T, N, D] form of the operator.
- recurrent_step: one decode token per sequence, states updated in place in a
  pool addressed by an index per sequence.
- cgdr.torch: drop-ins for transformers' torch_chunk_gated_delta_rule and
  torch_recurrent_gated_delta_rule.
- golden, compare: golden data and the verdict by Ascend's precision standard
  for NPU ports of the operator (docs/golden.md), as `cgdr golden` and
  `cgdr compare` give them.

The math is FP32 inside whatever the storage dtype. The GIL is released while
computing. Bad input raises TypeError (wrong kind of object or dtype) or
ValueError (shapes, values, options) before anything is written.
"""
import contextlib
import operator
import warnings

from . import _cgdr
from . import _tensors as _t
from ._golden import compare, golden
from ._options import _choice, _eps, _lower_bound, _scale, _threads

__version__ = "0.1.0"
__all__ = ["chunk_gated_delta_rule", "chunk_gated_delta_rule_tnd", "recurrent_step", "chunk_kda", "fused_recurrent_kda",
           "active_target", "cpu_description", "golden", "compare"]

_ALGOS = ("auto", "recurrent", "chunk16", "chunk32", "chunk64", "chunk128")


def active_target():
    """The SIMD target the kernels dispatch to on this CPU ("AVX3", "AVX2", ...)."""
    return _cgdr.active_target()


def cpu_description():
    """The CPU to name beside a figure: CPUID's brand string (a VM's may be as
    vague as "AMD EPYC"), AMD's core generation, and the family and model, e.g.
    "AMD EPYC, Zen 5 (family 26 model 2)"."""
    return _cgdr.cpu_description()


def _layout(state_layout):
    return _choice("state_layout", state_layout, ("kv", "vk"), "'kv' ([N, HV, K, V]) or 'vk' ([N, HV, V, K])")


def _algo(algo):
    return _choice("algo", algo, _ALGOS)


_PRECISIONS = ("auto", "fp32", "bf16", "bf16x3", "bf16x4")
_ENGINES = ("auto", "vector", "amx", "amx-emu")


def _precision(precision):
    return _choice("precision", precision, _PRECISIONS)


def _engine(engine):
    return _choice("engine", engine, _ENGINES)


def _int_option(name, value, bits=31):
    """v_step, dk_bucket (and checkpoint_every, state_slot_stride with bits=63):
    an int, whose range the native validation checks."""
    try:
        n = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        n = None
    if n is None or not -2**bits <= n < 2**bits:
        raise ValueError(f"{name}: expected an int, got {value!r}")
    return n


def _prefill(q, k, v, beta, g, initial_state, seq_lens, out, final_state, scale, l2norm, layout, threads,
             algo, check_values, precision="auto", engine="auto", v_step=0, dk_bucket=0, gate=None, beta_sigmoid=False,
             state_indices=None, state_slot_stride=0, checkpoint_states=None, checkpoint_every=0,
             qk_l2norm_eps=1e-6, gate_lower_bound=0.0):
    """The one call into the native prefill; every tensor is already prepared.
    gate: None or (a, A_log, dt_bias), the gate in the kernel (docs/SPEC.md 6d);
    gate_lower_bound: the native option (0: none), already checked."""
    a, a_log, dt_bias = gate if gate is not None else (None, None, None)
    for name, x in (("initial_state", initial_state), ("final_state", final_state)):
        _t.check_slot_extent(name, x, state_slot_stride)
    _cgdr.prefill(_t.native("query", q), _t.native("key", k), _t.native("value", v), _t.native("beta", beta),
                  _t.native("g", g), _t.native("initial_state", initial_state), seq_lens, _t.native("out", out),
                  _t.native("final_state", final_state), scale, bool(l2norm), layout, threads, algo,
                  bool(check_values), _precision(precision), _engine(engine), _int_option("v_step", v_step),
                  _int_option("dk_bucket", dk_bucket), a=_t.native("a", a), A_log=_t.native("A_log", a_log),
                  dt_bias=_t.native("dt_bias", dt_bias), use_beta_sigmoid=bool(beta_sigmoid), state_indices=state_indices,
                  state_slot_stride=int(state_slot_stride),
                  checkpoint_states=_t.native("checkpoint_states", checkpoint_states),
                  checkpoint_every=int(checkpoint_every), qk_l2norm_eps=_eps(qk_l2norm_eps),
                  gate_lower_bound=float(gate_lower_bound))


def _gate_inputs(a, A_log, dt_bias, bounded=False):
    """(a, A_log, dt_bias) ready for the native call, or None without a raw gate.
    bounded: a gate lower bound is given (KDA's bounded gate), which may go without A_log."""
    if a is None:
        if A_log is not None or dt_bias is not None:
            raise ValueError("A_log: given without the raw gate a (pass a, or g without A_log/dt_bias)")
        return None
    if A_log is None and not bounded:
        raise ValueError("A_log: required with the raw gate a (g = -exp(A_log) * softplus(a + dt_bias); only "
                         "a bounded gate, lower_bound * sigmoid(a + dt_bias), may omit it)")
    return tuple(None if x is None else _t.contiguous_input(n, x) for n, x in (("a", a), ("A_log", A_log),
                                                                                 ("dt_bias", dt_bias)))


def _final_state_buffers(kind, initial_state, shape, want_final, dtype, given=None):
    """(initial, final) for the native call: final has `dtype` (the caller's
    buffer `given`, if any); when there is no initial state but the final one
    must differ from the query's dtype, a zero state of that dtype is the
    initial one (the final one itself, an in-place update, unless the caller's
    buffer is to be left untouched until the call is known to be valid)."""
    if not want_final:
        return initial_state, None
    if initial_state is not None:
        return initial_state, _t.output("final_state", given, kind, shape, dtype)
    if given is not None:
        return _t.zeros(kind, shape, dtype), _t.output("final_state", given, kind, shape, dtype)
    final = _t.zeros(kind, shape, dtype)
    return final, final


def _no_final_buffer(final_state, output_final_state, pool):
    """final_state= is a caller's buffer for a dense final state only."""
    if final_state is None:
        return
    if pool:
        raise ValueError("final_state: not taken with a pool (the pool initial_state is written in place)")
    if not output_final_state:
        raise ValueError("final_state: given with output_final_state=False (pass output_final_state=True)")


def _cu_seqlens_to_lens(cu_seqlens, T):
    cu = _t.int32_vector("cu_seqlens", cu_seqlens)
    if cu.size < 2:
        raise ValueError(f"cu_seqlens: expected at least 2 offsets [0, ..., T], got {cu.tolist()}")
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens: expected the first offset to be 0, got {int(cu[0])}")
    if cu[-1] != T:
        raise ValueError(f"cu_seqlens: expected the last offset to be T = {T}, got {int(cu[-1])}")
    lens = cu[1:] - cu[:-1]
    if (lens < 0).any():
        i = int((lens < 0).nonzero()[0][0])
        raise ValueError(f"cu_seqlens: expected non-decreasing offsets, got {int(cu[i])} then {int(cu[i + 1])} at [{i}]")
    return lens.astype("int32")


# fla's keyword arguments (fla.ops.gated_delta_rule.chunk_gated_delta_rule, 0.6)
# for features cgdr does not have: what to do instead.
_FLA_UNSUPPORTED = {
    "allow_neg_eigval": "cgdr takes beta as given; pass 2 * beta.sigmoid() yourself",
    "cp_context": "context parallelism is not supported (one process computes every sequence)",
}
_FLA_IGNORED = ("chunk_size",)  # a kernel tuning choice
_FLA_GATE = ("use_gate_in_kernel", "A_log", "dt_bias")  # the gate in the kernel (docs/SPEC.md 6d), read from **kwargs


def _fla_layout(state_v_first, state_layout, extra):
    """cgdr's state layout from fla's state_v_first (or its deprecated alias
    transpose_state_layout in extra) and cgdr's own state_layout."""
    if "transpose_state_layout" in extra:
        if state_v_first:
            raise ValueError("state_v_first: cannot pass both state_v_first and the deprecated transpose_state_layout")
        state_v_first = extra.pop("transpose_state_layout")
        warnings.warn("transpose_state_layout is deprecated (as in fla); use state_v_first", DeprecationWarning,
                      stacklevel=3)
    fla = "vk" if state_v_first else "kv"
    if state_layout is None:
        return fla
    _layout(state_layout)
    if state_v_first and state_layout != "vk":
        raise ValueError(f"state_layout: state_v_first=True means 'vk', got state_layout={state_layout!r}")
    return state_layout


def _check_fla_options(extra, allow_neg_eigval, cp_context, fn="chunk_gated_delta_rule", chunk_sizes=(16, 32, 64),
                       ignored=_FLA_IGNORED):
    """Accepts fla's arguments at their defaults (and the tuning ones it
    ignores); rejects, naming the argument, those cgdr cannot honour.
    fn, chunk_sizes, ignored: the fla function's name, the chunk sizes it
    takes and its **kwargs cgdr ignores (chunk_kda's differ)."""
    given = {"allow_neg_eigval": allow_neg_eigval, "cp_context": cp_context}
    for name, value in given.items():
        if value not in (None, False):
            raise ValueError(f"{name}: not supported by cgdr ({_FLA_UNSUPPORTED[name]}), got {value!r}")
    if "head_first" in extra:
        raise ValueError("head_first: removed from fla and not supported; inputs must be [B, T, H, ...]")
    chunk_size = extra.get("chunk_size", 64)
    if chunk_sizes and chunk_size not in chunk_sizes:
        sizes = ", ".join(str(c) for c in chunk_sizes[:-1]) + f" or {chunk_sizes[-1]}"
        raise ValueError(f"chunk_size: expected {sizes} as fla (cgdr's plan picks its own), got {chunk_size!r}")
    unknown = sorted(set(extra) - set(ignored))
    if unknown:
        raise TypeError(f"{fn}() got an unexpected keyword argument {unknown[0]!r}")


def _same_offsets(cu_seqlens, cu_seqlens_cpu):
    """fla passes a host copy of cu_seqlens beside it; on the CPU they must agree."""
    if cu_seqlens_cpu is None:
        return
    if cu_seqlens is None:
        raise ValueError("cu_seqlens_cpu: given without cu_seqlens (pass the offsets as cu_seqlens)")
    a = _t.int32_vector("cu_seqlens", cu_seqlens)
    b = _t.int32_vector("cu_seqlens_cpu", cu_seqlens_cpu)
    if a.shape != b.shape or (a != b).any():
        raise ValueError(f"cu_seqlens_cpu: expected the same offsets as cu_seqlens {a.tolist()}, got {b.tolist()}")


def _fla_pool_slots(initial_state_indices, initial_state, N):
    """sglang's initial_state_indices as int32 slots (one per sequence), or None."""
    if initial_state_indices is None:
        return None
    slots = _t.int32_vector("initial_state_indices", initial_state_indices)
    if slots.shape[0] != N:
        raise ValueError(f"initial_state_indices: expected N = {N} slots (one per sequence), got {slots.shape[0]}")
    if initial_state is None:
        raise ValueError("initial_state: required with initial_state_indices (the pool [P, HV, ...] read and written)")
    return slots


def _pool_buffers(pool, output_final_state, state_slot_stride):
    """(initial, final, slot stride) of a pool: read in place, and written in
    place with output_final_state; a torch view of a pool with room between its
    slots is used as it is (_tensors.writable_pool)."""
    _t.float_dtype_name("initial_state", pool)
    if not output_final_state and not _t.is_slot_strided(pool):
        return _t.contiguous_input("initial_state", pool), None, state_slot_stride
    pool, stride = _t.writable_pool("initial_state", pool, state_slot_stride)
    return pool, (pool if output_final_state else None), stride


def _checkpoint_buffer(kind, checkpoint_every, lens, state_dims):
    """checkpoint_states (f32) [sum of len // every, *state_dims], or None without checkpoints."""
    every = _int_option("checkpoint_every", checkpoint_every, 63)
    if every < 0:
        raise ValueError(f"checkpoint_every: expected 0 (none) or a positive token count, got {every}")
    if every == 0:
        return None
    return _t.empty(kind, (int((lens // every).sum()),) + tuple(state_dims), "f32")


@contextlib.contextmanager
def _fla_names():
    """The native errors of the fla entry in fla's (and sglang's) names."""
    try:
        yield
    except ValueError as e:
        msg = str(e)
        if msg.startswith("state_indices:"):
            raise ValueError("initial_state_indices:" + msg[len("state_indices:"):].replace(
                "[B] with B of seq_lens", "[N], one per sequence")) from None
        raise


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                           cp_context=None, *, state_layout=None, threads=None, algo="auto", check_values=False,
                           precision="auto", engine="auto", v_step=0, dk_bucket=0, initial_state_indices=None,
                           state_slot_stride=0, checkpoint_every=0, qk_l2norm_eps=1e-6, out=None, final_state=None,
                           lower_bound=None, **fla_kwargs):
    """flash-linear-attention's chunk_gated_delta_rule on the CPU.

    The arguments up to cp_context are fla's (0.6), in fla's order, with its
    defaults; of fla's keyword-only ones chunk_size (16, 32, 64) is accepted
    and left to cgdr's plan, transpose_state_layout is state_v_first's old
    name. chunk_indices (a hint derived from cu_seqlens) is ignored. Features
    cgdr lacks (allow_neg_eigval, cp_context, head_first) raise ValueError
    naming the argument.

    The gate in the kernel (docs/SPEC.md 6d), as fla: use_gate_in_kernel=True
    with A_log [HV] and dt_bias [HV] (optional) keywords: g holds the raw
    gate a and the kernel uses -exp(A_log) * softplus(a + dt_bias) (A_log and
    dt_bias are ignored without it); use_beta_sigmoid_in_kernel=True: beta
    holds the raw b and the kernel uses sigmoid(b). lower_bound (keyword-only,
    fla's KDA name; ignored without use_gate_in_kernel): the bounded gate
    lower_bound * sigmoid(exp(A_log) * (a + dt_bias)), A_log then optional.
    g [B, T, HV, K] (a and dt_bias [HV * K] with the gate in the kernel) is
    KDA's per-channel gate: the call is then chunk_kda's.

    q, k: [B, T, H, K]; v: [B, T, HV, V] (HV a multiple of H, grouped heads);
    beta: [B, T, HV]; g: [B, T, HV] log decays (<= 0), or None for no decay.
    q, k, v and beta share one dtype (float16, bfloat16 or float32; numpy has
    no bfloat16); g may be any of the three, independently. B >= 1. With
    cu_seqlens (N+1 offsets [0, ..., T]) B must be 1 and the N sequences are
    packed along T.
    scale: None (default) for 1/sqrt(K), else a finite non-zero number.
    initial_state: None (zeros) or [N, HV, K, V] (fla's default; state_layout
    "kv") or [N, HV, V, K] (state_v_first=True, or state_layout "vk"), N = B or
    len(cu_seqlens) - 1, any of the three float dtypes.
    use_qk_l2norm_in_kernel: divide q and k rows by sqrt(sum x^2 + qk_l2norm_eps)
    (keyword-only, default 1e-6 as fla; vLLM-CPU's ops use 1e-5).
    threads: None (default: every CPU this process may use) or 1..4096.

    Returns (o, final_state): o [B, T, HV, V] in q's dtype; final_state (None
    unless output_final_state) in initial_state's dtype, float32 when there is
    no initial state (as fla), in initial_state's layout.

    algo: "auto" (default: the planner picks) or a forced formulation
    ("recurrent", "chunk16", "chunk32", "chunk64", "chunk128").
    precision: "auto" (default: the fastest mode whose error meets the
    contract for the dtype, docs/SPEC.md 6c: "bf16x3" on AMX tiles for
    f16/bf16 inputs where the CPU has AMX, else "fp32"), "fp32", "bf16"
    (products on bf16-rounded operands, FP32 accumulation), "bf16x3"/"bf16x4"
    (compensated hi/lo bf16 products). They apply to the chunked
    formulations; with algo="auto" the plan may pick the recurrence (FP32
    products) where the mode's products are slower, so pass algo="chunk16"
    (or 32, 64) for the mode's own numerics.
    engine: where the bf16 modes' products run: "auto" (default: AMX tiles
    where the CPU has them, else the vector units), "vector", "amx" (the
    vector units where AMX is not usable), "amx-emu" (the tile numerics
    emulated; slow, for tests).
    check_values: False (default); True first scans every input (initial_state
    included) and raises ValueError on a NaN or Inf, or on g > 0, before
    anything is written (one extra pass over the inputs).

    Bad arguments raise TypeError (kind of object, dtype) or ValueError
    (shapes, values, options) before anything is written.

    v_step (V tile width, 1..256) and dk_bucket (64, 80, 96, 128 >= K, or -1
    for the generic path) force the plan's choices (0: the plan picks; for
    tests and tuning, docs/SPEC.md 2.2).

    Serving (docs/SPEC.md 6d), keyword-only:
    out, final_state: caller's buffers for o [B, T, HV, V] (q's dtype) and the
    dense final_state (initial_state's dtype, float32 without one), written
    and returned instead of new ones (a serving loop that reuses them pays no
    page faults); checked like every other tensor before anything is written.
    initial_state_indices (sglang's name): N ints; initial_state is then a
    pool [P, HV, K, V] (or [P, HV, V, K]) whose slot initial_state_indices[n]
    sequence n reads and, with output_final_state, writes in place (negative:
    zeros in, nothing written); the final_state returned is the pool itself.
    state_slot_stride: elements between the pool's slots (0: dense).
    checkpoint_every > 0: also returns checkpoint_states (float32) [sum over
    n of len_n // checkpoint_every, HV, ...] in the state's layout, the state
    after every checkpoint_every tokens of each sequence, sequence after
    sequence: (o, final_state, checkpoint_states).
    """
    layout = _fla_layout(state_v_first, state_layout, fla_kwargs)
    use_gate, A_log, dt_bias = (fla_kwargs.pop(n, d) for n, d in zip(_FLA_GATE, (False, None, None)))
    _check_fla_options(fla_kwargs, allow_neg_eigval, cp_context)
    return _fla_prefill(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                        layout, cu_seqlens, cu_seqlens_cpu, (use_gate, A_log, dt_bias, use_beta_sigmoid_in_kernel),
                        lower_bound=lower_bound, threads=threads, algo=algo, check_values=check_values, precision=precision, engine=engine,
                        v_step=v_step, dk_bucket=dk_bucket, initial_state_indices=initial_state_indices,
                        state_slot_stride=state_slot_stride, checkpoint_every=checkpoint_every,
                        qk_l2norm_eps=qk_l2norm_eps, out=out, final_state=final_state)


def _fla_prefill(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, layout,
                 cu_seqlens, cu_seqlens_cpu, gate, *, kda=False, lower_bound=None, beta_scale=1, threads=None,
                 algo="auto", check_values=False, precision="auto", engine="auto", v_step=0, dk_bucket=0,
                 initial_state_indices=None, state_slot_stride=0, checkpoint_every=0, qk_l2norm_eps=1e-6, out=None,
                 final_state=None):
    """The body of the fla entries (chunk_gated_delta_rule, chunk_kda,
    fused_recurrent_kda), on fla's [B, T, H, ...] tensors: checks, the packed
    views, the buffers and the native call. gate: (use_gate_in_kernel, A_log,
    dt_bias, use_beta_sigmoid_in_kernel). kda: g must be [B, T, HV, K] (KDA's
    per-channel gate; without it g may be [B, T, HV] or [B, T, HV, K]).
    lower_bound: fla's bound of the gate in the kernel (None: the softplus
    gate). beta_scale 2: beta = 2 * sigmoid(b) (fla's allow_neg_eigval with
    use_beta_sigmoid_in_kernel), computed here."""
    use_gate, A_log, dt_bias, use_beta_sigmoid_in_kernel = gate
    bound = _lower_bound("lower_bound", lower_bound) if use_gate else 0.0  # fla reads it only with the gate
    if use_gate and g is None:
        raise ValueError("g: use_gate_in_kernel=True needs the raw gate in g, got None")
    if kda and g is None:
        raise ValueError("g: expected the per-channel gate [B, T, HV, K] (KDA's decay, log space), got None")
    _same_offsets(cu_seqlens, cu_seqlens_cpu)
    kind = _t.common_kind(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state)
    _t.check_rank("q", q, 4, "[B, T, H, K]")
    _t.check_rank("k", k, 4, "[B, T, H, K]")
    _t.check_rank("v", v, 4, "[B, T, HV, V]")
    _t.check_rank("beta", beta, 3, "[B, T, HV]")
    if g is not None and (kda or g.ndim != 3):
        _t.check_rank("g", g, 4, "[B, T, HV, K]" if kda else "[B, T, HV] or [B, T, HV, K] (a per-channel gate)")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if B < 1:
        raise ValueError(f"q: expected a batch of B >= 1 sequences ([B, T, H, K]), got B = 0 (shape {list(q.shape)})")
    for name, x in (("k", k), ("v", v), ("beta", beta), ("g", g)):
        if x is not None and tuple(x.shape[:2]) != (B, T):
            raise ValueError(f"{name}: expected leading dimensions [B, T] = [{B}, {T}] as q, got {list(x.shape)}")
    if tuple(k.shape) != tuple(q.shape):
        raise ValueError(f"k: expected the shape of q, [B, T, H, K] = {list(q.shape)}, got {list(k.shape)}")
    if H >= 1 and HV % H != 0:
        raise ValueError(f"v: expected HV (its heads) to be a multiple of H = {H} (the heads of q), got HV = {HV}")
    if tuple(beta.shape) != (B, T, HV):
        raise ValueError(f"beta: expected shape [B, T, HV] = {[B, T, HV]}, got {list(beta.shape)}")
    if g is not None:
        per_channel = g.ndim == 4
        want, dims = ((B, T, HV, K), "[B, T, HV, K]") if per_channel else ((B, T, HV), "[B, T, HV]")
        if tuple(g.shape) != want:
            raise ValueError(f"g: expected shape {dims} = {list(want)}, got {list(g.shape)}")
        if per_channel and use_gate and getattr(dt_bias, "shape", None) is not None \
                and tuple(dt_bias.shape) == (HV, K):
            dt_bias = dt_bias.reshape(HV * K)  # fla reads it flat: [HV * K] (or [HV, K], its view)
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"cu_seqlens: expected B = 1 when cu_seqlens is given (sequences packed along T), got B = {B}")
        seq_lens = _cu_seqlens_to_lens(cu_seqlens, T)
    else:
        seq_lens = _t.int32_vector("seq_lens", [T] * B)
    N = int(seq_lens.shape[0])
    qd = _t.float_dtype_name("q", q)
    state_dims = (HV, K, V) if layout == "kv" else (HV, V, K)
    slots = _fla_pool_slots(initial_state_indices, initial_state, N)
    state_slot_stride = _int_option("state_slot_stride", state_slot_stride, 63)
    _no_final_buffer(final_state, output_final_state, slots is not None)
    if slots is not None:
        init_arg, final, state_slot_stride = _pool_buffers(initial_state, output_final_state, state_slot_stride)
    else:
        init = None
        if initial_state is not None:
            _t.float_dtype_name("initial_state", initial_state)
            init = _t.contiguous_input("initial_state", initial_state)
        final_dtype = _t.dtype_name("initial_state", init) if init is not None else "f32"
        if init is None and output_final_state and final_dtype == qd:
            init_arg, final = None, _t.output("final_state", final_state, kind, (N,) + state_dims, final_dtype)
        else:
            init_arg, final = _final_state_buffers(kind, init, (N,) + state_dims, output_final_state, final_dtype,
                                                   final_state)
    checkpoints = _checkpoint_buffer(kind, checkpoint_every, seq_lens, state_dims)

    qc, kc, vc, bc = (_t.contiguous_input(n, x) for n, x in (("q", q), ("k", k), ("v", v), ("beta", beta)))
    if beta_scale != 1:  # 2 * sigmoid(b), in FP32, stored in beta's dtype (the kernel takes beta as given)
        bc = _t.scaled_sigmoid(bc, beta_scale)
        use_beta_sigmoid_in_kernel = False
    gc = _t.contiguous_input("g", g) if g is not None else None
    o = _t.output("out", out, kind, (B, T, HV, V), qd)

    def packed(x):  # [B, T, ...] -> [B*T, ...]: a view of a contiguous tensor; its own trailing dims
        return None if x is None else x.reshape((B * T,) + tuple(x.shape[2:]))

    gate = _gate_inputs(packed(gc), A_log, dt_bias, bounded=bound != 0.0) if use_gate else None
    with _fla_names():
        _prefill(packed(qc), packed(kc), packed(vc), packed(bc), None if use_gate else packed(gc), init_arg, seq_lens,
                 packed(o), final, _scale(scale), use_qk_l2norm_in_kernel, layout, _threads(threads), _algo(algo),
                 check_values, _precision(precision), _engine(engine), v_step, dk_bucket, gate=gate,
                 beta_sigmoid=use_beta_sigmoid_in_kernel, state_indices=slots,
                 state_slot_stride=state_slot_stride,
                 checkpoint_states=checkpoints, checkpoint_every=checkpoint_every, qk_l2norm_eps=qk_l2norm_eps,
                 gate_lower_bound=bound)
    return (o, final) if checkpoints is None else (o, final, checkpoints)


# chunk_kda's **kwargs (fla.ops.kda, 0.6) cgdr ignores: a kernel tuning choice.
_KDA_IGNORED = ("chunk_size",)


def _kda_options(fn, use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound, cp_context,
                 kwargs, chunk_sizes, ignored):
    """fla's KDA checks, in fla's order where they matter, and the beta scale:
    allow_neg_eigval needs use_beta_sigmoid_in_kernel (beta = 2 sigmoid(b));
    lower_bound is read only with the gate in the kernel, as fla."""
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError("allow_neg_eigval: True requires use_beta_sigmoid_in_kernel=True (as fla: beta = "
                         "2 * sigmoid(b)); pass beta in [0, 2) yourself otherwise")
    _check_fla_options(kwargs, False, cp_context, fn=fn, chunk_sizes=chunk_sizes, ignored=ignored)
    if use_gate_in_kernel:
        _lower_bound("lower_bound", lower_bound)
    return 2 if allow_neg_eigval else 1


def _kda_chunk_checks(safe_gate, use_gate_in_kernel, lower_bound, return_intermediate_states, cp_context):
    """chunk_kda's own checks: safe_gate as fla (with the gate in the kernel it
    needs lower_bound in [-5, 0)), and the features cgdr has not."""
    if safe_gate and use_gate_in_kernel:
        if lower_bound is None:
            raise ValueError("lower_bound: required with safe_gate=True and use_gate_in_kernel=True (as fla)")
        if not -5 <= _lower_bound("lower_bound", lower_bound) < 0:
            raise ValueError(f"lower_bound: expected the safe range [-5, 0) with safe_gate=True (as fla), "
                             f"got {lower_bound!r}")
    if return_intermediate_states:
        raise ValueError("return_intermediate_states: not supported by cgdr (fla's per-chunk states for vLLM); "
                         "checkpoint_every=E returns the state after every E tokens instead, got True")
    if cp_context is not None:
        raise ValueError(f"cp_context: not supported by cgdr ({_FLA_UNSUPPORTED['cp_context']}), got {cp_context!r}")


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, safe_gate=False, lower_bound=None, disable_recompute=False,
              return_intermediate_states=False, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
              cp_context=None, use_graph=False, max_num_seqs=None, *, A_log=None, dt_bias=None, state_layout=None,
              threads=None, algo="auto", check_values=False, precision="auto", engine="auto", v_step=0, dk_bucket=0,
              initial_state_indices=None, state_slot_stride=0, checkpoint_every=0, qk_l2norm_eps=1e-6, out=None,
              final_state=None, **fla_kwargs):
    """flash-linear-attention's chunk_kda (Kimi Delta Attention) on the CPU.

    KDA is the gated delta rule with one decay per key channel: for each
    token, S = (I - beta k k^T) Diag(exp(g)) S + beta k v^T, o = scale S^T q,
    g [B, T, HV, K] in log space (docs/SPEC.md 10). The arguments up to
    max_num_seqs are fla's (0.6), in its order, with its defaults; A_log and
    dt_bias (fla reads them from **kwargs) are keywords here.

    q, k: [B, T, H, K]; v: [B, T, HV, V] (HV a multiple of H); beta: [B, T,
    HV]; g: [B, T, HV, K]. Layouts, dtypes, cu_seqlens / cu_seqlens_cpu,
    initial_state ([N, HV, K, V], or [N, HV, V, K] with state_v_first),
    scale, use_qk_l2norm_in_kernel and the return value (o, final_state): as
    chunk_gated_delta_rule. fla asserts a float32 initial_state; cgdr takes
    any of the three float dtypes.

    The gate in the kernel, as fla: use_gate_in_kernel=True means g holds
    the raw gate a and the kernel uses g = -exp(A_log) * softplus(a + dt_bias)
    with A_log [HV] and dt_bias [HV * K] (optional; [HV, K] is read flat);
    with lower_bound (< 0) the bounded gate
    g = lower_bound * sigmoid(exp(A_log) * (a + dt_bias)), where A_log may be
    None (g = lower_bound * sigmoid(a + dt_bias)). lower_bound, A_log and
    dt_bias are ignored without use_gate_in_kernel. safe_gate (fla's Tensor
    Core path for bounded gates) changes nothing in cgdr's numbers; it is
    checked as fla checks it: with use_gate_in_kernel it needs lower_bound in
    [-5, 0). use_beta_sigmoid_in_kernel: beta holds the raw b, the kernel
    uses sigmoid(b); allow_neg_eigval (only with it, as fla): 2 * sigmoid(b),
    computed in FP32 before the call and stored in beta's dtype.

    Accepted and ignored: disable_recompute (a training memory choice: cgdr
    has no backward), use_graph / max_num_seqs (CUDA/NPU graph capture;
    padded zero-length sequences just run), chunk_size (32 or 64, as fla;
    cgdr's plan picks its own) and transpose_state_layout (state_v_first's
    old name). Refused with ValueError naming the argument: cp_context,
    return_intermediate_states (use checkpoint_every for states along the
    sequence), head_first.

    cgdr's keyword-only options (state_layout, threads, algo, check_values,
    precision, engine, v_step, dk_bucket, initial_state_indices,
    state_slot_stride, checkpoint_every, qk_l2norm_eps, out, final_state):
    as chunk_gated_delta_rule; precision and engine apply as for the scalar
    gate, except that with both "auto" KDA runs "fp32" on the vector units
    (docs/SPEC.md 10.4: its AMX tile path is not yet timed).
    """
    layout = _fla_layout(state_v_first, state_layout, fla_kwargs)
    scale2 = _kda_options("chunk_kda", use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound,
                          cp_context, fla_kwargs, (32, 64), _KDA_IGNORED)
    _kda_chunk_checks(safe_gate, use_gate_in_kernel, lower_bound, return_intermediate_states, None)
    return _fla_prefill(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                        layout, cu_seqlens, cu_seqlens_cpu,
                        (use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel), kda=True,
                        lower_bound=lower_bound, beta_scale=scale2, threads=threads, algo=algo,
                        check_values=check_values, precision=precision, engine=engine, v_step=v_step,
                        dk_bucket=dk_bucket, initial_state_indices=initial_state_indices,
                        state_slot_stride=state_slot_stride, checkpoint_every=checkpoint_every,
                        qk_l2norm_eps=qk_l2norm_eps, out=out, final_state=final_state)


# fused_recurrent_kda's serving arguments (fla's fused_recurrent_kda_fwd, vLLM's
# copy of it): what to use instead.
_RECURRENT_UNSUPPORTED = {
    "ssm_state_indices": "for a state pool pass initial_state_indices (one slot per sequence, read and written "
                         "in place); for draft tokens cgdr.recurrent_step with dst_indices",
    "num_accepted_tokens": "speculative decoding's accepted prefix: cgdr.recurrent_step reads the slot you name",
    "inplace_final_state": "initial_state_indices updates the pool in place",
}


def fused_recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None, initial_state=None,
                        output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                        use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, lower_bound=None,
                        state_v_first=False, cu_seqlens=None, *, state_layout=None, threads=None, algo="auto",
                        check_values=False, precision="auto", engine="auto", v_step=0, dk_bucket=0,
                        initial_state_indices=None, state_slot_stride=0, checkpoint_every=0, qk_l2norm_eps=1e-6,
                        out=None, final_state=None, **fla_kwargs):
    """flash-linear-attention's fused_recurrent_kda on the CPU: chunk_kda's
    operator (the same numbers to FP32 rounding: cgdr's plan chooses the
    formulation; algo="recurrent" forces the token-by-token one).

    The arguments up to cu_seqlens are fla's (0.6), in its order, with its
    defaults: shapes, the gate (A_log [HV], dt_bias [HV * K], lower_bound
    read whenever use_gate_in_kernel is set, as fla's kernel does), beta
    sigmoid and allow_neg_eigval as chunk_kda. Returns (o, final_state).
    One difference: with use_gate_in_kernel, no A_log and no lower_bound,
    fla's kernel takes exp(A_log) as e (A_log = 1); cgdr raises ValueError
    naming A_log.

    fla's decode arguments of fused_recurrent_kda_fwd (ssm_state_indices,
    num_accepted_tokens, inplace_final_state), which its public function
    ignores, raise ValueError naming the argument and what to use instead:
    initial_state_indices (a pool, one slot per sequence, updated in place)
    or cgdr.recurrent_step (draft tokens with dst_indices).
    cgdr's keyword-only options: as chunk_kda.
    """
    layout = _fla_layout(state_v_first, state_layout, fla_kwargs)
    for name, instead in _RECURRENT_UNSUPPORTED.items():
        if fla_kwargs.pop(name, None) is not None:
            raise ValueError(f"{name}: not supported by cgdr.fused_recurrent_kda ({instead})")
    scale2 = _kda_options("fused_recurrent_kda", use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                          lower_bound, None, fla_kwargs, None, ())
    return _fla_prefill(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                        layout, cu_seqlens, None, (use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel),
                        kda=True, lower_bound=lower_bound, beta_scale=scale2, threads=threads, algo=algo,
                        check_values=check_values, precision=precision, engine=engine, v_step=v_step,
                        dk_bucket=dk_bucket, initial_state_indices=initial_state_indices,
                        state_slot_stride=state_slot_stride, checkpoint_every=checkpoint_every,
                        qk_l2norm_eps=qk_l2norm_eps, out=out, final_state=final_state)


def chunk_gated_delta_rule_tnd(query, key, value, beta, initial_state, seq_lens, g=None, scale=None,
                               use_qk_l2norm_in_kernel=False, state_layout="vk", threads=None,
                               output_final_state=True, algo="auto", check_values=False, precision="auto",
                               engine="auto", v_step=0, dk_bucket=0, *, a=None, A_log=None, dt_bias=None,
                               use_beta_sigmoid=False, state_indices=None, state_slot_stride=0, checkpoint_every=0,
                               qk_l2norm_eps=1e-6, out=None, final_state=None, gate_lower_bound=None):
    """The operator in its packed form (the seeds' signature, SPEC 2).

    query, key: [T, Nk, Dk]; value: [T, Nv, Dv]; beta: [T, Nv] (these four in
    one dtype: float16, bfloat16 or float32); g: [T, Nv] log decays (<= 0) in
    any of the three dtypes, or None; initial_state: [B, Nv, Dv, Dk]
    (state_layout "vk", the default here) or [B, Nv, Dk, Dv] ("kv"), or None
    for zeros; seq_lens: B >= 1 lengths summing to T (list, numpy or torch
    integers).

    Returns (out, final_state): out [T, Nv, Dv] in query's dtype; final_state in
    initial_state's dtype (query's when None), or None if not output_final_state
    (default True).
    scale, use_qk_l2norm_in_kernel, threads, algo, precision, engine,
    check_values, v_step, dk_bucket, qk_l2norm_eps, and the caller's buffers
    out [T, Nv, Dv] and final_state (not with a pool): as in
    chunk_gated_delta_rule.

    Serving (docs/SPEC.md 6d), keyword-only:
    a [T, Nv], A_log [Nv], dt_bias [Nv] (optional): the gate in the kernel,
      g = -exp(A_log) * softplus(a + dt_bias), instead of g.
    KDA (docs/SPEC.md 10): g or a [T, Nv, Dk] is a per-channel gate (dt_bias
      then [Nv * Dk]); gate_lower_bound (< 0; None: none) makes the gate in
      the kernel lower_bound * sigmoid(exp(A_log) * (a + dt_bias)), A_log
      then optional (chunk_kda's lower_bound).
    use_beta_sigmoid: beta holds the raw b; the kernel uses sigmoid(b).
    state_indices: B ints; initial_state is then a pool [P, Nv, ...] (slots
      state_slot_stride elements apart, 0: dense) read from and, with
      output_final_state, written in place at slot state_indices[b] (negative:
      zeros in, nothing written); final_state returned is the pool itself.
    checkpoint_every > 0: also returns checkpoint_states (f32) [sum over b of
      len_b // checkpoint_every, Nv, ...], the state after every
      checkpoint_every tokens of each sequence: (out, final_state, checkpoints).
    """
    kind = _t.common_kind(query=query, key=key, value=value, beta=beta, g=g, initial_state=initial_state)
    _t.check_rank("query", query, 3, "[T, Nk, Dk]")
    _t.check_rank("value", value, 3, "[T, Nv, Dv]")
    T, _, Dk = query.shape
    Nv, Dv = value.shape[1], value.shape[2]
    lens = _t.int32_vector("seq_lens", seq_lens)
    layout = _layout(state_layout)
    qd = _t.float_dtype_name("query", query)
    slots = _t.int32_vector("state_indices", state_indices) if state_indices is not None else None
    state_dims = (Nv, Dk, Dv) if layout == "kv" else (Nv, Dv, Dk)
    final = None
    _no_final_buffer(final_state, output_final_state, slots is not None)
    if slots is not None:
        if initial_state is None:
            raise ValueError("initial_state: required with state_indices (the pool [P, Nv, ...] read and written)")
        init, final, state_slot_stride = _pool_buffers(initial_state, output_final_state,
                                                       _int_option("state_slot_stride", state_slot_stride, 63))
    else:
        init = _t.contiguous_input("initial_state", initial_state) if initial_state is not None else None
        if output_final_state:
            fdt = _t.float_dtype_name("initial_state", init) if init is not None else qd
            final = _t.output("final_state", final_state, kind, (lens.shape[0],) + state_dims, fdt)
    checkpoints = _checkpoint_buffer(kind, checkpoint_every, lens, state_dims)
    ins = [_t.contiguous_input(n, x) for n, x in (("query", query), ("key", key), ("value", value), ("beta", beta))]
    gc = _t.contiguous_input("g", g) if g is not None else None
    out = _t.output("out", out, kind, (T, Nv, Dv), qd)
    bound = _lower_bound("gate_lower_bound", gate_lower_bound)
    _prefill(*ins, gc, init, lens, out, final, _scale(scale), use_qk_l2norm_in_kernel, layout,
             _threads(threads), _algo(algo), check_values, _precision(precision), _engine(engine), v_step, dk_bucket,
             gate=_gate_inputs(a, A_log, dt_bias, bounded=bound != 0.0), beta_sigmoid=use_beta_sigmoid,
             state_indices=slots, state_slot_stride=state_slot_stride, checkpoint_states=checkpoints,
             checkpoint_every=checkpoint_every, qk_l2norm_eps=qk_l2norm_eps,
             gate_lower_bound=bound)
    return (out, final) if checkpoints is None else (out, final, checkpoints)


def recurrent_step(query, key, value, beta, state_pool, state_indices, g=None, scale=None,
                   use_qk_l2norm_in_kernel=False, state_layout="kv", threads=None, out=None, check_values=False,
                   *, a=None, A_log=None, dt_bias=None, use_beta_sigmoid=False, dst_indices=None,
                   output_states=False, state_slot_stride=0, qk_l2norm_eps=1e-6, gate_lower_bound=None):
    """One decode step: a new token for each of N sequences.

    query, key: [N, Nk, Dk]; value: [N, Nv, Dv]; beta: [N, Nv] (these four in
    one dtype: float16, bfloat16 or float32); g: [N, Nv] log decays in any of
    the three dtypes, or None; state_pool: [P, Nv, Dk, Dv] (state_layout "kv",
    the default) or [P, Nv, Dv, Dk] ("vk"), any of the three float dtypes
    (the math is FP32; a 16-bit pool is rounded once per step, so its error
    grows with the number of steps: docs/decode-state-precision.md),
    contiguous, updated in place; state_indices: N ints, row n uses
    state_pool[state_indices[n]], a negative index skips row n (its output row
    is zeroed). Indices must be < P and distinct; this is checked before
    anything is written.

    out: optional preallocated [N, Nv, Dv] output (query's dtype and kind).
    check_values: False (default); True first scans the inputs and the pool
    rows the step will use, and raises ValueError on a NaN or Inf (or g > 0)
    before anything is written.
    scale, use_qk_l2norm_in_kernel, threads, qk_l2norm_eps: as in chunk_gated_delta_rule.
    Returns out.

    Verify (speculative decoding, docs/SPEC.md 6d): with query, key [N, K,
    Nk, Dk], value [N, K, Nv, Dv], beta, g, a [N, K, Nv] (K <= 16), each
    sequence runs K tokens from slot state_indices[n], read once; out is [N,
    K, Nv, Dv]. dst_indices [N, K]: the state after token j into pool slot
    dst_indices[n][j] (negative: not written); output_states=True instead
    returns (out, states) with states [N * K, Nv, ...] in the pool's dtype;
    with neither, the state after the last token goes back to its slot.
    Bitwise equal to K single steps.
    a [N, (K,) Nv], A_log [Nv], dt_bias [Nv]: the gate in the kernel instead
    of g; use_beta_sigmoid: beta holds the raw b (keyword-only, as the rest).
    KDA (docs/SPEC.md 10): g or a [N, Nv, Dk] ([N, K, Nv, Dk] with a token
    axis) is a per-channel gate, dt_bias then [Nv * Dk]; gate_lower_bound:
    as chunk_gated_delta_rule_tnd's.
    state_slot_stride: elements between pool slots (0: dense).
    """
    kind = _t.common_kind(query=query, key=key, value=value, beta=beta, g=g, state_pool=state_pool, out=out)
    tokens = query.ndim == 4
    _t.check_rank("query", query, 4 if tokens else 3, "[N, K, Nk, Dk]" if tokens else "[N, Nk, Dk]")
    _t.check_rank("value", value, 4 if tokens else 3, "[N, K, Nv, Dv]" if tokens else "[N, Nv, Dv]")
    N = value.shape[0]
    qd = _t.float_dtype_name("query", query)
    pd = _t.float_dtype_name("state_pool", state_pool)
    pool, state_slot_stride = _t.writable_pool("state_pool", state_pool,
                                               _int_option("state_slot_stride", state_slot_stride, 63))
    idx = _t.int32_native("state_indices", state_indices)
    dst = _t.int32_native("dst_indices", dst_indices, ndim=2) if dst_indices is not None else None
    if out is None:
        out = _t.empty(kind, tuple(value.shape), qd)
    else:
        _t.check_writable("out", out)
    states = None
    if output_states:
        K = value.shape[1] if tokens else 1
        states = _t.empty(kind, (N * K,) + tuple(state_pool.shape[1:]), pd)
    ins = [_t.contiguous_input(n, x) for n, x in (("query", query), ("key", key), ("value", value), ("beta", beta))]
    gc = _t.contiguous_input("g", g) if g is not None else None
    bound = _lower_bound("gate_lower_bound", gate_lower_bound)
    gate = _gate_inputs(a, A_log, dt_bias, bounded=bound != 0.0) or (None, None, None)
    _t.check_slot_extent("state_pool", pool, state_slot_stride)
    _decode(*ins, gc, pool, idx, out, gate, dst, states, scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            state_layout=state_layout, threads=threads, check_values=check_values, use_beta_sigmoid=use_beta_sigmoid,
            state_slot_stride=state_slot_stride, qk_l2norm_eps=qk_l2norm_eps, gate_lower_bound=bound)
    return out if states is None else (out, states)


def _decode(query, key, value, beta, g, pool, idx, out, gate, dst, states, *, scale, use_qk_l2norm_in_kernel,
            state_layout, threads, check_values, use_beta_sigmoid, state_slot_stride, qk_l2norm_eps,
            gate_lower_bound=0.0):
    """The native decode call on checked tensors (contiguous, CPU, one kind)
    or on native views already made (cgdr.vllm's, whose shapes drop vLLM's
    leading 1); shapes and values are checked by the C++ validation."""
    names = ("query", "key", "value", "beta", "g", "state_pool", "out", "a", "A_log", "dt_bias", "states")
    views = [_t.native(n, x) for n, x in zip(names, (query, key, value, beta, g, pool, out, *gate, states))]
    _cgdr.decode_step(*views[:6], idx, views[6], _scale(scale), bool(use_qk_l2norm_in_kernel), _layout(state_layout),
                      _threads(threads), bool(check_values), a=views[7], A_log=views[8], dt_bias=views[9],
                      use_beta_sigmoid=bool(use_beta_sigmoid), dst_indices=dst, states=views[10],
                      state_slot_stride=int(state_slot_stride), qk_l2norm_eps=_eps(qk_l2norm_eps),
                      gate_lower_bound=float(gate_lower_bound))
