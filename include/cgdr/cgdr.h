/* cgdr C API: the chunk gated delta rule operator (SPEC 1-3) and its decode
 * step (SPEC 6b) for C and for any language or engine with a C FFI.
 *
 * Tensors are plain descriptors (pointer, dtype, rank, shape) of dense
 * row-major memory owned by the caller. Options live behind an opaque handle.
 * Every call returns a cgdr_status; on failure, cgdr_last_error() returns a
 * message naming the tensor and the expected and actual values. Nothing is
 * written to any output before the inputs have been checked. No C++ exception
 * ever crosses this boundary.
 *
 * Thread safety: calls may run concurrently on different threads; an options
 * handle may be shared read-only between concurrent calls. The error message
 * is per thread.
 *
 * Compatibility. Within one major version (one SONAME, libcgdr.so.MAJOR) this
 * API only grows: functions, enum values and options are added, none is
 * removed or changes meaning, and the structs below keep their layout.
 * Options live behind the opaque handle and are set through functions, so a
 * new option starts at the old behaviour and an old caller gets what it got.
 * CGDR_API_VERSION counts the additions; a program built against API version
 * N runs with any library of the same major version whose cgdr_api_version()
 * is at least N.
 *   1 (0.1.0): prefill, decode step, options scale .. precision.
 *   2 (0.1.0): cgdr_options_set_v_step, cgdr_options_set_dk_bucket,
 *              cgdr_api_version.
 *   3 (0.1.0): CGDR_PRECISION_AUTO (the default from then on: the fastest
 *              mode whose error meets SPEC 6, so the bits of a call may
 *              change, its accuracy contract not), cgdr_engine and
 *              cgdr_options_set_engine.
 *   4 (0.1.0): serving (docs/SPEC.md 6d): cgdr_prefill_ex with
 *              cgdr_prefill_extra (the gate in the kernel, state pools,
 *              checkpoints), cgdr_decode_ex with cgdr_decode_extra (the gate,
 *              a token axis with per-token states), and the options
 *              checkpoint_every, state_slot_stride, beta_sigmoid.
 *   5 (0.1.0): cgdr_options_set_qk_l2norm_eps (vLLM-CPU's ops normalise
 *              q and k with eps 1e-5, fla and transformers with 1e-6).
 *   6 (0.1.0): KDA (Kimi Delta Attention, docs/SPEC.md 10): a per-channel
 *              gate, g or a of rank 3 [T,Nv,Dk] (decode: [N,Nv,Dk] or
 *              [N,K,Nv,Dk]) with dt_bias [Nv*Dk]; no new struct field, the
 *              rank of the tensor says it. cgdr_options_set_gate_lower_bound
 *              (fla's KDA gate with a lower bound).
 *   7 (0.1.0): cgdr_cpu_description (the CPU beside a caller's figures). */
#ifndef CGDR_CGDR_H_
#define CGDR_CGDR_H_

#include <stdint.h>

#include "cgdr/export.h"
#include "cgdr/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CGDR_API_VERSION 7

typedef enum cgdr_status {
  CGDR_OK = 0,
  CGDR_INVALID_ARGUMENT = 1,   /* bad shape, dtype, pointer, index or option */
  CGDR_RESOURCE_EXHAUSTED = 2, /* out of memory */
  CGDR_INTERNAL = 3            /* a bug: please report the message */
} cgdr_status;

typedef enum cgdr_dtype { CGDR_F16 = 0, CGDR_BF16 = 1, CGDR_F32 = 2, CGDR_I32 = 3 } cgdr_dtype;

typedef enum cgdr_state_layout {
  CGDR_LAYOUT_VK = 0, /* [B, Nv, Dv, Dk] (the seeds' layout, the C++ default) */
  CGDR_LAYOUT_KV = 1  /* [B, Nv, Dk, Dv] (flash-linear-attention's) */
} cgdr_state_layout;

/* Arithmetic of the chunked products (cgdr::Precision; the state stays FP32;
 * docs/SPEC.md 6c). auto (default): the fastest mode whose error meets SPEC
 * 6 for the call's dtype (bf16x3 on AMX for f16/bf16 inputs, else fp32).
 * fp32: FP32 FMA on the vector units. The bf16 modes round or split the
 * operands to bf16. C = 1 keeps FP32 products, and the plan (chunk 0: auto)
 * picks it where the mode's chunked products are slower; set a chunk size
 * for the mode's products. */
typedef enum cgdr_precision {
  CGDR_PRECISION_FP32 = 0,
  CGDR_PRECISION_BF16 = 1,
  CGDR_PRECISION_BF16X3 = 2,
  CGDR_PRECISION_BF16X4 = 3,
  CGDR_PRECISION_AUTO = 4
} cgdr_precision;

/* Where the bf16 modes' products run (cgdr::Engine; docs/SPEC.md 6c). auto
 * (default): AMX tiles where the CPU and OS allow them, else the vector
 * units; vector; amx (falls back to the vector units where AMX is not
 * usable); amx_emulated: TDPBF16PS emulated in portable code (tests). */
