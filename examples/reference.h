/* What the examples check cgdr against: the definition of the operator (the
 * recurrence of SPEC 1) written out plainly in FP64, and the small inputs
 * both examples use. C and C++. */
#ifndef CGDR_EXAMPLES_REFERENCE_H_
#define CGDR_EXAMPLES_REFERENCE_H_

#include <math.h>
#include <stdint.h>
#include <stdio.h>

/* One call's inputs, packed along T (row-major): q, k [T, Nk, Dk]; v [T, Nv, Dv];
 * beta, g [T, Nv]; h0 [B, Nv, Dv, Dk] or NULL (zero states); lens [B]. */
typedef struct example_case {
  int B, T, Nk, Nv, Dk, Dv;
  const int32_t* lens;
  const float *q, *k, *v, *beta, *g, *h0;
  double scale;
} example_case;

/* For each sequence b and value head h, with key head hk = h / (Nv / Nk) and
 * S (Dv x Dk) starting at h0[b, h]:
 *   for each token t of b:  S = exp(g[t,h]) S;  u = v[t,h] - S k[t,hk];
 *                           S = S + beta[t,h] u k[t,hk]^T;  out[t,h] = scale S q[t,hk]
 *   state[b, h] = S
 * out [T, Nv, Dv], state [B, Nv, Dv, Dk]. */
static inline void reference_run(const example_case* c, double* out, double* state) {
  int t0 = 0;
  for (int b = 0; b < c->B; ++b) {
    for (int h = 0; h < c->Nv; ++h) {
      const int hk = h / (c->Nv / c->Nk);
      double* S = state + (b * c->Nv + h) * c->Dv * c->Dk;
      for (int i = 0; i < c->Dv * c->Dk; ++i) S[i] = c->h0 ? c->h0[(b * c->Nv + h) * c->Dv * c->Dk + i] : 0.0;
      for (int t = t0; t < t0 + c->lens[b]; ++t) {
        const float* q = c->q + (t * c->Nk + hk) * c->Dk;
        const float* k = c->k + (t * c->Nk + hk) * c->Dk;
        const double decay = exp((double)c->g[t * c->Nv + h]);
        const double beta = c->beta[t * c->Nv + h];
        for (int j = 0; j < c->Dv; ++j) { /* row j of S: one value column */
          double* s = S + j * c->Dk;
          double sk = 0.0, sq = 0.0;
          for (int i = 0; i < c->Dk; ++i) s[i] *= decay;
          for (int i = 0; i < c->Dk; ++i) sk += s[i] * k[i];
          const double u = c->v[(t * c->Nv + h) * c->Dv + j] - sk;
          for (int i = 0; i < c->Dk; ++i) s[i] += beta * u * k[i];
          for (int i = 0; i < c->Dk; ++i) sq += s[i] * q[i];
          out[(t * c->Nv + h) * c->Dv + j] = c->scale * sq;
        }
      }
    }
    t0 += c->lens[b];
  }
}

/* Small, smooth values: scale * sin(...), different for each seed. */
static inline void example_fill(float* x, int n, int seed, float scale) {
  for (int i = 0; i < n; ++i) x[i] = scale * (float)sin(0.37 * (i + 1) + 1.3 * seed);
}

/* Fills beta in (0.1, 0.9) and g in [-0.3, -0.1] (decays below 1). */
static inline void example_fill_gates(float* beta, float* g, int n) {
  example_fill(beta, n, 7, 0.4f);
  example_fill(g, n, 8, 0.1f);
  for (int i = 0; i < n; ++i) {
    beta[i] += 0.5f;
    g[i] -= 0.2f;
  }
}

/* 1 when every got[i] is within 1e-5 + 1e-5 |want[i]| of want[i] (FP32
 * arithmetic against FP64); else prints the worst element and returns 0. */
static inline int example_close(const char* what, const float* got, const double* want, int n) {
  int worst = 0;
  double worst_excess = -1.0;
  for (int i = 0; i < n; ++i) {
    const double excess = fabs(got[i] - want[i]) - (1e-5 + 1e-5 * fabs(want[i]));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst_excess <= 0.0) return 1;
  fprintf(stderr, "%s[%d]: got %.9g, expected %.9g\n", what, worst, got[worst], want[worst]);
  return 0;
}

#endif /* CGDR_EXAMPLES_REFERENCE_H_ */
