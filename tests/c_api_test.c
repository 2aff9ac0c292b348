/* Drives the C API from C (compiled as C, not C++): a prefill, decode steps
 * that continue it, and the error paths (status, message, nothing written). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgdr/cgdr.h"

static int g_failures = 0;

#define CHECK(cond, ...)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                     \
      fprintf(stderr, "\n");                                            \
      ++g_failures;                                                     \
    }                                                                   \
  } while (0)

enum { NK = 1, NV = 2, DK = 5, DV = 3, T = 4, B = 1 };

static cgdr_tensor Tensor(void* data, cgdr_dtype dtype, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  cgdr_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.rank = rank;
  t.shape[0] = d0;
  t.shape[1] = d1;
  t.shape[2] = d2;
  t.shape[3] = d3;
  return t;
}

/* Deterministic, well-conditioned inputs: small values, beta in (0,1), g < 0. */
static float Val(int i, float scale) { return scale * (float)sin(0.7 * i + 0.3); }

static float q[T][NK][DK], k[T][NK][DK], v[T][NV][DV], beta[T][NV], g[T][NV];
static float out_prefill[T][NV][DV], state_prefill[B][NV][DV][DK];
static float init_state[B][NV][DV][DK];

static void FillInputs(void) {
  int i = 0;
  for (int t = 0; t < T; ++t) {
    for (int d = 0; d < DK; ++d) { q[t][0][d] = Val(i++, 0.4f); k[t][0][d] = Val(i++, 0.4f); }
    for (int h = 0; h < NV; ++h) {
      for (int d = 0; d < DV; ++d) v[t][h][d] = Val(i++, 1.0f);
      beta[t][h] = 0.5f + 0.4f * Val(i++, 1.0f);
      g[t][h] = -0.1f - 0.1f * fabsf(Val(i++, 1.0f));
    }
  }
  for (int h = 0; h < NV; ++h)
    for (int a = 0; a < DV; ++a)
      for (int b = 0; b < DK; ++b) init_state[0][h][a][b] = Val(i++, 0.3f);
}