typedef enum cgdr_engine {
  CGDR_ENGINE_AUTO = 0,
  CGDR_ENGINE_VECTOR = 1,
  CGDR_ENGINE_AMX = 2,
  CGDR_ENGINE_AMX_EMULATED = 3
} cgdr_engine;

#define CGDR_MAX_RANK 4

/* A dense row-major tensor. data == NULL marks an absent optional tensor. */
typedef struct cgdr_tensor {
  void* data;
  cgdr_dtype dtype;
  int32_t rank;
  int64_t shape[CGDR_MAX_RANK];
} cgdr_tensor;

/* Prefill (SPEC 2): query/key [T,Nk,Dk], value [T,Nv,Dv], beta [T,Nv],
 * g [T,Nv] (optional), initial_state [B,Nv,Dv,Dk] or kv (optional),
 * seq_lens [B] int32; out [T,Nv,Dv], final_state (optional).
 * KDA (docs/SPEC.md 10, API version 6): g [T,Nv,Dk] (rank 3) is one
 * log-decay per key channel, S = (I - beta k k^T) Diag(exp(g_t)) S + beta k v^T. */
typedef struct cgdr_prefill_args {
  cgdr_tensor query, key, value, beta, g, initial_state, seq_lens;
  cgdr_tensor out, final_state;
} cgdr_prefill_args;

/* Decode (SPEC 6b): query/key [N,Nk,Dk], value [N,Nv,Dv], beta [N,Nv],
 * g [N,Nv] (optional; KDA's per-channel g: [N,Nv,Dk]), state_pool [P,Nv,Dv,Dk] or kv (updated in place),
 * state_indices [N] int32 (negative: skip the row, its out row is zeroed);
 * out [N,Nv,Dv]. */
typedef struct cgdr_decode_args {
  cgdr_tensor query, key, value, beta, g, state_pool, state_indices;
  cgdr_tensor out;
} cgdr_decode_args;

/* The serving tensors of a prefill (docs/SPEC.md 6d); zero-initialise and set
 * the ones you use (data == NULL: absent).
 *   a [T,Nv], A_log [Nv], dt_bias [Nv] (optional): g = -exp(A_log) *
 *     softplus(a + dt_bias) in the kernel, instead of args->g. KDA (API
 *     version 6): a [T,Nv,Dk] (rank 3) gives a per-channel g, with dt_bias
 *     [Nv*Dk] (A_log stays [Nv]); with cgdr_options_set_gate_lower_bound the
 *     gate is lower_bound * sigmoid(exp(A_log) * (a + dt_bias)) and A_log
 *     may be absent (then sigmoid(a + dt_bias)).
 *   state_indices [B] int32: args->initial_state / final_state are pools
 *     [P,Nv,...]; sequence b reads and writes slot state_indices[b]
 *     (negative: zeros in, no final state), in place when they are the same
 *     tensor; slots cgdr_options_set_state_slot_stride apart.
 *   checkpoint_states [sum over b of floor(len_b / every), Nv, ...] (f32 or
 *     the state's dtype): the state after every `checkpoint_every` tokens of
 *     each sequence (cgdr_options_set_checkpoint_every). */
typedef struct cgdr_prefill_extra {
  cgdr_tensor a, A_log, dt_bias;
  cgdr_tensor state_indices;
  cgdr_tensor checkpoint_states;
} cgdr_prefill_extra;

/* The serving tensors of a decode step (docs/SPEC.md 6d); zero-initialise.
 * With query [N,K,Nk,Dk] (a token axis: value [N,K,Nv,Dv], beta/g/a
 * [N,K,Nv], out [N,K,Nv,Dv], K <= 16) each sequence runs K tokens from slot
 * state_indices[n], read once:
 *   dst_indices [N,K] int32: the state after token j into pool slot
 *     dst_indices[n,j] (negative: not written);
 *   states [N*K,Nv,...] (the pool's dtype): or into row n*K+j of this dense
 *     output; with neither, the state after the last token into slot
 *     state_indices[n]. Bitwise equal to K single steps.
 *   a, A_log, dt_bias: the gate, as for prefill (KDA: a [N,Nv,Dk] or
 *     [N,K,Nv,Dk], dt_bias [Nv*Dk]). */
typedef struct cgdr_decode_extra {
  cgdr_tensor a, A_log, dt_bias;
  cgdr_tensor dst_indices;
  cgdr_tensor states;
} cgdr_decode_extra;

/* Opaque options. A NULL options pointer means all defaults: scale 1/sqrt(Dk),
 * no q/k l2norm, layout vk, all CPUs the process may use, no value checks. */
typedef struct cgdr_options cgdr_options;

