"""cgdr for vLLM-CPU: drop-ins for its four Gated DeltaNet ops, and the plugin
that swaps them in.

vLLM-CPU's GatedDeltaNet layers (Qwen3-Next, Qwen3.5; vllm/model_executor/
layers/mamba/ops/cpu/gdn_attention.py) call four functions of
`vllm._custom_ops`, looked up at call time. This module has one drop-in per
function, with vLLM's signature, defaults, layouts, dtypes and in-place
effects (vLLM 0.32):

    chunk_gated_delta_rule_cpu(query, key, value, g, beta, initial_state, output_final_state,
        cu_seqlens, head_first, use_qk_l2norm_in_kernel, initial_state_indices, eps=1e-5)
        -> (o [1, T, HV, V] in query's dtype, initial_state)
    fused_sigmoid_gating_delta_rule_update_cpu(A_log, dt_bias, q, k, v, a, b, initial_state_source,
        initial_state_indices, cu_seqlens, use_qk_l2norm_in_kernel, softplus_beta=1.0,
        softplus_threshold=20.0) -> o [N, 1, HV, V]
    fused_sigmoid_gating_delta_rule_update_spec_cpu(A_log, dt_bias, q, k, v, a, b,
        initial_state_source, spec_state_indices, num_accepted_tokens, cu_seqlens,
        use_qk_l2norm_in_kernel, softplus_beta=1.0, softplus_threshold=20.0) -> o [T, HV, V]
    fused_gdn_gating_cpu(A_log, a, b, dt_bias) -> (g [1, N, HV] float32, beta [1, N, HV] in b's dtype)

The state pool is vLLM's `ssm_state`, allocated [slots, HV, V, K] and viewed
[slots, HV, K, V] before the call: the ops read each slot as K rows of V
(cgdr's "kv" layout), in place, with the slots `stride(0)` elements apart
(vLLM keeps other state between them); no slot but those named is touched.
q and k are l2-normalised with eps 1e-5 (the prefill's `eps`), the gate is
g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b) in FP32.

A drop-in raises `Unsupported` (a ValueError) for a call whose meaning cgdr
does not have (head_first, a softplus other than torch's, a decode with more
than one token per row, ...), and ValueError/TypeError for bad input, before
anything is written.

The plugin: `register()` is on the `vllm.general_plugins` entry point, so
vLLM calls it in every process it starts. With CGDR_VLLM=1 in the
environment it replaces the four attributes of `vllm._custom_ops` (once; it
logs which); otherwise it does nothing. If vLLM's functions do not have the
signatures above, it replaces nothing and warns once. A call a drop-in
refuses goes to vLLM's own op (counted; logged once per op).
`call_counts()` reads the counts: {op: {"cgdr": n, "vllm": n}}.
"""
import contextlib
import inspect
import logging
import threading

import torch
import torch.nn.functional as F

import cgdr
from cgdr import _tensors as _t

__all__ = ["chunk_gated_delta_rule_cpu", "fused_sigmoid_gating_delta_rule_update_cpu",
           "fused_sigmoid_gating_delta_rule_update_spec_cpu", "fused_gdn_gating_cpu", "Unsupported", "register",
           "install", "uninstall", "installed", "call_counts", "reset_call_counts"]

# Children of "vllm" reach vLLM's log handler when it is configured.
_log = logging.getLogger("vllm.cgdr")

_VLLM_EPS = 1e-5          # the l2norm eps of vLLM-CPU's decode and verify kernels (and its prefill default)
_SOFTPLUS_BETA = 1.0      # the only softplus cgdr's gate computes: torch's F.softplus defaults
_SOFTPLUS_THRESHOLD = 20.0
_MAX_VERIFY_TOKENS = 16   # cgdr's token axis (docs/SPEC.md 6d)


class Unsupported(ValueError):
    """A call whose meaning cgdr does not implement; the plugin hands it back to vLLM."""