static void TestPrefillThenDecode(void) {
  int32_t seq_lens[B] = {T - 1};  /* prefill all but the last token */
  cgdr_prefill_args pa;
  memset(&pa, 0, sizeof pa);
  pa.query = Tensor(q, CGDR_F32, 3, T - 1, NK, DK, 0);
  pa.key = Tensor(k, CGDR_F32, 3, T - 1, NK, DK, 0);
  pa.value = Tensor(v, CGDR_F32, 3, T - 1, NV, DV, 0);
  pa.beta = Tensor(beta, CGDR_F32, 2, T - 1, NV, 0, 0);
  pa.g = Tensor(g, CGDR_F32, 2, T - 1, NV, 0, 0);
  pa.initial_state = Tensor(init_state, CGDR_F32, 4, B, NV, DV, DK);
  pa.seq_lens = Tensor(seq_lens, CGDR_I32, 1, B, 0, 0, 0);
  pa.out = Tensor(out_prefill, CGDR_F32, 3, T - 1, NV, DV, 0);
  pa.final_state = Tensor(state_prefill, CGDR_F32, 4, B, NV, DV, DK);

  cgdr_options* opt = NULL;
  CHECK(cgdr_options_create(&opt) == CGDR_OK, "%s", cgdr_last_error());
  CHECK(cgdr_options_set_threads(opt, 2) == CGDR_OK, "%s", cgdr_last_error());
  CHECK(cgdr_options_set_state_layout(opt, CGDR_LAYOUT_VK) == CGDR_OK, "%s", cgdr_last_error());
  cgdr_status s = cgdr_prefill(&pa, opt);
  CHECK(s == CGDR_OK, "prefill: %s", cgdr_last_error());
  CHECK(strcmp(cgdr_last_error(), "") == 0, "message after success: %s", cgdr_last_error());

  /* The last token as a decode step on a pool of 3 states, ours in row 2. */
  static float pool[3][NV][DV][DK];
  memset(pool, 0, sizeof pool);
  memcpy(pool[2], state_prefill[0], sizeof state_prefill[0]);
  int32_t idx[1] = {2};
  float out_step[1][NV][DV];
  cgdr_decode_args da;
  memset(&da, 0, sizeof da);
  da.query = Tensor(q[T - 1], CGDR_F32, 3, 1, NK, DK, 0);
  da.key = Tensor(k[T - 1], CGDR_F32, 3, 1, NK, DK, 0);
  da.value = Tensor(v[T - 1], CGDR_F32, 3, 1, NV, DV, 0);
  da.beta = Tensor(beta[T - 1], CGDR_F32, 2, 1, NV, 0, 0);
  da.g = Tensor(g[T - 1], CGDR_F32, 2, 1, NV, 0, 0);
  da.state_pool = Tensor(pool, CGDR_F32, 4, 3, NV, DV, DK);
  da.state_indices = Tensor(idx, CGDR_I32, 1, 1, 0, 0, 0);
  da.out = Tensor(out_step, CGDR_F32, 3, 1, NV, DV, 0);
  s = cgdr_decode_step(&da, opt);
  CHECK(s == CGDR_OK, "decode: %s", cgdr_last_error());

  /* Compare with a prefill of all T tokens. */
  static float out_full[T][NV][DV], state_full[B][NV][DV][DK];
  seq_lens[0] = T;
  pa.query.shape[0] = pa.key.shape[0] = pa.value.shape[0] = pa.beta.shape[0] = pa.g.shape[0] = T;
  pa.out = Tensor(out_full, CGDR_F32, 3, T, NV, DV, 0);
  pa.final_state = Tensor(state_full, CGDR_F32, 4, B, NV, DV, DK);
  s = cgdr_prefill(&pa, NULL); /* NULL options: defaults (layout vk) */
  CHECK(s == CGDR_OK, "full prefill: %s", cgdr_last_error());
  for (int h = 0; h < NV; ++h) {
    for (int j = 0; j < DV; ++j) {
      CHECK(fabsf(out_step[0][h][j] - out_full[T - 1][h][j]) < 1e-5f, "out[%d][%d]: %g vs %g", h, j,
            out_step[0][h][j], out_full[T - 1][h][j]);
      for (int i = 0; i < DK; ++i)
        CHECK(fabsf(pool[2][h][j][i] - state_full[0][h][j][i]) < 1e-5f, "state[%d][%d][%d]", h, j, i);
    }
  }
  for (size_t i = 0; i < sizeof pool[0] / sizeof(float); ++i) CHECK(((float*)pool[0])[i] == 0.0f, "pool row 0 touched");
  cgdr_options_destroy(opt);
}

/* The bf16x3 mode through the C API: close to the fp32 result (compensated
 * products: about fp32's own error), not bitwise equal to it. */
static void TestPrecisionMode(void) {
  int32_t seq_lens[B] = {T};
  static float out_fp32[T][NV][DV], out_x3[T][NV][DV];
  cgdr_prefill_args pa;
  memset(&pa, 0, sizeof pa);
  pa.query = Tensor(q, CGDR_F32, 3, T, NK, DK, 0);
  pa.key = Tensor(k, CGDR_F32, 3, T, NK, DK, 0);
  pa.value = Tensor(v, CGDR_F32, 3, T, NV, DV, 0);
  pa.beta = Tensor(beta, CGDR_F32, 2, T, NV, 0, 0);
  pa.g = Tensor(g, CGDR_F32, 2, T, NV, 0, 0);
  pa.seq_lens = Tensor(seq_lens, CGDR_I32, 1, B, 0, 0, 0);
  cgdr_options* opt = NULL;
  CHECK(cgdr_options_create(&opt) == CGDR_OK, "%s", cgdr_last_error());
  CHECK(cgdr_options_set_chunk(opt, 16) == CGDR_OK, "%s", cgdr_last_error());
  pa.out = Tensor(out_fp32, CGDR_F32, 3, T, NV, DV, 0);
  CHECK(cgdr_prefill(&pa, opt) == CGDR_OK, "fp32: %s", cgdr_last_error());
  CHECK(cgdr_options_set_precision(opt, CGDR_PRECISION_BF16X3) == CGDR_OK, "%s", cgdr_last_error());
  pa.out = Tensor(out_x3, CGDR_F32, 3, T, NV, DV, 0);
  CHECK(cgdr_prefill(&pa, opt) == CGDR_OK, "bf16x3: %s", cgdr_last_error());
  float max_diff = 0.0f;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NV; ++h)
      for (int j = 0; j < DV; ++j) max_diff = fmaxf(max_diff, fabsf(out_x3[t][h][j] - out_fp32[t][h][j]));
  CHECK(max_diff < 1e-4f, "bf16x3 vs fp32: max |diff| %g", max_diff);
  cgdr_options_destroy(opt);
}