CGDR_EXPORT cgdr_status cgdr_options_create(cgdr_options** out);
CGDR_EXPORT void cgdr_options_destroy(cgdr_options* opt); /* NULL is a no-op */
CGDR_EXPORT cgdr_status cgdr_options_set_scale(cgdr_options* opt, double scale); /* 0: 1/sqrt(Dk) */
CGDR_EXPORT cgdr_status cgdr_options_set_qk_l2norm(cgdr_options* opt, int enable);
CGDR_EXPORT cgdr_status cgdr_options_set_state_layout(cgdr_options* opt, cgdr_state_layout layout);
CGDR_EXPORT cgdr_status cgdr_options_set_threads(cgdr_options* opt, int threads); /* 0: all the process may use */
CGDR_EXPORT cgdr_status cgdr_options_set_check_values(cgdr_options* opt, int enable);
/* Chunk size: 0 = auto (the plan decides), 1 = token by token, 16/32/64/128. */
CGDR_EXPORT cgdr_status cgdr_options_set_chunk(cgdr_options* opt, int chunk);
CGDR_EXPORT cgdr_status cgdr_options_set_precision(cgdr_options* opt, cgdr_precision precision); /* default auto */
CGDR_EXPORT cgdr_status cgdr_options_set_engine(cgdr_options* opt, cgdr_engine engine);         /* default auto */
/* V tile width of the kernel: 0 = the plan decides (default), else 1..256. For
 * tests and tuning; results are bitwise the same for any width. */
CGDR_EXPORT cgdr_status cgdr_options_set_v_step(cgdr_options* opt, int v_step);
/* Dk bucket of the kernel: 0 = the plan decides (default); 64, 80, 96 or 128
 * (at least Dk, checked by the call) force that bucket; -1 the generic path. */
CGDR_EXPORT cgdr_status cgdr_options_set_dk_bucket(cgdr_options* opt, int dk_bucket);
/* Serving (docs/SPEC.md 6d). checkpoint_every: 0 (default, none) or the tokens
 * between prefill checkpoints (cgdr_prefill_extra.checkpoint_states). */
CGDR_EXPORT cgdr_status cgdr_options_set_checkpoint_every(cgdr_options* opt, int64_t checkpoint_every);
/* Elements from one slot (first index) of a state tensor or pool to the next:
 * 0 (default) dense, else at least Nv * Dk * Dv (checked by the call). */
CGDR_EXPORT cgdr_status cgdr_options_set_state_slot_stride(cgdr_options* opt, int64_t stride);
/* enable != 0: beta = sigmoid(the beta tensor), which holds the raw b. */
CGDR_EXPORT cgdr_status cgdr_options_set_beta_sigmoid(cgdr_options* opt, int enable);
/* The eps of qk_l2norm: rows are divided by sqrt(sum x^2 + eps); 1e-6
 * (default) or any finite eps > 0 (checked by the call). */
CGDR_EXPORT cgdr_status cgdr_options_set_qk_l2norm_eps(cgdr_options* opt, double eps);
/* The gate in the kernel with a lower bound (API version 6; fla's KDA gate,
 * docs/SPEC.md 10): 0 (default) none, g = -exp(A_log) * softplus(a +
 * dt_bias); else a finite bound < 0 (checked by the call, which also needs
 * the raw gate a) and g = bound * sigmoid(exp(A_log) * (a + dt_bias)), so
 * bound < g < 0. Prefill and decode alike. */
CGDR_EXPORT cgdr_status cgdr_options_set_gate_lower_bound(cgdr_options* opt, double lower_bound);

/* Runs the prefill operator over the packed sequences of `args`. */
CGDR_EXPORT cgdr_status cgdr_prefill(const cgdr_prefill_args* args, const cgdr_options* opt);

/* One decode step: updates the referenced pool states in place, writes out. */
CGDR_EXPORT cgdr_status cgdr_decode_step(const cgdr_decode_args* args, const cgdr_options* opt);

/* cgdr_prefill and cgdr_decode_step with the serving tensors (extra == NULL:
 * none, the plain calls). */
CGDR_EXPORT cgdr_status cgdr_prefill_ex(const cgdr_prefill_args* args, const cgdr_prefill_extra* extra,
                                        const cgdr_options* opt);
CGDR_EXPORT cgdr_status cgdr_decode_ex(const cgdr_decode_args* args, const cgdr_decode_extra* extra,
                                       const cgdr_options* opt);

/* The message of the last failed call on this thread ("" after a success).
 * Valid until the next cgdr call on this thread. */
CGDR_EXPORT const char* cgdr_last_error(void);

/* "ok", "invalid_argument", "resource_exhausted", "internal" or "unknown". */
CGDR_EXPORT const char* cgdr_status_name(cgdr_status status);

/* The version of the library that runs ("0.1.0": CGDR_VERSION_STRING of the
 * headers it was built with), its CGDR_API_VERSION, and the active SIMD
 * target ("AVX3", "AVX2", ...). */
CGDR_EXPORT const char* cgdr_version(void);
CGDR_EXPORT int cgdr_api_version(void);
CGDR_EXPORT const char* cgdr_simd_target(void);

/* The CPU the library runs on, for a figure's caption: CPUID's brand string,
 * AMD's core generation where its family and model say it, and both
 * numbers, e.g. "AMD EPYC, Zen 5 (family 26 model 2)" (a VM's brand string
 * can be the same on Zen 3, 4 and 5). Valid until the next call on this
 * thread. API version 7. */
CGDR_EXPORT const char* cgdr_cpu_description(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CGDR_CGDR_H_ */