def _threads():
    # vLLM's CPU worker sizes torch's intra-op pool to the cores it binds; use the same.
    return torch.get_num_threads()


def _int32(name, x):
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name}: expected an int32 or int64 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    return x


def _require(cond, message):
    """Unsupported(message()) unless cond (the message is built only when it is raised)."""
    if not cond:
        raise Unsupported(message())


@contextlib.contextmanager
def _vllm_name(indices):
    """cgdr's errors about the slots, in the name vLLM gives them."""
    try:
        yield
    except ValueError as e:
        msg = str(e)
        if msg.startswith("state_indices:"):
            raise ValueError(indices + ":" + msg[len("state_indices:"):]) from None
        raise


def _softplus(softplus_beta, softplus_threshold):
    _require(float(softplus_beta) == _SOFTPLUS_BETA and float(softplus_threshold) == _SOFTPLUS_THRESHOLD,
             lambda: f"softplus_beta={softplus_beta}, softplus_threshold={softplus_threshold}: cgdr's gate is torch's "
             f"softplus (beta {_SOFTPLUS_BETA}, threshold {_SOFTPLUS_THRESHOLD})")


def _beta_like(beta, q):
    """cgdr takes beta in q's dtype; vLLM's gating returns it in b's (the same in vLLM's layers)."""
    _require(beta.dtype == q.dtype, lambda: f"beta: dtype {beta.dtype} differs from the query's {q.dtype}")
    return beta


def chunk_gated_delta_rule_cpu(query, key, value, g, beta, initial_state, output_final_state, cu_seqlens, head_first,
                               use_qk_l2norm_in_kernel, initial_state_indices, eps=1e-5):
    """vLLM's prefill: the sequences packed along T (cu_seqlens), each reading
    and (with output_final_state) writing its slot initial_state_indices[n] of
    the pool initial_state [P, HV, K, V] in place. Returns (o, initial_state)."""
    _require(not head_first, lambda: "head_first=True: vLLM's layout is [1, T, H, D]")
    for name, x in (("query", query), ("key", key), ("value", value)):
        _require(isinstance(x, torch.Tensor) and x.ndim == 4 and x.shape[0] == 1,
                 lambda: f"{name}: expected [1, T, H, D], got {list(getattr(x, 'shape', []))}")
    _require(g.ndim == 3 and beta.ndim == 3,
             lambda: f"g, beta: expected [1, T, HV], got {list(g.shape)}, {list(beta.shape)}")
    _beta_like(beta, query)
    offsets = _int32("cu_seqlens", cu_seqlens)
    slots = _int32("initial_state_indices", initial_state_indices)
    lens = offsets[1:] - offsets[:-1]
    o = _t.advise_huge_pages(torch.empty(query.shape[:2] + value.shape[2:], dtype=query.dtype))
    with _vllm_name("initial_state_indices"):
        cgdr.chunk_gated_delta_rule_tnd(query[0], key[0], value[0], beta[0], initial_state, lens, g=g[0],
                                        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_layout="kv",
                                        threads=_threads(), output_final_state=output_final_state,
                                        state_indices=slots, qk_l2norm_eps=eps, out=o[0])
    return o, initial_state