static void TestErrors(void) {
  static float pool[2][NV][DV][DK];
  float out_step[2][NV][DV];
  int32_t idx[2] = {1, 1}; /* duplicate */
  cgdr_decode_args da;
  memset(&da, 0, sizeof da);
  da.query = Tensor(q, CGDR_F32, 3, 2, NK, DK, 0);
  da.key = Tensor(k, CGDR_F32, 3, 2, NK, DK, 0);
  da.value = Tensor(v, CGDR_F32, 3, 2, NV, DV, 0);
  da.beta = Tensor(beta, CGDR_F32, 2, 2, NV, 0, 0);
  da.state_pool = Tensor(pool, CGDR_F32, 4, 2, NV, DV, DK);
  da.state_indices = Tensor(idx, CGDR_I32, 1, 2, 0, 0, 0);
  da.out = Tensor(out_step, CGDR_F32, 3, 2, NV, DV, 0);
  memset(out_step, 0x7f, sizeof out_step);
  for (size_t i = 0; i < sizeof pool / sizeof(float); ++i) ((float*)pool)[i] = 1.0f;

  cgdr_status s = cgdr_decode_step(&da, NULL);
  CHECK(s == CGDR_INVALID_ARGUMENT, "duplicate indices: got %s", cgdr_status_name(s));
  CHECK(strstr(cgdr_last_error(), "state_indices: expected distinct") != NULL, "message: %s", cgdr_last_error());
  idx[1] = 2; /* out of range */
  s = cgdr_decode_step(&da, NULL);
  CHECK(s == CGDR_INVALID_ARGUMENT, "index out of range: got %s", cgdr_status_name(s));
  CHECK(strstr(cgdr_last_error(), "expected indices < P = 2") != NULL, "message: %s", cgdr_last_error());
  for (size_t i = 0; i < sizeof pool / sizeof(float); ++i) CHECK(((float*)pool)[i] == 1.0f, "pool written on error");
  unsigned char expect_out[sizeof out_step];
  memset(expect_out, 0x7f, sizeof expect_out);
  CHECK(memcmp(out_step, expect_out, sizeof out_step) == 0, "out written on error");

  idx[1] = 0;
  da.value.dtype = (cgdr_dtype)42;
  s = cgdr_decode_step(&da, NULL);
  CHECK(s == CGDR_INVALID_ARGUMENT && strstr(cgdr_last_error(), "value: unknown dtype enum value 42"), "%s",
        cgdr_last_error());
  da.value.dtype = CGDR_F32;
  da.key.rank = 7;
  s = cgdr_decode_step(&da, NULL);
  CHECK(s == CGDR_INVALID_ARGUMENT && strstr(cgdr_last_error(), "key: expected rank 0..4, got 7"), "%s", cgdr_last_error());

  cgdr_prefill_args pa;
  memset(&pa, 0, sizeof pa); /* everything missing */
  s = cgdr_prefill(&pa, NULL);
  CHECK(s == CGDR_INVALID_ARGUMENT && strstr(cgdr_last_error(), "query: required tensor is missing"), "%s",
        cgdr_last_error());
  CHECK(cgdr_prefill(NULL, NULL) == CGDR_INVALID_ARGUMENT, "NULL args");
  CHECK(cgdr_options_set_threads(NULL, 1) == CGDR_INVALID_ARGUMENT, "NULL handle");
  CHECK(strstr(cgdr_last_error(), "options handle is NULL") != NULL, "%s", cgdr_last_error());

  cgdr_options* opt = NULL;
  CHECK(cgdr_options_create(&opt) == CGDR_OK, "create");
  CHECK(cgdr_options_set_chunk(opt, 7) == CGDR_INVALID_ARGUMENT, "chunk 7 accepted");
  CHECK(cgdr_options_set_state_layout(opt, (cgdr_state_layout)5) == CGDR_INVALID_ARGUMENT, "layout 5 accepted");
  CHECK(cgdr_options_set_threads(opt, -3) == CGDR_INVALID_ARGUMENT, "threads -3 accepted");
  CHECK(cgdr_options_set_chunk(opt, 64) == CGDR_OK, "chunk 64");
  CHECK(cgdr_options_set_qk_l2norm(opt, 1) == CGDR_OK, "l2norm");
  CHECK(cgdr_options_set_scale(opt, 0.25) == CGDR_OK, "scale");
  CHECK(cgdr_options_set_check_values(opt, 1) == CGDR_OK, "check_values");
  CHECK(cgdr_options_set_precision(opt, CGDR_PRECISION_BF16X3) == CGDR_OK, "precision bf16x3");
  CHECK(cgdr_options_set_v_step(opt, 300) == CGDR_INVALID_ARGUMENT, "v_step 300 accepted");
  CHECK(cgdr_options_set_dk_bucket(opt, 72) == CGDR_INVALID_ARGUMENT, "dk_bucket 72 accepted");
  CHECK(cgdr_options_set_v_step(opt, 32) == CGDR_OK && cgdr_options_set_dk_bucket(opt, -1) == CGDR_OK, "%s",
        cgdr_last_error());
  CHECK(cgdr_options_set_precision(opt, (cgdr_precision)9) == CGDR_INVALID_ARGUMENT &&
            strstr(cgdr_last_error(), "got 9") != NULL,
        "precision 9: %s", cgdr_last_error());
  CHECK(cgdr_options_set_precision(opt, CGDR_PRECISION_AUTO) == CGDR_OK, "precision auto");
  CHECK(cgdr_options_set_engine(opt, CGDR_ENGINE_AMX_EMULATED) == CGDR_OK, "engine amx_emulated");
  CHECK(cgdr_options_set_engine(opt, (cgdr_engine)4) == CGDR_INVALID_ARGUMENT &&
            strstr(cgdr_last_error(), "cgdr_options_set_engine") != NULL && strstr(cgdr_last_error(), "got 4") != NULL,
        "engine 4: %s", cgdr_last_error());
  CHECK(cgdr_options_set_engine(NULL, CGDR_ENGINE_AUTO) == CGDR_INVALID_ARGUMENT, "engine on a NULL handle");
  cgdr_options_destroy(opt);
  cgdr_options_destroy(NULL);
  CHECK(strcmp(cgdr_status_name(CGDR_RESOURCE_EXHAUSTED), "resource_exhausted") == 0, "status name");
}

