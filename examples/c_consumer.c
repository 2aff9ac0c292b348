/* A C program using cgdr through its C API (cgdr/cgdr.h): one prefill over
 * two packed sequences, then one decode step for each of them on a pool of
 * states, both checked against the FP64 recurrence (reference.h).
 *
 * Against an installed cgdr (docs/library.md, "Install and link"; -lm for the FP64
 * reference's own exp and sqrt):
 *   cc c_consumer.c $(pkg-config --cflags --libs cgdr) -lm -o c_consumer         # libcgdr.so
 *   cc c_consumer.c $(pkg-config --cflags --libs cgdr-static) -lm -o c_consumer  # libcgdr.a */
#include <stdio.h>
#include <string.h>

#include <cgdr/cgdr.h>

#include "reference.h"

/* Two sequences of 3 and 2 tokens packed along T; 2 value heads share 1 key head. */
enum { B = 2, T = 5, NK = 1, NV = 2, DK = 4, DV = 3, POOL = 3 };
static const int32_t kLens[B] = {3, 2};

static float q[T][NK][DK], k[T][NK][DK], v[T][NV][DV], beta[T][NV], g[T][NV], h0[B][NV][DV][DK];
static float out[T][NV][DV], state[B][NV][DV][DK];
static double want_out[T][NV][DV], want_state[B][NV][DV][DK];

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