def fused_sigmoid_gating_delta_rule_update_cpu(A_log, dt_bias, q, k, v, a, b, initial_state_source,
                                               initial_state_indices, cu_seqlens, use_qk_l2norm_in_kernel,
                                               softplus_beta=1.0, softplus_threshold=20.0):
    """vLLM's decode: one token per row (q [1, N, H, K], v [1, N, HV, V],
    a, b [N, HV]), the gate and beta's sigmoid in the kernel, the state of
    row n in slot initial_state_indices[n] updated in place (a negative
    index: row skipped, its output zero). cu_seqlens is not read (vLLM's
    kernel does not read it either). Returns o [N, 1, HV, V]."""
    _softplus(softplus_beta, softplus_threshold)
    for name, x in (("q", q), ("k", k), ("v", v)):
        _require(isinstance(x, torch.Tensor) and x.ndim == 4 and x.shape[0] == 1,
                 lambda: f"{name}: expected [1, N, H, D] (one token per row), got {list(getattr(x, 'shape', []))}")
    # cgdr.recurrent_step's checks, made on vLLM's [1, N, ...] tensors as they
    # are: a view or a copy per tensor costs more than the step at N = 1.
    for name, x in (("a", a), ("b", b), ("A_log", A_log), ("dt_bias", dt_bias),
                    ("initial_state_source", initial_state_source)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch tensor, got {type(x).__name__}")
    N, HV, V = v.shape[1], v.shape[2], v.shape[3]
    ins = [_t.contiguous_input(n, x) for n, x in (("query", q), ("key", k), ("value", v))]
    rows = [_t.native_as(n, x, tuple(x.shape[1:])) for n, x in zip(("query", "key", "value"), ins)]
    pool, stride = _t.writable_pool("state_pool", initial_state_source, 0)
    _t.check_slot_extent("state_pool", pool, stride)
    idx = _t.int32_native("state_indices", _int32("initial_state_indices", initial_state_indices))
    o = torch.empty((N, 1, HV, V), dtype=q.dtype)
    with _vllm_name("initial_state_indices"):
        cgdr._decode(*rows, _t.contiguous_input("beta", b), None, pool, idx, _t.native_as("out", o, (N, HV, V)),
                     cgdr._gate_inputs(a, A_log, dt_bias), None, None, scale=None,
                     use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_layout="kv", threads=_threads(),
                     check_values=False, use_beta_sigmoid=True, state_slot_stride=stride, qk_l2norm_eps=_VLLM_EPS)
    return o


def _verify_rows(spec_state_indices, num_accepted_tokens, cu_seqlens, T):
    """(lengths, K, src, dst) of vLLM's verify: row n runs lengths[n] tokens
    from slot spec[n, max(accepted - 1, 0)], the state after token t into
    slot spec[n, t]; K is the longest row, dst [N, K] is -1 past a row's end
    and a row of no tokens reads nothing (src -1)."""
    spec = _int32("spec_state_indices", spec_state_indices).to(torch.int64)
    accepted = _int32("num_accepted_tokens", num_accepted_tokens).to(torch.int64)
    offsets = _int32("cu_seqlens", cu_seqlens).to(torch.int64)
    _require(spec.ndim == 2 and offsets.ndim == 1 and accepted.shape == (offsets.shape[0] - 1,),
             lambda: f"spec_state_indices [N, S], num_accepted_tokens [N], cu_seqlens [N + 1]: got {list(spec.shape)}, "
             f"{list(accepted.shape)}, {list(offsets.shape)}")
    N = accepted.shape[0]
    _require(spec.shape[0] >= N, lambda: f"spec_state_indices: expected at least N = {N} rows, got {spec.shape[0]}")
    _require(int(offsets[0]) == 0 and int(offsets[-1]) == T,
             lambda: f"cu_seqlens: expected offsets from 0 to T = {T}, got {offsets.tolist()}")
    lengths = offsets[1:] - offsets[:-1]
    K = int(lengths.max()) if N else 0
    _require(N == 0 or (int(lengths.min()) >= 0 and K <= min(_MAX_VERIFY_TOKENS, spec.shape[1])),
             lambda: f"cu_seqlens: row lengths {lengths.tolist()} must lie in [0, min(16, S = {spec.shape[1]})]")
    rows = torch.arange(N)
    src = spec[rows, (accepted - 1).clamp(min=0)]
    src = torch.where(lengths > 0, src, torch.full_like(src, -1))
    cols = torch.arange(K)
    dst = torch.where(cols[None, :] < lengths[:, None], spec[:N, :K], torch.full((N, K), -1, dtype=torch.int64))
    return lengths, K, src.to(torch.int32), dst.to(torch.int32)


def _by_row(x, lengths, K):
    """[T, ...] packed tokens as [N, K, ...]: a view when every row has K
    tokens, else a zero-padded copy (padding runs after a row's tokens, so it
    changes none of their outputs or states)."""
    N = lengths.shape[0]
    if N * K == x.shape[0]:
        return x.reshape((N, K) + tuple(x.shape[1:]))
    padded = x.new_zeros((N, K) + tuple(x.shape[1:]))
    start = 0
    for n, length in enumerate(lengths.tolist()):
        padded[n, :length] = x[start:start + length]
        start += length
    return padded


def fused_sigmoid_gating_delta_rule_update_spec_cpu(A_log, dt_bias, q, k, v, a, b, initial_state_source,
                                                    spec_state_indices, num_accepted_tokens, cu_seqlens,
                                                    use_qk_l2norm_in_kernel, softplus_beta=1.0,
                                                    softplus_threshold=20.0):
    """vLLM's speculative verify: row n's draft tokens (packed along T by
    cu_seqlens; q, k [T, H, K], v [T, HV, V], a, b [T, HV]) run from the
    state in slot spec_state_indices[n, num_accepted_tokens[n] - 1] (slot
    column 0 when none was accepted), and the state after token t goes to slot
    spec_state_indices[n, t]. Returns o [T, HV, V]."""
    _softplus(softplus_beta, softplus_threshold)
    for name, x, rank in (("q", q, 3), ("k", k, 3), ("v", v, 3), ("a", a, 2), ("b", b, 2)):
        _require(isinstance(x, torch.Tensor) and x.ndim == rank, lambda: f"{name}: expected rank {rank}, got "
                 f"{list(getattr(x, 'shape', []))}")
    T = q.shape[0]
    lengths, K, src, dst = _verify_rows(spec_state_indices, num_accepted_tokens, cu_seqlens, T)
    o = torch.empty(tuple(v.shape), dtype=q.dtype)
    if K == 0:
        return o
    ragged = lengths.shape[0] * K != T
    out = torch.empty((lengths.shape[0], K) + tuple(v.shape[1:]), dtype=q.dtype) if ragged else o.view(
        (lengths.shape[0], K) + tuple(v.shape[1:]))
    with _vllm_name("spec_state_indices"):
        cgdr.recurrent_step(*(_by_row(x, lengths, K) for x in (q, k, v, b)), initial_state_source, src,
                            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_layout="kv", threads=_threads(),
                            out=out, a=_by_row(a, lengths, K), A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid=True,
                            dst_indices=dst, qk_l2norm_eps=_VLLM_EPS)
    if ragged:
        start = 0
        for n, length in enumerate(lengths.tolist()):
            o[start:start + length] = out[n, :length]
            start += length
    return o


def fused_gdn_gating_cpu(A_log, a, b, dt_bias):
    """vLLM's gating: g = -exp(A_log) * softplus(a + dt_bias) (float32) and
    beta = sigmoid(b) (b's dtype), each [1, N, HV], computed in FP32."""
    _require(a.ndim == 2 and b.shape == a.shape and A_log.shape == (a.shape[1],) and dt_bias.shape == A_log.shape,
             lambda: f"a, b [N, HV], A_log, dt_bias [HV]: got {list(a.shape)}, {list(b.shape)}, {list(A_log.shape)}, "
             f"{list(dt_bias.shape)}")
    g = -torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float(), beta=_SOFTPLUS_BETA,
                                                threshold=_SOFTPLUS_THRESHOLD)
    beta = torch.sigmoid(b.float()).to(b.dtype)
    return g.unsqueeze(0), beta.unsqueeze(0)