/* KDA (API version 6): a per-channel gate g [T,Nv,Dk] through cgdr_prefill
 * equals the same run token by token in C (the FP64-free check: the
 * recurrence S = (I - beta k k^T) Diag(exp(g)) S + beta k v^T by hand, in
 * float); the raw gate a [T,Nv,Dk] with dt_bias [Nv*Dk] and a lower bound
 * equals g computed by hand; and the new option's errors name it. */
static float g_kda[T][NV][DK];

static void ReferenceKda(const float (*gate)[NV][DK], float o[T][NV][DV]) {
  static float S[NV][DV][DK];
  memset(S, 0, sizeof S);
  const float scale = 1.0f / sqrtf((float)DK);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < NV; ++h) {
      for (int j = 0; j < DV; ++j) {
        float pred = 0.0f;
        for (int i = 0; i < DK; ++i) {
          S[h][j][i] *= expf(gate[t][h][i]);
          pred += S[h][j][i] * k[t][0][i];
        }
        const float u = beta[t][h] * (v[t][h][j] - pred);
        float acc = 0.0f;
        for (int i = 0; i < DK; ++i) {
          S[h][j][i] += k[t][0][i] * u;
          acc += S[h][j][i] * q[t][0][i];
        }
        o[t][h][j] = scale * acc;
      }
    }
  }
}

