#include "golden/emulate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/l2norm.h"
#include "core/threads.h"
#include "golden/emulate_simd.h"
#include "golden/golden.h"

namespace cgdr::golden {
namespace {

constexpr int64_t kChunk = 64;  // the NPU's chunk size (seeds 000 s.5.10: the Cube paths need chunkLen == 64)

// A row-major matrix in FP32.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  void Resize(int64_t r, int64_t c) {
    rows = r;
    cols = c;
    v.assign(static_cast<size_t>(r * c), 0.0f);
  }
  float* row(int64_t i) { return v.data() + i * cols; }
  const float* row(int64_t i) const { return v.data() + i * cols; }
  float& at(int64_t i, int64_t j) { return v[static_cast<size_t>(i * cols + j)]; }
};

// The Cube's view of an operand: every element rounded to the profile's format.
void Rounded(const Mat& x, bool f16, Mat* out) {
  out->rows = x.rows;
  out->cols = x.cols;
  out->v = x.v;
  RoundTo16(out->v.data(), static_cast<int64_t>(out->v.size()), f16);
}

// Rounded and transposed (the Cube reads K^T and Kdec^T as its A or B operand).
void RoundedTransposed(const Mat& x, bool f16, Mat* out) {
  out->Resize(x.cols, x.rows);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) out->at(j, i) = x.v[static_cast<size_t>(i * x.cols + j)];
  RoundTo16(out->v.data(), static_cast<int64_t>(out->v.size()), f16);
}

// C = A B on rounded operands (a Cube product).
void Product(const Mat& a, const Mat& b, Mat* c) {
  c->Resize(a.rows, b.cols);
  GemmRounded(a.v.data(), a.cols, b.v.data(), b.cols, c->v.data(), c->cols, a.rows, b.cols, a.cols, false);
}

// A = (I + L)^-1 for strictly lower L, by forward substitution in FP32 (the
// seeds' vector-unit recurrence and compensated Cube blocks are FP32-accurate):
// row i is -sum_k L[i][k] A[k][:] over k < i, each element's terms in k order.
void UnitLowerInverse(const Mat& L, Mat* A) {
  const int64_t n = L.rows;
  A->Resize(n, n);
  for (int64_t i = 0; i < n; ++i) {
    float* ai = A->row(i);
    for (int64_t k = 0; k < i; ++k) {
      const float l = L.v[static_cast<size_t>(i * n + k)];
      const float* ak = A->row(k);
      for (int64_t j = 0; j <= k; ++j) ai[j] += l * ak[j];  // A[k][j] = 0 for j > k
    }
    for (int64_t j = 0; j < i; ++j) ai[j] = -ai[j];
    ai[i] = 1.0f;
  }
}

// Per-thread working set of one chunk.
struct Work {
  Mat S, K, Q, V, Kb, Kd, Vb, Kdec;                                 // FP32 (vector unit)
  Mat rK, rKt, rKb, rKd, rVb, rQ, rA, rS, rKcd, rP, rVnew, rKdecT;  // Cube operands
  Mat KKt, L, A, Kcd, U, QKt, W, QS, O, Upd, decay;
  std::vector<float> beta, g, G, eG;
};

struct ItemRef {
  const Inputs* in;
  const Problem* p;
  const Outputs* out;
  bool f16;  // operands rounded to f16, else bf16
  int64_t b, h, t0, len;
};

// Rows of one chunk into FP32: K, Q (normalised if asked), V, beta, g.
void LoadChunk(const ItemRef& it, int64_t c0, int64_t n, Work* w) {
  const Problem& p = *it.p;
  const int64_t hk = it.h / (p.Nv / p.Nk);
  w->K.Resize(n, p.Dk);
  w->Q.Resize(n, p.Dk);
  w->V.Resize(n, p.Dv);
  w->beta.assign(n, 0.0f);
  w->g.assign(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = it.t0 + c0 + i;
    LoadRowAsF32(it.in->key.data, p.dtype, (t * p.Nk + hk) * p.Dk, p.Dk, w->K.row(i));
    LoadRowAsF32(it.in->query.data, p.dtype, (t * p.Nk + hk) * p.Dk, p.Dk, w->Q.row(i));
    if (p.options.use_qk_l2norm) {
      L2NormalizeRow(w->K.row(i), p.Dk, p.options.qk_l2norm_eps);
      L2NormalizeRow(w->Q.row(i), p.Dk, p.options.qk_l2norm_eps);
    }
    LoadRowAsF32(it.in->value.data, p.dtype, (t * p.Nv + it.h) * p.Dv, p.Dv, w->V.row(i));
    w->beta[i] = LoadAsF32(it.in->beta.data, p.dtype, t * p.Nv + it.h);
    if (p.has_g) w->g[i] = LoadAsF32(it.in->g.data, p.g_dtype, t * p.Nv + it.h);
  }
}

// Row i of x times f[i], into y (vector unit, FP32).
void ScaleRows(const Mat& x, const std::vector<float>& f, Mat* y) {
  y->Resize(x.rows, x.cols);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) y->at(i, j) = x.v[static_cast<size_t>(i * x.cols + j)] * f[i];
}