#define CHECK_OK(call)                                                                     \
  do {                                                                                     \
    cgdr_status status_ = (call);                                                          \
    if (status_ != CGDR_OK) {                                                              \
      fprintf(stderr, "%s: %s: %s\n", #call, cgdr_status_name(status_), cgdr_last_error()); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

static int Prefill(const cgdr_options* opt) {
  int32_t lens[B];
  memcpy(lens, kLens, sizeof lens);
  cgdr_prefill_args a;
  memset(&a, 0, sizeof a); /* absent optional tensors: data == NULL */
  a.query = Tensor(q, CGDR_F32, 3, T, NK, DK, 0);
  a.key = Tensor(k, CGDR_F32, 3, T, NK, DK, 0);
  a.value = Tensor(v, CGDR_F32, 3, T, NV, DV, 0);
  a.beta = Tensor(beta, CGDR_F32, 2, T, NV, 0, 0);
  a.g = Tensor(g, CGDR_F32, 2, T, NV, 0, 0);
  a.initial_state = Tensor(h0, CGDR_F32, 4, B, NV, DV, DK);
  a.seq_lens = Tensor(lens, CGDR_I32, 1, B, 0, 0, 0);
  a.out = Tensor(out, CGDR_F32, 3, T, NV, DV, 0);
  a.final_state = Tensor(state, CGDR_F32, 4, B, NV, DV, DK);
  CHECK_OK(cgdr_prefill(&a, opt));

  const example_case c = {B, T, NK, NV, DK, DV, kLens, &q[0][0][0], &k[0][0][0], &v[0][0][0],
                          &beta[0][0], &g[0][0], &h0[0][0][0][0], 1.0 / sqrt(DK)};
  reference_run(&c, &want_out[0][0][0], &want_state[0][0][0][0]);
  return example_close("prefill out", &out[0][0][0], &want_out[0][0][0], T * NV * DV) &&
                 example_close("prefill final_state", &state[0][0][0][0], &want_state[0][0][0][0], B * NV * DV * DK)
             ? 0
             : 1;
}

/* One more token for each sequence; their states live in a pool (sequence 0
 * in row 2, sequence 1 in row 0), updated in place. */
static int Decode(const cgdr_options* opt) {
  static float pool[POOL][NV][DV][DK], q1[B][NK][DK], k1[B][NK][DK], v1[B][NV][DV], beta1[B][NV], g1[B][NV];
  static float out1[B][NV][DV];
  static double want_out1[B][NV][DV], want_state1[B][NV][DV][DK];
  int32_t rows[B] = {2, 0};
  memcpy(pool[2], state[0], sizeof state[0]);
  memcpy(pool[0], state[1], sizeof state[1]);
  example_fill(&q1[0][0][0], B * NK * DK, 11, 0.5f);
  example_fill(&k1[0][0][0], B * NK * DK, 12, 0.5f);
  example_fill(&v1[0][0][0], B * NV * DV, 13, 1.0f);
  example_fill_gates(&beta1[0][0], &g1[0][0], B * NV);

  cgdr_decode_args d;
  memset(&d, 0, sizeof d);
  d.query = Tensor(q1, CGDR_F32, 3, B, NK, DK, 0);
  d.key = Tensor(k1, CGDR_F32, 3, B, NK, DK, 0);
  d.value = Tensor(v1, CGDR_F32, 3, B, NV, DV, 0);
  d.beta = Tensor(beta1, CGDR_F32, 2, B, NV, 0, 0);
  d.g = Tensor(g1, CGDR_F32, 2, B, NV, 0, 0);
  d.state_pool = Tensor(pool, CGDR_F32, 4, POOL, NV, DV, DK);
  d.state_indices = Tensor(rows, CGDR_I32, 1, B, 0, 0, 0);
  d.out = Tensor(out1, CGDR_F32, 3, B, NV, DV, 0);
  CHECK_OK(cgdr_decode_step(&d, opt));

  /* Bad input: an error naming the tensor, and nothing written. */
  rows[1] = 2;
  if (cgdr_decode_step(&d, opt) != CGDR_INVALID_ARGUMENT || strstr(cgdr_last_error(), "state_indices") == NULL) {
    fprintf(stderr, "duplicate state indices were not rejected\n");
    return 1;
  }

  static const int32_t one_each[B] = {1, 1};
  const example_case c = {B, B, NK, NV, DK, DV, one_each, &q1[0][0][0], &k1[0][0][0], &v1[0][0][0],
                          &beta1[0][0], &g1[0][0], &state[0][0][0][0], 1.0 / sqrt(DK)};
  reference_run(&c, &want_out1[0][0][0], &want_state1[0][0][0][0]);
  return example_close("decode out", &out1[0][0][0], &want_out1[0][0][0], B * NV * DV) &&
                 example_close("decode state 0", &pool[2][0][0][0], &want_state1[0][0][0][0], NV * DV * DK) &&
                 example_close("decode state 1", &pool[0][0][0][0], &want_state1[1][0][0][0], NV * DV * DK)
             ? 0
             : 1;
}

int main(void) {
  /* The library that runs must have everything this program was compiled against. */
  if (cgdr_api_version() < CGDR_API_VERSION) {
    fprintf(stderr, "libcgdr %s has API version %d; this program needs %d\n", cgdr_version(), cgdr_api_version(),
            CGDR_API_VERSION);
    return 1;
  }
  printf("cgdr %s (API version %d, headers %s), SIMD target %s on %s\n", cgdr_version(), cgdr_api_version(),
         CGDR_VERSION_STRING, cgdr_simd_target(), cgdr_cpu_description());

  example_fill(&q[0][0][0], T * NK * DK, 1, 0.5f);
  example_fill(&k[0][0][0], T * NK * DK, 2, 0.5f);
  example_fill(&v[0][0][0], T * NV * DV, 3, 1.0f);
  example_fill_gates(&beta[0][0], &g[0][0], T * NV);
  example_fill(&h0[0][0][0][0], B * NV * DV * DK, 4, 0.2f);

  cgdr_options* opt = NULL; /* NULL would mean: all defaults */
  CHECK_OK(cgdr_options_create(&opt));
  CHECK_OK(cgdr_options_set_threads(opt, 2));
  const int failed = Prefill(opt) || Decode(opt);
  cgdr_options_destroy(opt);
  if (failed) return 1;
  printf("c_consumer: prefill and decode match the FP64 recurrence\n");
  return 0;
}