# ---- the plugin ---------------------------------------------------------------

_DROP_INS = {f.__name__: f for f in (chunk_gated_delta_rule_cpu, fused_sigmoid_gating_delta_rule_update_cpu,
                                     fused_sigmoid_gating_delta_rule_update_spec_cpu, fused_gdn_gating_cpu)}

_lock = threading.Lock()
_counts = {name: {"cgdr": 0, "vllm": 0} for name in _DROP_INS}
_logged_fallback = set()
_installed = {}       # name -> vLLM's own function, while the drop-ins are in
_warned = set()


def call_counts():
    """{op: {"cgdr": calls served by cgdr, "vllm": calls handed back to vLLM's op}} in this process."""
    with _lock:
        return {name: dict(c) for name, c in _counts.items()}


def reset_call_counts():
    with _lock:
        for c in _counts.values():
            c["cgdr"] = c["vllm"] = 0


def installed():
    """The names of the ops the drop-ins replace now (empty when not installed)."""
    return sorted(_installed)


def _parameters(fn):
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]


def _mismatches(ops):
    """The ops of `ops` whose signature differs from the drop-in's (or that are missing)."""
    bad = []
    for name, drop_in in _DROP_INS.items():
        theirs = getattr(ops, name, None)
        try:
            same = theirs is not None and _parameters(theirs) == _parameters(drop_in)
        except (TypeError, ValueError):
            same = False
        if not same:
            bad.append(name)
    return bad


