#include "reference/indexer_row.hpp"

namespace dsa {

namespace {

template <class Real>
Real score(const Problem& p, const Inputs& in, int64_t g, int64_t t) {
  const int64_t HI = p.dims.HI, DI = p.dims.DI;
  const double* q = in.q_I.row(g);
  const double* k = in.k_I.row(t);
  const double* w = in.w.row(g);
  Real s = 0;
  for (int64_t h = 0; h < HI; ++h) {
    Real u = 0;
    for (int64_t d = 0; d < DI; ++d) u += static_cast<Real>(q[h * DI + d]) * static_cast<Real>(k[d]);
    if (p.relu && u < 0) u = 0;
    s += static_cast<Real>(w[h]) * u;
  }
  return s;
}

}  // namespace

std::vector<double> indexer_score_row(const Problem& p, const Inputs& in, const StreamLayout& L, int64_t g,
                                      Precision precision) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(L.key_end(g) - L.key_begin(g)));
  for (int64_t t = L.key_begin(g); t < L.key_end(g); ++t)
    out.push_back(precision == Precision::exact ? score<double>(p, in, g, t) : score<float>(p, in, g, t));
  return out;
}

}  // namespace dsa