// One chunk of SPEC 4 on the state in w->S; writes the chunk's out rows.
void Chunk(const ItemRef& it, int64_t c0, int64_t n, Work* w) {
  const Problem& p = *it.p;
  const bool R = it.f16;
  const float scale = static_cast<float>(p.scale);
  LoadChunk(it, c0, n, w);
  // 1. G = cumsum(g) in the chunk; e^G.
  w->G.assign(n, 0.0f);
  w->eG.assign(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    w->G[i] = (i ? w->G[i - 1] : 0.0f) + w->g[i];
    w->eG[i] = std::exp(w->G[i]);
  }
  // 2-3. L = strictly_lower((Kb K^T) * e^(G_i - G_j)), A = (I + L)^-1.
  ScaleRows(w->K, w->beta, &w->Kb);
  Rounded(w->Kb, R, &w->rKb);
  RoundedTransposed(w->K, R, &w->rKt);
  Product(w->rKb, w->rKt, &w->KKt);
  w->L.Resize(n, n);
  w->decay.Resize(n, n);  // e^(G_i - G_j), j <= i: the masks' decays, shared by L and P
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) w->decay.at(i, j) = std::exp(w->G[i] - w->G[j]);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < i; ++j) w->L.at(i, j) = w->KKt.at(i, j) * w->decay.at(i, j);
  UnitLowerInverse(w->L, &w->A);
  Rounded(w->A, R, &w->rA);
  // 4. Kcd = A diag(e^G) Kb; U = A Vb.
  ScaleRows(w->Kb, w->eG, &w->Kd);
  Rounded(w->Kd, R, &w->rKd);
  Product(w->rA, w->rKd, &w->Kcd);
  ScaleRows(w->V, w->beta, &w->Vb);
  Rounded(w->Vb, R, &w->rVb);
  Product(w->rA, w->rVb, &w->U);
  // 5. P = lower_incl_diag((Q K^T) * e^(G_i - G_j)) * scale.
  Rounded(w->Q, R, &w->rQ);
  Product(w->rQ, w->rKt, &w->QKt);
  w->L.Resize(n, n);  // reused as P in FP32
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) w->L.at(i, j) = w->QKt.at(i, j) * w->decay.at(i, j) * scale;
  Rounded(w->L, R, &w->rP);
  // 6. Vnew = U - Kcd S; O = scale diag(e^G) Q S + P Vnew.
  Rounded(w->S, R, &w->rS);
  Rounded(w->Kcd, R, &w->rKcd);
  Product(w->rKcd, w->rS, &w->W);
  for (size_t i = 0; i < w->U.v.size(); ++i) w->U.v[i] -= w->W.v[i];  // U now holds Vnew
  Rounded(w->U, R, &w->rVnew);
  Product(w->rQ, w->rS, &w->QS);
  Product(w->rP, w->rVnew, &w->O);
  for (int64_t i = 0; i < n; ++i) {
    const float f = scale * w->eG[i];
    const int64_t t = it.t0 + c0 + i;
    for (int64_t d = 0; d < p.Dv; ++d) {
      const float o = w->O.at(i, d) + f * w->QS.at(i, d);
      StoreFromF32(it.out->out.data, p.dtype, (t * p.Nv + it.h) * p.Dv + d, o);
    }
  }
  // 7. S = e^(G_last) S + (diag(e^(G_last - G)) K)^T Vnew.
  std::vector<float>& decay = w->g;  // reused: e^(G_last - G_i)
  for (int64_t i = 0; i < n; ++i) decay[i] = std::exp(w->G[n - 1] - w->G[i]);
  ScaleRows(w->K, decay, &w->Kdec);
  RoundedTransposed(w->Kdec, R, &w->rKdecT);
  Product(w->rKdecT, w->rVnew, &w->Upd);
  const float last = w->eG[n - 1];
  for (size_t i = 0; i < w->S.v.size(); ++i) w->S.v[i] = last * w->S.v[i] + w->Upd.v[i];
}

// S [Dk x Dv] from / to the state tensors in either layout.
int64_t StateIndex(const Problem& p, int64_t b, int64_t h, int64_t k, int64_t v) {
  const bool kv = p.options.state_layout == StateLayout::kKV;
  return (b * p.Nv + h) * p.Dk * p.Dv + (kv ? k * p.Dv + v : v * p.Dk + k);
}

void RunItem(const ItemRef& it, Work* w) {
  const Problem& p = *it.p;
  w->S.Resize(p.Dk, p.Dv);
  if (p.has_initial_state) {
    for (int64_t k = 0; k < p.Dk; ++k)
      for (int64_t v = 0; v < p.Dv; ++v)
        w->S.at(k, v) = LoadAsF32(it.in->initial_state.data, p.state_dtype, StateIndex(p, it.b, it.h, k, v));
  }
  for (int64_t c0 = 0; c0 < it.len; c0 += kChunk) Chunk(it, c0, std::min(kChunk, it.len - c0), w);
  if (!it.out->final_state.present()) return;
  for (int64_t k = 0; k < p.Dk; ++k)
    for (int64_t v = 0; v < p.Dv; ++v)
      StoreFromF32(it.out->final_state.data, p.state_dtype, StateIndex(p, it.b, it.h, k, v), w->S.at(k, v));
}

}  // namespace

Status Emulate(const Inputs& in, const Problem& p, Operands operands, const Outputs& out) {
  const bool f16 = operands == Operands::kF16;
  std::vector<ItemRef> items;
  int64_t t0 = 0;
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t h = 0; h < p.Nv; ++h) items.push_back({&in, &p, &out, f16, b, h, t0, p.seq_lens[b]});
    t0 += p.seq_lens[b];
  }
  const int64_t n = static_cast<int64_t>(items.size());
#pragma omp parallel num_threads(ResolveThreadCount(p.options.threads))
  {
    Work w;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) RunItem(items[i], &w);
  }
  return Status::Ok();
}

}  // namespace cgdr::golden
