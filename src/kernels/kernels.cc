// TEMPORARY scalar stand-in so the tree links while the Highway kernel is written.
#include "kernels/kernels.h"

#include <cmath>
#include <vector>

#include "core/dtype.h"

namespace cgdr {

int64_t CompiledTargets() { return 0; }
std::string ActiveTarget() { return "SCALAR-STUB"; }

Status Execute(const Plan& plan, const Inputs& in, const Outputs& outs) {
  const Problem& p = plan.problem;
  const int64_t Dk = p.Dk, Dv = p.Dv, group = p.Nv / p.Nk;
  const bool kv = p.options.state_layout == StateLayout::kKV;
  std::vector<float> S(Dk * Dv), q(Dk), k(Dk);
  for (const WorkItem& it : plan.items) {
    const int64_t b = it.seq, h = it.head, hk = h / group, sbase = (b * p.Nv + h) * Dk * Dv;
    for (int64_t i = 0; i < Dk; ++i)
      for (int64_t j = 0; j < Dv; ++j)
        S[i * Dv + j] = in.initial_state.present() ? LoadAsF32(in.initial_state.data, in.initial_state.dtype, sbase + (kv ? i * Dv + j : j * Dk + i)) : 0.f;
    for (int64_t t = it.token_begin; t < it.token_begin + it.tokens; ++t) {
      float nq = 0, nk = 0;
      for (int64_t i = 0; i < Dk; ++i) {
        q[i] = LoadAsF32(in.query.data, in.query.dtype, (t * p.Nk + hk) * Dk + i);
        k[i] = LoadAsF32(in.key.data, in.key.dtype, (t * p.Nk + hk) * Dk + i);
        nq += q[i] * q[i]; nk += k[i] * k[i];
      }
      if (p.options.use_qk_l2norm) for (int64_t i = 0; i < Dk; ++i) { q[i] /= std::sqrt(nq + 1e-6f); k[i] /= std::sqrt(nk + 1e-6f); }
      const float beta = LoadAsF32(in.beta.data, in.beta.dtype, t * p.Nv + h);
      const float a = p.has_g ? std::exp(LoadAsF32(in.g.data, in.g.dtype, t * p.Nv + h)) : 1.f;
      for (int64_t j = it.v_begin; j < it.v_begin + it.v_width; ++j) {
        float sk = 0;
        for (int64_t i = 0; i < Dk; ++i) { S[i * Dv + j] *= a; sk += S[i * Dv + j] * k[i]; }
        const float u = beta * (LoadAsF32(in.value.data, in.value.dtype, (t * p.Nv + h) * Dv + j) - sk);
        float o = 0;
        for (int64_t i = 0; i < Dk; ++i) { S[i * Dv + j] += k[i] * u; o += S[i * Dv + j] * q[i]; }
        StoreFromF32(outs.out.data, outs.out.dtype, (t * p.Nv + h) * Dv + j, static_cast<float>(p.scale) * o);
      }
    }
    if (outs.final_state.present())
      for (int64_t i = 0; i < Dk; ++i)
        for (int64_t j = it.v_begin; j < it.v_begin + it.v_width; ++j)
          StoreFromF32(outs.final_state.data, outs.final_state.dtype, sbase + (kv ? i * Dv + j : j * Dk + i), S[i * Dv + j]);
  }
  return Status::Ok();
}

}  // namespace cgdr