static void TestPerChannelGate(void) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NV; ++h)
      for (int i = 0; i < DK; ++i) g_kda[t][h][i] = -0.05f - 0.4f * fabsf(Val(7 * t + 3 * h + i, 1.0f));
  int32_t seq_lens[B] = {T};
  static float out_kda[T][NV][DV], out_ref[T][NV][DV], out_raw[T][NV][DV];
  cgdr_prefill_args pa;
  memset(&pa, 0, sizeof pa);
  pa.query = Tensor(q, CGDR_F32, 3, T, NK, DK, 0);
  pa.key = Tensor(k, CGDR_F32, 3, T, NK, DK, 0);
  pa.value = Tensor(v, CGDR_F32, 3, T, NV, DV, 0);
  pa.beta = Tensor(beta, CGDR_F32, 2, T, NV, 0, 0);
  pa.g = Tensor(g_kda, CGDR_F32, 3, T, NV, DK, 0);
  pa.seq_lens = Tensor(seq_lens, CGDR_I32, 1, B, 0, 0, 0);
  pa.out = Tensor(out_kda, CGDR_F32, 3, T, NV, DV, 0);
  cgdr_options* opt = NULL;
  CHECK(cgdr_options_create(&opt) == CGDR_OK, "%s", cgdr_last_error());
  CHECK(cgdr_options_set_chunk(opt, 1) == CGDR_OK, "%s", cgdr_last_error());
  cgdr_status s = cgdr_prefill(&pa, opt);
  CHECK(s == CGDR_OK, "per-channel prefill: %s", cgdr_last_error());
  ReferenceKda((const float (*)[NV][DK])g_kda, out_ref);
  float max_diff = 0.0f;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NV; ++h)
      for (int j = 0; j < DV; ++j) max_diff = fmaxf(max_diff, fabsf(out_kda[t][h][j] - out_ref[t][h][j]));
  CHECK(max_diff < 1e-5f, "per-channel g vs the recurrence by hand: max |diff| %g", max_diff);

  /* The raw gate with a lower bound: g = lb * sigmoid(exp(A_log) * (a + dt_bias)). */
  static float a_raw[T][NV][DK], dt_bias[NV * DK], gate[T][NV][DK];
  float A_log[NV] = {-0.3f, 0.2f};
  const double lb = -2.5;
  for (int h = 0; h < NV; ++h)
    for (int i = 0; i < DK; ++i) dt_bias[h * DK + i] = 0.1f * Val(h * DK + i, 1.0f);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NV; ++h)
      for (int i = 0; i < DK; ++i) {
        a_raw[t][h][i] = Val(11 * t + 5 * h + i, 2.0f);
        const double x = exp((double)A_log[h]) * ((double)a_raw[t][h][i] + (double)dt_bias[h * DK + i]);
        gate[t][h][i] = (float)(lb / (1.0 + exp(-x)));
      }
  cgdr_prefill_extra pe;
  memset(&pe, 0, sizeof pe);
  pe.a = Tensor(a_raw, CGDR_F32, 3, T, NV, DK, 0);
  pe.A_log = Tensor(A_log, CGDR_F32, 1, NV, 0, 0, 0);
  pe.dt_bias = Tensor(dt_bias, CGDR_F32, 1, NV * DK, 0, 0, 0);
  pa.g = Tensor(NULL, CGDR_F32, 0, 0, 0, 0, 0);
  pa.out = Tensor(out_raw, CGDR_F32, 3, T, NV, DV, 0);
  CHECK(cgdr_options_set_gate_lower_bound(opt, lb) == CGDR_OK, "%s", cgdr_last_error());
  s = cgdr_prefill_ex(&pa, &pe, opt);
  CHECK(s == CGDR_OK, "per-channel raw gate: %s", cgdr_last_error());
  ReferenceKda((const float (*)[NV][DK])gate, out_ref);
  max_diff = 0.0f;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NV; ++h)
      for (int j = 0; j < DV; ++j) max_diff = fmaxf(max_diff, fabsf(out_raw[t][h][j] - out_ref[t][h][j]));
  CHECK(max_diff < 1e-5f, "bounded raw gate vs g by hand: max |diff| %g", max_diff);

  /* Errors: a bound > 0, dt_bias [Nv] with a per-channel a, a bound with g. */
  memset(out_raw, 0x7f, sizeof out_raw);
  CHECK(cgdr_options_set_gate_lower_bound(opt, 0.5) == CGDR_OK, "the setter leaves the range to the call");
  s = cgdr_prefill_ex(&pa, &pe, opt);
  CHECK(s == CGDR_INVALID_ARGUMENT && strstr(cgdr_last_error(), "options.gate_lower_bound") != NULL, "bound 0.5: %s",
        cgdr_last_error());
  CHECK(cgdr_options_set_gate_lower_bound(opt, lb) == CGDR_OK, "%s", cgdr_last_error());
  pe.dt_bias.shape[0] = NV;
  s = cgdr_prefill_ex(&pa, &pe, opt);
  CHECK(s == CGDR_INVALID_ARGUMENT && strstr(cgdr_last_error(), "dt_bias") != NULL &&
            strstr(cgdr_last_error(), "Nv * Dk") != NULL,
        "dt_bias [Nv]: %s", cgdr_last_error());
  pe.dt_bias.shape[0] = NV * DK;
  s = cgdr_prefill(&pa, opt); /* the bound without the raw gate (g absent too) */
  CHECK(s == CGDR_INVALID_ARGUMENT && strstr(cgdr_last_error(), "options.gate_lower_bound") != NULL, "bound alone: %s",
        cgdr_last_error());
  unsigned char expect_out[sizeof out_raw];
  memset(expect_out, 0x7f, sizeof expect_out);
  CHECK(memcmp(out_raw, expect_out, sizeof out_raw) == 0, "out written on error");
  CHECK(cgdr_options_set_gate_lower_bound(NULL, -1.0) == CGDR_INVALID_ARGUMENT &&
            strstr(cgdr_last_error(), "cgdr_options_set_gate_lower_bound") != NULL,
        "NULL handle: %s", cgdr_last_error());
  cgdr_options_destroy(opt);
}