def _warn_once(key, message, *args):
    if key not in _warned:
        _warned.add(key)
        _log.warning(message, *args)


def _dispatcher(name, drop_in, theirs):
    def call(*args, **kwargs):
        try:
            result = drop_in(*args, **kwargs)
        except (ValueError, TypeError) as refused:  # raised before anything was written
            with _lock:
                _counts[name]["vllm"] += 1
                first = name not in _logged_fallback
                _logged_fallback.add(name)
            if first:
                _log.info("cgdr: %s handed back to vLLM's own op (%s); further hand-backs are counted, not logged",
                          name, refused)
            return theirs(*args, **kwargs)
        with _lock:
            _counts[name]["cgdr"] += 1
        return result

    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = drop_in.__doc__
    call.__signature__ = inspect.signature(drop_in)
    call.__wrapped_vllm__ = theirs
    return call


def install(ops=None):
    """Puts the drop-ins into `ops` (default: vllm._custom_ops), each calling
    vLLM's own op for what it refuses. Replaces nothing, warns once and
    returns [] if any op is missing or has another signature. Returns the
    names replaced (all four, or [] if they were already in)."""
    if ops is None:
        import vllm._custom_ops as ops
    if _installed:
        return []
    bad = _mismatches(ops)
    if bad:
        _warn_once("signatures", "cgdr: vLLM's %s do(es) not have the signatures cgdr's drop-ins know (vLLM 0.32); "
                   "nothing replaced, vLLM's own ops serve", ", ".join(bad))
        return []
    for name, drop_in in _DROP_INS.items():
        theirs = getattr(ops, name)
        _installed[name] = (ops, theirs)
        setattr(ops, name, _dispatcher(name, drop_in, theirs))
    _log.info("cgdr %s (%s): serving vLLM's %s", cgdr.__version__, cgdr.active_target(), ", ".join(_DROP_INS))
    return list(_DROP_INS)


def uninstall():
    """Puts vLLM's own ops back."""
    for name, (ops, theirs) in list(_installed.items()):
        setattr(ops, name, theirs)
        del _installed[name]


def register():
    """The vllm.general_plugins entry point: installs the drop-ins when
    CGDR_VLLM=1, does nothing otherwise. Never raises: a failure leaves vLLM's
    own ops in place and is logged (a CGDR_VLLM other than 0 or 1 too)."""
    try:
        if not _t.env_switch("CGDR_VLLM", False):
            return
        install()
    except Exception as e:  # noqa: BLE001 - a plugin must never break the serving process
        _warn_once("install", "cgdr: not installed into vLLM (%s: %s); vLLM's own ops serve", type(e).__name__, e)
