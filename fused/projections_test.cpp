// The weight gradients are sums over every query row: dW_UV[h] = Σ_g dO[g,h] ⊗ O_lat[g,h] and
// dW_UK[h] = Σ_g q_nope[g,h] ⊗ dQ~[g,h, :C], one cuBLAS GEMM each whose K-dim is Tq. Nightly seed 97
// case 1741 (Tq 4610, H 1, Dv 16, C 8) came back with dW_UV equal, to bf16 output rounding, to the
// sum over the first 4608 rows only; seed 99 case 2417 (Tq 4610 again) failed dW_UK the same way.
// On the H100 (cuBLAS 13.1) one GEMM over all K drops the last rows when K mod 128 is small and K is
// past about 2500 (a split-K kernel): K 2561, 3842, 4609, 4610, 6404, 8966 at one head and 8–16
// wide, 4609, 8194 and 65538 at 128×512 (reports/device/2026-12-06-s15-gemm-probe/);
// fused/projections.cpp's row_sum_gemm splits K since. These tests put the only non-zero rows where
// a dropped remainder of K would lose them (the last rows, and one in the middle and the first for
// scale) and sweep Tq over those and around multiples of 8, 64, 128, 1024 and 4096: every row's
// term must be in the sum, to fp32 rounding of a handful of addends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/bf16.hpp"
#include "fused/indexer_testing.hpp"
#include "fused/projections.hpp"

namespace dsa::fused::testing {
namespace {

// The operands' bf16 bit patterns as the projections take them.
const bf16* as_bf16(const DeviceArray<uint16_t>& a) { return reinterpret_cast<const bf16*>(a.p); }

// Rows 0, T/2, T−2, T−1, each once (T may be 1 or 2).
std::vector<int64_t> distinct_rows(int64_t T) {
  std::vector<int64_t> r = {0, T / 2, std::max<int64_t>(0, T - 2), T - 1};
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

// [T, H, W] bf16 rows, zero except on `rows` (normal values there).
std::vector<uint16_t> rows_only(int64_t T, int64_t H, int64_t W, const std::vector<int64_t>& rows, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<uint16_t> x(size_t(T * H * W), 0);
  for (int64_t r : rows)
    for (int64_t k = 0; k < H * W; ++k) x[size_t(r * H * W + k)] = bf16_bits(normal(rng));
  return x;
}

// out[h, m, n] = Σ_g a[g, h, m] · b[g, h, n] (b rows of `bw` elements a head, its first N used)
// against the device's fp32 result: each element within 1e-5 of Σ|terms| (a handful of fp32
// roundings), and nothing left unwritten.
void expect_row_sums(const std::string& what, const std::vector<float>& got, const std::vector<uint16_t>& a,
                     const std::vector<uint16_t>& b, int64_t T, int64_t H, int64_t M, int64_t N, int64_t bw,
                     const std::vector<int64_t>& rows) {
  int bad = 0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0, size = 0;
        for (int64_t g : rows) {
          const double t = double(bf16_float(a[size_t((g * H + h) * M + m)])) * bf16_float(b[size_t((g * H + h) * bw + n)]);
          sum += t, size += std::fabs(t);
        }
        const double v = got[size_t((h * M + m) * N + n)];
        if (!(std::fabs(v - sum) <= 1e-5 * size + 1e-30) && bad++ < 3)
          ADD_FAILURE() << what << " T " << T << " [" << h << ", " << m << ", " << n << "] = " << v << ", the rows' sum "
                        << sum << " (rows 0, T/2, T-2, T-1 hold the only non-zero values)";
      }
  EXPECT_EQ(bad, 0) << what << " T " << T << ": " << bad << " elements miss a row's term";
}

const int64_t kTs[] = {1,    2,    63,   64,   127,  128,  129,  130,  2561,  3842,  4096,  4097,  4104, 4607,
                       4608, 4609, 4610, 4611, 4616, 5000, 6404, 8193, 8194, 8966, 9218, 20002, 65537, 65538};

TEST(Projections, GradWUVSumsEveryQueryRow) {
  DSA_SKIP_WITHOUT_GPU();
  cublasHandle_t blas;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  std::mt19937 rng(1741);
  struct Shape { int H, Dv, C; };
  for (const Shape s : {Shape{1, 16, 8}, Shape{1, 8, 8}, Shape{2, 16, 16}, Shape{1, 128, 512}, Shape{4, 128, 512}})
    for (int64_t T : kTs) {
      const std::vector<int64_t> rows = distinct_rows(T);
      const auto dO = rows_only(T, s.H, s.Dv, rows, rng), O_lat = rows_only(T, s.H, s.C, rows, rng);
      DeviceArray<uint16_t> d_dO(dO, 0xFFFF), d_O_lat(O_lat, 0xFFFF);  // NaN guards: a read past the rows shows
      DeviceArray<float> dW(size_t(s.H) * s.Dv * s.C, kNaN);            // an element never written stays NaN
      const ProjDims pd{(int)T, s.H, 1, 0, s.C, s.Dv};
      grad_W_UV(blas, pd, as_bf16(d_dO), as_bf16(d_O_lat), dW.p, 0);
      check_cuda(cudaDeviceSynchronize(), "grad_W_UV");
      expect_row_sums("dW_UV H " + std::to_string(s.H) + " Dv " + std::to_string(s.Dv) + " C " + std::to_string(s.C),
                      dW.download(), dO, O_lat, T, s.H, s.Dv, s.C, s.C, rows);
    }
  cublasDestroy(blas);
}

TEST(Projections, GradWUKSumsEveryQueryRow) {
  DSA_SKIP_WITHOUT_GPU();
  cublasHandle_t blas;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  std::mt19937 rng(2417);
  struct Shape { int H, Dn, C, R; };
  for (const Shape s : {Shape{1, 16, 8, 8}, Shape{1, 8, 8, 4}, Shape{1, 128, 512, 64}, Shape{4, 128, 512, 64}})
    for (int64_t T : kTs) {
      const std::vector<int64_t> rows = distinct_rows(T);
      const auto q_nope = rows_only(T, s.H, s.Dn, rows, rng), dQt = rows_only(T, s.H, s.C + s.R, rows, rng);
      DeviceArray<uint16_t> d_q(q_nope, 0xFFFF), d_dQt(dQt, 0xFFFF);
      DeviceArray<float> dW(size_t(s.H) * s.Dn * s.C, kNaN);
      const ProjDims pd{(int)T, s.H, s.Dn, s.R, s.C, 1};
      grad_W_UK(blas, pd, as_bf16(d_q), as_bf16(d_dQt), dW.p, 0);
      check_cuda(cudaDeviceSynchronize(), "grad_W_UK");
      expect_row_sums("dW_UK H " + std::to_string(s.H) + " Dn " + std::to_string(s.Dn) + " C " + std::to_string(s.C),
                      dW.download(), q_nope, dQt, T, s.H, s.Dn, s.C, s.C + s.R, rows);
    }
  cublasDestroy(blas);
}

}  // namespace
}  // namespace dsa::fused::testing