/* The library's version is the headers' (version.h, the one place it is written). */
static void TestVersion(void) {
  char expect[32];
  snprintf(expect, sizeof expect, "%d.%d.%d", CGDR_VERSION_MAJOR, CGDR_VERSION_MINOR, CGDR_VERSION_PATCH);
  CHECK(strcmp(CGDR_VERSION_STRING, expect) == 0, "CGDR_VERSION_STRING %s, expected %s", CGDR_VERSION_STRING, expect);
  CHECK(strcmp(cgdr_version(), expect) == 0, "cgdr_version() %s, expected %s", cgdr_version(), expect);
  CHECK(cgdr_api_version() == CGDR_API_VERSION, "cgdr_api_version() %d, expected %d", cgdr_api_version(),
        CGDR_API_VERSION);
  CHECK(CGDR_API_VERSION >= 6, "CGDR_API_VERSION %d: cgdr_options_set_gate_lower_bound came with 6", CGDR_API_VERSION);
  CHECK(CGDR_API_VERSION >= 7, "CGDR_API_VERSION %d: cgdr_cpu_description came with 7", CGDR_API_VERSION);
  /* Names the CPU with its family and model, e.g. "AMD EPYC, Zen 5 (family 26 model 2)". */
  const char* cpu = cgdr_cpu_description();
  CHECK(cpu != NULL && cpu[0] != '\0', "cgdr_cpu_description() is empty");
#if defined(__x86_64__) || defined(__i386__)
  CHECK(strstr(cpu, " (family ") != NULL, "cgdr_cpu_description() \"%s\" gives no family", cpu);
#endif
}

int main(void) {
  FillInputs();
  printf("cgdr %s, SIMD target %s on %s\n", cgdr_version(), cgdr_simd_target(), cgdr_cpu_description());
  TestVersion();
  TestPrefillThenDecode();
  TestPrecisionMode();
  TestErrors();
  TestPerChannelGate();
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
