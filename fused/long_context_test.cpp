// Long context (SPEC.md §10: offsets × strides beyond 2^31 elements): query rows whose element
// offsets pass 2^31 in their tensors, computed by the fused kernels and the cuBLAS projections at
// production widths, without a CPU reference of the whole stream. A long run computes every row;
// a short run computes only a few chosen rows (the ones right below and right past 2^31, and the
// last ones), from the same bf16 operands copied out of the long run's buffers, at small offsets.
//
// The kernels give a query row the same result whatever else is in the launch (one CTA per row, a
// fixed reduction order), so the chosen rows must come back bit for bit equal: O_lat, lse, dQ~,
// and the loss's kl, dw, dq_I. Key gradients are sums over rows through fp32 atomics; the chosen
// rows select keys no other row selects, so those keys' dK~ and dk_I rows hold the chosen rows'
// contributions only: one addend per element (dk_I) or two (dK~: the two 64-head blocks of
// H = 128), which fp32 adds in either order to the same bits. An offset computed in 32 bits shows
// up as a row read from or written to the wrong place: a mismatch, poison left in place (every
// output is filled with all-one bytes first), or an illegal address.
//
// The projections (cublasGemmStridedBatchedEx: int dimensions and leading dimensions, 64-bit batch
// strides) are checked on the same rows against the bf16 policy's product on the host through
// check/compare.hpp's compare_tensor (SPEC.md §9), as the attention tests map dq_nope.
//
// Sizes: AttentionAtH128 holds ~30 GB (Q~ [36864, 128, 576] is 2.72e9 elements), IndexerAtHI64
// ~24 GB (q_I [266240, 64, 128] is 2.18e9); both run in seconds on an H200 (the kernels have 16
// keys a row, or 64-key windows). Without a device, or with too little free memory, they skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check/compare.hpp"
#include "core/bf16.hpp"
#include "core/layout.hpp"
#include "fused/api.cuh"
#include "fused/attention.hpp"
#include "fused/fill.hpp"
#include "fused/indexer_testing.hpp"
#include "fused/projections.hpp"

namespace dsa::fused::testing {
namespace {

constexpr int64_t k2To31 = int64_t{1} << 31;

// A device buffer without a host mirror (these hold up to 9 GB), every byte set to `byte`
// (0xFF: the all-one poison of an output no kernel wrote, 0: zeros).
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count, int byte = 0xFF) : n(count) {
    check_cuda(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc");
    set(byte);
  }
  Dev(const std::vector<T>& h) : Dev(h.size(), 0) {
    check_cuda(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void set(int byte) { check_cuda(cudaMemset(p, byte, n * sizeof(T)), "cudaMemset"); }
  bf16* b() const { return reinterpret_cast<bf16*>(p); }  // uint16_t storage of bf16 values
};

// Rows `rows` of a device tensor of `width` elements a row, in that order (64-bit offsets).
template <class T>
std::vector<T> rows_of(const T* p, const std::vector<int64_t>& rows, int64_t width) {
  std::vector<T> h(rows.size() * width);
  for (size_t i = 0; i < rows.size(); ++i)
    check_cuda(cudaMemcpy(h.data() + i * width, p + rows[i] * width, width * sizeof(T), cudaMemcpyDeviceToHost),
               "download rows");
  return h;
}
template <class T>
std::vector<T> rows_of(const Dev<T>& d, const std::vector<int64_t>& rows, int64_t width) {
  return rows_of(d.p, rows, width);
}

// dst row i = src row rows[i], device to device.
template <class T>
void copy_rows(T* dst, const T* src, const std::vector<int64_t>& rows, int64_t width) {
  for (size_t i = 0; i < rows.size(); ++i)
    check_cuda(cudaMemcpy(dst + i * width, src + rows[i] * width, width * sizeof(T), cudaMemcpyDeviceToDevice),
               "copy rows");
}

// Consecutive rows [first, first + n).
std::vector<int64_t> range_rows(int64_t first, int64_t n) {
  std::vector<int64_t> r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = first + i;
  return r;
}

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
uint32_t bits_of(int32_t x) { return static_cast<uint32_t>(x); }
uint32_t bits_of(uint16_t x) { return x; }

// The long run's rows against the short run's, bit for bit; `rows` names the long run's rows.
template <class T>
::testing::AssertionResult same_bits(const std::string& what, const std::vector<T>& long_run,
                                     const std::vector<T>& short_run, const std::vector<int64_t>& rows) {
  if (long_run.size() != short_run.size() || rows.empty() || long_run.size() % rows.size() != 0)
    return ::testing::AssertionFailure() << what << ": " << long_run.size() << " values in the long run, "
                                         << short_run.size() << " in the short one";
  const size_t width = long_run.size() / rows.size();
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < long_run.size(); ++i)
    if (bits_of(long_run[i]) != bits_of(short_run[i]) && differ++ == 0) first = i;
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << differ << " of " << long_run.size()
                                       << " elements differ; first at row " << rows[first / width] << " element "
                                       << first % width << ": long run bits 0x" << std::hex
                                       << bits_of(long_run[first]) << ", short run 0x" << bits_of(short_run[first]);
}

// Every element written (no all-one poison) and finite: so that equal bits are not equal poison.
template <class T>
::testing::AssertionResult written(const std::string& what, const std::vector<T>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    const bool poison = is_poison_bits(bits_of(v[i]));
    double x = 0;
    if constexpr (sizeof(T) == 2) x = bf16_float(static_cast<uint16_t>(v[i]));
    else x = static_cast<double>(v[i]);
    if (poison || !std::isfinite(x))
      return ::testing::AssertionFailure() << what << ": element " << i << (poison ? " never written" : " not finite");
  }
  return ::testing::AssertionSuccess();
}

template <class T>
bool any_nonzero(const std::vector<T>& v) {
  return std::any_of(v.begin(), v.end(), [](T x) { return bits_of(x) != 0 && bits_of(x) != 0x8000u && bits_of(x) != 0x80000000u; });
}

// Free device memory is at least `bytes`; else the reason to skip.
std::string short_of_memory(double gbytes) {
  size_t free = 0, total = 0;
  check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  if (double(free) >= gbytes * 1e9) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "needs %.0f GB of free device memory, the device has %.1f GB free of %.1f GB", gbytes,
                free / 1e9, total / 1e9);
  return buf;
}

// ---- the bf16 policy's projections on the host (exact: fp64; lowp: fp32 accumulation, bf16) ----

double bfv(uint16_t b) { return bf16_float(b); }

// out[r, h, j] = Σ_k a(r, h, k)·b(h, k, j) for r < rows, h < H, j < J, k < Kd.
template <class A, class B>
void project(int64_t rows, int64_t H, int64_t J, int64_t Kd, A a, B b, TensorD& exact, TensorD& lowp) {
  exact = TensorD({rows, H, J});
  lowp = TensorD({rows, H, J});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < J; ++j) {
        double e = 0;
        float l = 0.f;
        for (int64_t k = 0; k < Kd; ++k) {
          const double x = a(r, h, k), y = b(h, k, j);
          e += x * y;
          l += float(x) * float(y);
        }
        exact.at(r, h, j) = e;
        lowp.at(r, h, j) = round_bf16(l);
      }
}

// A weight gradient out[h, i, j] = Σ_r a(r, h, i)·b(r, h, j) (fp32 on the device, bf16 on output).
template <class A, class B>
void weight_grad(int64_t rows, int64_t H, int64_t I, int64_t J, A a, B b, TensorD& exact, TensorD& lowp) {
  exact = TensorD({H, I, J});
  lowp = TensorD({H, I, J});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t j = 0; j < J; ++j) {
        double e = 0;
        float l = 0.f;
        for (int64_t r = 0; r < rows; ++r) {
          const double x = a(r, h, i), y = b(r, h, j);
          e += x * y;
          l += float(x) * float(y);
        }
        exact.at(h, i, j) = e;
        lowp.at(h, i, j) = round_bf16(l);
      }
}

// Columns [c0, c0 + w) of every head of bf16 rows [rows, H, stride], as [rows, H, w].
std::vector<uint16_t> heads_bits(const std::vector<uint16_t>& v, int64_t rows, int64_t H, int64_t stride, int64_t c0,
                                 int64_t w) {
  std::vector<uint16_t> out(size_t(rows * H * w));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h)
      std::copy_n(&v[size_t((r * H + h) * stride + c0)], w, &out[size_t((r * H + h) * w)]);
  return out;
}

// ---- DeepSeek-V3.2 attention widths: H 128, C 512, R 64 (Q~ rows of 73 728 elements) ----------
//
// One causal sequence of T = 36 864 tokens, K = 16 slots a row. Q~ and dQ~ [T, 128, 576] pass 2^31
// elements at row 29 127.1, O_lat and dO_lat [T, 128, 512] at row 32 768. The chosen rows: 29 126,
// 29 127 (it straddles 2^31), 29 128, 32 767, 32 768, 32 769 and the last two. Chosen row i selects
// keys 1024 + 16i … 1024 + 16i + 15 and no other row selects a key of [1024, 1152); the other rows
// select min(16, visible) keys spread over the rest of [0, g].
TEST(LongContext, AttentionAtH128PastTwoTo31Elements) {
  DSA_SKIP_WITHOUT_GPU();
  if (const std::string why = short_of_memory(34); !why.empty()) GTEST_SKIP() << "LongContext: " << why;

  constexpr int T = 36864, H = 128, C = 512, R = 64, D = C + R, Dn = 128, Dv = 128, HI = 64, DI = 128, K = 16;
  constexpr int kRes0 = 1024;
  const std::vector<int64_t> chosen = {29126, 29127, 29128, 32767, 32768, 32769, T - 2, T - 1};
  const int n = static_cast<int>(chosen.size()), kResN = K * n;
  ASSERT_GT(int64_t(T) * H * D, k2To31);
  ASSERT_GT(int64_t(T) * H * C, k2To31);
  ASSERT_GT((chosen.back() + 1) * H * C - 1, k2To31);
  std::printf("T = %d: Q~ holds %.3g elements, O_lat %.3g; the last row's Q~ starts at element %.4g (2^31 = %.4g)\n",
              T, double(T) * H * D, double(T) * H * C, double(T - 1) * H * D, double(k2To31));

  // ---- the long run: inputs on the device (a pure function of (seed, element)) ----
  Dev<uint16_t> q_nope(size_t(T) * H * Dn), q_pe(size_t(T) * H * R), dO(size_t(T) * H * Dv), W_UK(size_t(H) * Dn * C),
      W_UV(size_t(H) * Dv * C), c(size_t(T) * C), k_pe(size_t(T) * R), q_I(size_t(T) * HI * DI), w(size_t(T) * HI),
      k_I(size_t(T) * DI);
  fill_uniform_bf16(q_nope.p, q_nope.n, 11, 1.f, 0);
  fill_uniform_bf16(q_pe.p, q_pe.n, 12, 1.f, 0);
  fill_uniform_bf16(dO.p, dO.n, 13, 1.f, 0);
  fill_uniform_bf16(W_UK.p, W_UK.n, 14, 0.1f, 0);
  fill_uniform_bf16(W_UV.p, W_UV.n, 15, 0.1f, 0);
  fill_uniform_bf16(c.p, c.n, 16, 1.f, 0);
  fill_uniform_bf16(k_pe.p, k_pe.n, 17, 1.f, 0);
  fill_uniform_bf16(q_I.p, q_I.n, 18, 1.f, 0);
  fill_uniform_bf16(w.p, w.n, 19, 1.f, 0);
  fill_uniform_bf16(k_I.p, k_I.n, 20, 1.f, 0);

  std::vector<int32_t> h_row(T), h_kb(T, 0), h_ke(T), h_idx(size_t(T) * K, -1);
  for (int g = 0; g < T; ++g) {
    h_row[g] = g;
    h_ke[g] = g + 1;
    int32_t* r = &h_idx[size_t(g) * K];
    const auto at = std::find(chosen.begin(), chosen.end(), int64_t(g));
    if (at != chosen.end()) {
      const int i = static_cast<int>(at - chosen.begin());
      for (int j = 0; j < K; ++j) r[j] = kRes0 + K * i + j;
      continue;
    }
    const int64_t avail = (g + 1) - std::clamp<int64_t>(g + 1 - kRes0, 0, kResN);  // [0, g] less the reserved keys
    const int64_t m = std::min<int64_t>(K, avail);
    for (int64_t j = 0; j < m; ++j) {
      const int64_t pos = j * avail / m;
      r[j] = static_cast<int32_t>(pos < kRes0 ? pos : pos + kResN);
    }
  }
  Dev<int32_t> row(h_row), kb(h_kb), ke(h_ke), idx(h_idx), sel(size_t(T) * K), cnt(T);
  std::vector<uint8_t> h_counted(T, 1);
  Dev<uint8_t> counted(h_counted);
  const RowRanges ranges{row.p, kb.p, ke.p};
  const float scale = 1.f / std::sqrt(192.f), coeff_over_N = 1.f / T;

  cublasHandle_t blas;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  struct BlasGuard {
    cublasHandle_t b;
    ~BlasGuard() { cublasDestroy(b); }
  } blas_guard{blas};
  const ProjDims pd{T, H, Dn, R, C, Dv};

  Dev<uint16_t> Qt(size_t(T) * H * D), O_lat(size_t(T) * H * C), O(size_t(T) * H * Dv), dO_lat(size_t(T) * H * C),
      dQt(size_t(T) * H * D), dq_nope(size_t(T) * H * Dn), dq_pe(size_t(T) * H * R);
  Dev<float> lse(size_t(T) * H), delta(size_t(T) * H), dK(size_t(T) * D, 0), kl(T), dq_I(size_t(T) * HI * DI),
      dk_I(size_t(T) * DI), dw(size_t(T) * HI);

  absorb_query(blas, pd, q_nope.b(), q_pe.b(), W_UK.b(), Qt.b(), 0);
  select_keys(SelectArgs{idx.p, ranges, T, T, K, sel.p, cnt.p}, 0);
  auto fwd_args = [&](const bf16* Q, const int32_t* s, const int32_t* ct, int Tq, bf16* Ol, float* l) {
    return AttnFwdArgs{Q, c.b(), k_pe.b(), s, ct, Tq, T, H, C, R, K, scale, Ol, l};
  };
  // The forward with each kernel (mma.sync, then the one `best` picks: wgmma on an sm_90 device).
  const FwdKernel kernels[] = {FwdKernel::mma, FwdKernel::best};
  std::vector<uint16_t> long_O[2];
  std::vector<float> long_lse[2];
  for (int k = 0; k < 2; ++k) {
    O_lat.set(0xFF);
    lse.set(0xFF);
    attention_forward(fwd_args(Qt.b(), sel.p, cnt.p, T, O_lat.b(), lse.p), 0, kernels[k]);
    check_cuda(cudaDeviceSynchronize(), "attention_forward (long run)");
    long_O[k] = rows_of(O_lat, chosen, int64_t(H) * C);
    long_lse[k] = rows_of(lse, chosen, H);
  }
  output_projection(blas, pd, O_lat.b(), W_UV.b(), O.b(), 0);
  grad_o_lat(blas, pd, dO.b(), W_UV.b(), dO_lat.b(), 0);
  attention_delta(dO_lat.b(), O_lat.b(), delta.p, int64_t(T) * H, C, 0);
  attention_backward(AttnBwdArgs{Qt.b(), c.b(), k_pe.b(), sel.p, cnt.p, dO_lat.b(), lse.p, delta.p, T, T, H, C, R, K,
                                 scale, dQt.b(), dK.p},
                     0);
  grad_query(blas, pd, dQt.b(), W_UK.b(), dq_nope.b(), dq_pe.b(), 0);
  indexer_loss(LossArgs{Qt.b(), c.b(), k_pe.b(), lse.p, sel.p, q_I.b(), w.b(), k_I.b(), ranges, T, T, H, C, R, HI, DI,
                        K, scale, true, false, coeff_over_N, counted.p, kl.p, dq_I.p, dk_I.p, dw.p},
               0);
  check_cuda(cudaDeviceSynchronize(), "the long run");

  const std::vector<int64_t> reserved = range_rows(kRes0, kResN);
  const auto long_dQ = rows_of(dQt, chosen, int64_t(H) * D);
  const auto long_dK = rows_of(dK, reserved, D);
  const auto long_kl = rows_of(kl, chosen, 1), long_dw = rows_of(dw, chosen, HI);
  const auto long_dqI = rows_of(dq_I, chosen, int64_t(HI) * DI), long_dkI = rows_of(dk_I, reserved, DI);

  // ---- the short run: the chosen rows only, the same operands at small offsets ----
  {
    std::vector<int32_t> s_row(n), s_kb(n, 0), s_ke(n);
    for (int i = 0; i < n; ++i) s_row[i] = int32_t(chosen[i]), s_ke[i] = int32_t(chosen[i] + 1);
    Dev<int32_t> srow(s_row), skb(s_kb), ske(s_ke), sidx(size_t(n) * K), ssel(size_t(n) * K), scnt(n);
    copy_rows(sidx.p, idx.p, chosen, K);
    Dev<uint16_t> sQt(size_t(n) * H * D), sdO_lat(size_t(n) * H * C), sq_I(size_t(n) * HI * DI), sw(size_t(n) * HI),
        sO_lat(size_t(n) * H * C), sdQt(size_t(n) * H * D);
    copy_rows(sQt.p, Qt.p, chosen, int64_t(H) * D);
    copy_rows(sdO_lat.p, dO_lat.p, chosen, int64_t(H) * C);
    copy_rows(sq_I.p, q_I.p, chosen, int64_t(HI) * DI);
    copy_rows(sw.p, w.p, chosen, HI);
    std::vector<uint8_t> s_counted(n, 1);
    Dev<uint8_t> scounted(s_counted);
    Dev<float> slse(size_t(n) * H), sdelta(size_t(n) * H), sdK(size_t(T) * D, 0), skl(n), sdq_I(size_t(n) * HI * DI),
        sdk_I(size_t(T) * DI), sdw(size_t(n) * HI);
    const RowRanges sranges{srow.p, skb.p, ske.p};
    select_keys(SelectArgs{sidx.p, sranges, n, T, K, ssel.p, scnt.p}, 0);
    const char* kname[] = {"mma.sync forward", "forward (best kernel)"};
    for (int k = 0; k < 2; ++k) {
      sO_lat.set(0xFF);
      slse.set(0xFF);
      attention_forward(fwd_args(sQt.b(), ssel.p, scnt.p, n, sO_lat.b(), slse.p), 0, kernels[k]);
      check_cuda(cudaDeviceSynchronize(), "attention_forward (short run)");
      const auto so = rows_of(sO_lat, range_rows(0, n), int64_t(H) * C);
      const auto sl = rows_of(slse, range_rows(0, n), H);
      EXPECT_TRUE(written(std::string(kname[k]) + " O_lat", so));
      EXPECT_TRUE(written(std::string(kname[k]) + " lse", sl));
      EXPECT_TRUE(same_bits(std::string(kname[k]) + " O_lat", long_O[k], so, chosen));
      EXPECT_TRUE(same_bits(std::string(kname[k]) + " lse", long_lse[k], sl, chosen));
    }
    attention_delta(sdO_lat.b(), sO_lat.b(), sdelta.p, int64_t(n) * H, C, 0);
    attention_backward(AttnBwdArgs{sQt.b(), c.b(), k_pe.b(), ssel.p, scnt.p, sdO_lat.b(), slse.p, sdelta.p, n, T, H, C,
                                   R, K, scale, sdQt.b(), sdK.p},
                       0);
    indexer_loss(LossArgs{sQt.b(), c.b(), k_pe.b(), slse.p, ssel.p, sq_I.b(), sw.b(), k_I.b(), sranges, n, T, H, C, R,
                          HI, DI, K, scale, true, false, coeff_over_N, scounted.p, skl.p, sdq_I.p, sdk_I.p, sdw.p},
                 0);
    check_cuda(cudaDeviceSynchronize(), "the short run");
    const auto all = range_rows(0, n);
    const auto s_dQ = rows_of(sdQt, all, int64_t(H) * D);
    const auto s_dK = rows_of(sdK, reserved, D);
    const auto s_kl = rows_of(skl, all, 1), s_dw = rows_of(sdw, all, HI);
    const auto s_dqI = rows_of(sdq_I, all, int64_t(HI) * DI), s_dkI = rows_of(sdk_I, reserved, DI);
    EXPECT_TRUE(written("dQ~", s_dQ));
    EXPECT_TRUE(written("dK~ of the chosen rows' keys", s_dK));
    EXPECT_TRUE(written("kl", s_kl));
    EXPECT_TRUE(written("dw", s_dw));
    EXPECT_TRUE(written("dq_I", s_dqI));
    EXPECT_TRUE(written("dk_I of the chosen rows' keys", s_dkI));
    EXPECT_TRUE(any_nonzero(s_dK) && any_nonzero(s_dkI) && any_nonzero(s_dQ)) << "the gradients must not be all 0";
    EXPECT_TRUE(same_bits("dQ~", long_dQ, s_dQ, chosen));
    EXPECT_TRUE(same_bits("dK~ of the chosen rows' keys", long_dK, s_dK, reserved));
    EXPECT_TRUE(same_bits("kl", long_kl, s_kl, chosen));
    EXPECT_TRUE(same_bits("dw", long_dw, s_dw, chosen));
    EXPECT_TRUE(same_bits("dq_I", long_dqI, s_dqI, chosen));
    EXPECT_TRUE(same_bits("dk_I of the chosen rows' keys", long_dkI, s_dkI, reserved));
  }

  // ---- the projections on the chosen rows (cuBLAS read or wrote them past 2^31 elements) ----
  const StreamLayout L = make_layout({int64_t(n)}, CpSpec{1, Layout::contiguous, 1});
  const auto h_q_nope = rows_of(q_nope, chosen, int64_t(H) * Dn), h_q_pe = rows_of(q_pe, chosen, int64_t(H) * R);
  const auto h_dO = rows_of(dO, chosen, int64_t(H) * Dv);
  const auto h_Qt = rows_of(Qt, chosen, int64_t(H) * D), h_O_lat = rows_of(O_lat, chosen, int64_t(H) * C);
  const auto h_O = rows_of(O, chosen, int64_t(H) * Dv), h_dO_lat = rows_of(dO_lat, chosen, int64_t(H) * C);
  const auto h_dq_nope = rows_of(dq_nope, chosen, int64_t(H) * Dn), h_dq_pe = rows_of(dq_pe, chosen, int64_t(H) * R);
  std::vector<uint16_t> h_W_UK(W_UK.n), h_W_UV(W_UV.n);
  check_cuda(cudaMemcpy(h_W_UK.data(), W_UK.p, W_UK.n * 2, cudaMemcpyDeviceToHost), "download W_UK");
  check_cuda(cudaMemcpy(h_W_UV.data(), W_UV.p, W_UV.n * 2, cudaMemcpyDeviceToHost), "download W_UV");
  auto wuk = [&](int64_t h, int64_t d, int64_t cc) { return bfv(h_W_UK[size_t((h * Dn + d) * C + cc)]); };
  auto wuv = [&](int64_t h, int64_t v, int64_t cc) { return bfv(h_W_UV[size_t((h * Dv + v) * C + cc)]); };
  auto dq_at = [&](int64_t r, int64_t h, int64_t k) { return bfv(long_dQ[size_t((r * H + h) * D + k)]); };
  TensorD ex, lp;
  // Q~'s nope part (absorb_query wrote it), under O_lat's catalogue entry: the same shape [rows, H, C],
  // a bf16 GEMM output of the forward (α = 2); the catalogue has no entry for Q~ itself.
  project(n, H, C, Dn, [&](int64_t r, int64_t h, int64_t k) { return bfv(h_q_nope[size_t((r * H + h) * Dn + k)]); },
          wuk, ex, lp);
  EXPECT_TRUE(passes(compare_tensor("O_lat", tensor_of_bf16({n, H, C}, heads_bits(h_Qt, n, H, D, 0, C)), lp, ex, L),
                     "Q~ nope (absorb_query)"));
  EXPECT_TRUE(same_bits("Q~ rope part (q_pe copied in)", heads_bits(h_Qt, n, H, D, C, R), h_q_pe, chosen));
  project(n, H, Dv, C, [&](int64_t r, int64_t h, int64_t k) { return bfv(h_O_lat[size_t((r * H + h) * C + k)]); },
          [&](int64_t h, int64_t k, int64_t v) { return wuv(h, v, k); }, ex, lp);
  EXPECT_TRUE(passes(compare_tensor("O", tensor_of_bf16({n, H, Dv}, h_O), lp, ex, L), "O (output_projection)"));
  project(n, H, C, Dv, [&](int64_t r, int64_t h, int64_t k) { return bfv(h_dO[size_t((r * H + h) * Dv + k)]); }, wuv,
          ex, lp);
  EXPECT_TRUE(passes(compare_tensor("O_lat", tensor_of_bf16({n, H, C}, h_dO_lat), lp, ex, L), "dO_lat (grad_o_lat)"));
  project(n, H, Dn, C, dq_at,
          [&](int64_t h, int64_t k, int64_t d) { return wuk(h, d, k); }, ex, lp);
  EXPECT_TRUE(passes(compare_tensor("dq_nope", tensor_of_bf16({n, H, Dn}, h_dq_nope), lp, ex, L), "dq_nope (grad_query)"));
  EXPECT_TRUE(same_bits("dq_pe (dQ~'s rope part copied out)", h_dq_pe, heads_bits(long_dQ, n, H, D, C, R), chosen));

  // The weight gradients sum over all T rows (K-dim = T): with q_nope and dO zero except on the
  // chosen rows, they are the chosen rows' sums, read by cuBLAS from dQ~ and O_lat past 2^31.
  q_nope.set(0);
  dO.set(0);
  for (int i = 0; i < n; ++i) {
    check_cuda(cudaMemcpy(q_nope.p + chosen[i] * H * Dn, &h_q_nope[size_t(i) * H * Dn], size_t(H) * Dn * 2,
                          cudaMemcpyHostToDevice), "upload q_nope row");
    check_cuda(cudaMemcpy(dO.p + chosen[i] * H * Dv, &h_dO[size_t(i) * H * Dv], size_t(H) * Dv * 2,
                          cudaMemcpyHostToDevice), "upload dO row");
  }
  Dev<float> dW_UK(size_t(H) * Dn * C), dW_UV(size_t(H) * Dv * C);
  grad_W_UK(blas, pd, q_nope.b(), dQt.b(), dW_UK.p, 0);
  grad_W_UV(blas, pd, dO.b(), O_lat.b(), dW_UV.p, 0);
  check_cuda(cudaDeviceSynchronize(), "weight gradients");
  std::vector<float> h_dW_UK(dW_UK.n), h_dW_UV(dW_UV.n);
  check_cuda(cudaMemcpy(h_dW_UK.data(), dW_UK.p, dW_UK.n * 4, cudaMemcpyDeviceToHost), "download dW_UK");
  check_cuda(cudaMemcpy(h_dW_UV.data(), dW_UV.p, dW_UV.n * 4, cudaMemcpyDeviceToHost), "download dW_UV");
  weight_grad(n, H, Dn, C, [&](int64_t r, int64_t h, int64_t d) { return bfv(h_q_nope[size_t((r * H + h) * Dn + d)]); },
              dq_at, ex, lp);
  EXPECT_TRUE(passes(compare_tensor("dW_UK", tensor_of({H, Dn, C}, bf16_rounded(h_dW_UK)), lp, ex, L), "dW_UK (grad_W_UK)"));
  weight_grad(n, H, Dv, C, [&](int64_t r, int64_t h, int64_t v) { return bfv(h_dO[size_t((r * H + h) * Dv + v)]); },
              [&](int64_t r, int64_t h, int64_t cc) { return bfv(h_O_lat[size_t((r * H + h) * C + cc)]); }, ex, lp);
  EXPECT_TRUE(passes(compare_tensor("dW_UV", tensor_of({H, Dv, C}, bf16_rounded(h_dW_UV)), lp, ex, L), "dW_UV (grad_W_UV)"));
}

// ---- the indexer at DeepSeek-V3.2 widths: HI 64, DI 128 (q_I rows of 8 192 elements) -----------
//
// 266 240 query rows over 8 192 keys (the kernels take query and key rows apart: RowRanges give each
// row its keys), each row a window of 64 keys, K = 16. q_I [T, 64, 128] (bf16), dq_I [T, 64, 128]
// (fp32) and the scores [T, 8192] pass 2^31 elements at row 262 144 exactly. The chosen rows: the
// 16 rows 262 136 … 262 151 around it and the last 8 (blocks of 8, so the indexer's CTAs, which
// take 1, 2 or 4 consecutive rows, group them alike in both runs); their windows are disjoint and
// no other row's window meets them. The loss runs sparse over the rows' top-k with a small
// attention (H 16, C 64, R 16: Q~ offsets are AttentionAtH128's part).
TEST(LongContext, IndexerAtHI64PastTwoTo31Elements) {
  DSA_SKIP_WITHOUT_GPU();
  if (const std::string why = short_of_memory(27); !why.empty()) GTEST_SKIP() << "LongContext: " << why;

  constexpr int T = 266240, Tp = 8192, HI = 64, DI = 128, K = 16, W = 64, H = 16, C = 64, R = 16, D = C + R;
  std::vector<int64_t> chosen = range_rows(262136, 16);
  for (int64_t g : range_rows(T - 8, 8)) chosen.push_back(g);
  const int n = static_cast<int>(chosen.size());
  const int kRes0 = Tp - W * n;  // the chosen rows' windows: [kRes0, Tp)
  ASSERT_GT(int64_t(T) * HI * DI, k2To31);
  ASSERT_GT(int64_t(T) * Tp, k2To31);
  ASSERT_EQ(int64_t(262144) * HI * DI, k2To31);
  std::printf("T = %d: q_I and dq_I hold %.4g elements, the scores %.4g (2^31 = %.4g)\n", T, double(T) * HI * DI,
              double(T) * Tp, double(k2To31));

  Dev<uint16_t> q_I(size_t(T) * HI * DI), w(size_t(T) * HI), k_I(size_t(Tp) * DI), Qt(size_t(T) * H * D),
      c(size_t(Tp) * C), k_pe(size_t(Tp) * R), O_lat(size_t(T) * H * C);
  fill_uniform_bf16(q_I.p, q_I.n, 31, 1.f, 0);
  fill_uniform_bf16(w.p, w.n, 32, 1.f, 0);
  fill_uniform_bf16(k_I.p, k_I.n, 33, 1.f, 0);
  fill_uniform_bf16(Qt.p, Qt.n, 34, 0.5f, 0);
  fill_uniform_bf16(c.p, c.n, 35, 1.f, 0);
  fill_uniform_bf16(k_pe.p, k_pe.n, 36, 1.f, 0);
  std::vector<int32_t> h_row(T), h_kb(T), h_ke(T);
  for (int g = 0; g < T; ++g) {
    const auto at = std::find(chosen.begin(), chosen.end(), int64_t(g));
    h_row[g] = g;
    h_kb[g] = at != chosen.end() ? kRes0 + W * static_cast<int>(at - chosen.begin())
                                 : static_cast<int>(int64_t(g) * 97 % (kRes0 - W + 1));
    h_ke[g] = h_kb[g] + W;
  }
  std::vector<uint8_t> h_counted(T, 1);
  Dev<int32_t> row(h_row), kb(h_kb), ke(h_ke), topk(size_t(T) * K), sel(size_t(T) * K), cnt(T);
  Dev<uint8_t> counted(h_counted);
  Dev<float> scores(size_t(T) * Tp), lse(size_t(T) * H), kl(T), dq_I(size_t(T) * HI * DI), dk_I(size_t(Tp) * DI),
      dw(size_t(T) * HI);
  const RowRanges ranges{row.p, kb.p, ke.p};
  const float scale = 1.f / std::sqrt(float(D)), coeff_over_N = 1.f / T;

  // The long run: indexer + top-k (scores materialized), S(g), the forward for lse, the sparse loss.
  auto run = [&](int Tq, const bf16* qI, const bf16* ww, const RowRanges& rr, int32_t* tk, float* sc, int32_t* sl,
                 int32_t* ct, const bf16* Q, bf16* Ol, float* l, const uint8_t* cd, float* kl_, float* dqI, float* dkI,
                 float* dw_) {
    indexer_topk(IndexerArgs{qI, ww, k_I.b(), rr, Tq, Tp, HI, DI, K, true, tk, sc}, 0);
    select_keys(SelectArgs{tk, rr, Tq, Tp, K, sl, ct}, 0);
    attention_forward(AttnFwdArgs{Q, c.b(), k_pe.b(), sl, ct, Tq, Tp, H, C, R, K, scale, Ol, l}, 0);
    indexer_loss(LossArgs{Q, c.b(), k_pe.b(), l, sl, qI, ww, k_I.b(), rr, Tq, Tp, H, C, R, HI, DI, K, scale, true, false,
                          coeff_over_N, cd, kl_, dqI, dkI, dw_},
                 0);
    check_cuda(cudaDeviceSynchronize(), "indexer, selection, forward and loss");
  };
  run(T, q_I.b(), w.b(), ranges, topk.p, scores.p, sel.p, cnt.p, Qt.b(), O_lat.b(), lse.p, counted.p, kl.p, dq_I.p,
      dk_I.p, dw.p);
  const std::vector<int64_t> reserved = range_rows(kRes0, int64_t(W) * n);
  const auto long_scores = rows_of(scores, chosen, Tp), long_lse = rows_of(lse, chosen, H);
  const auto long_topk = rows_of(topk, chosen, K), long_sel = rows_of(sel, chosen, K);
  const auto long_O = rows_of(O_lat, chosen, int64_t(H) * C);
  const auto long_kl = rows_of(kl, chosen, 1), long_dw = rows_of(dw, chosen, HI);
  const auto long_dqI = rows_of(dq_I, chosen, int64_t(HI) * DI), long_dkI = rows_of(dk_I, reserved, DI);

  // The short run over the chosen rows, the same operands copied to small offsets.
  std::vector<int32_t> s_row(n), s_kb(n), s_ke(n);
  for (int i = 0; i < n; ++i) s_row[i] = h_row[chosen[i]], s_kb[i] = h_kb[chosen[i]], s_ke[i] = h_ke[chosen[i]];
  Dev<int32_t> srow(s_row), skb(s_kb), ske(s_ke), stopk(size_t(n) * K), ssel(size_t(n) * K), scnt(n);
  Dev<uint16_t> sq_I(size_t(n) * HI * DI), sw(size_t(n) * HI), sQt(size_t(n) * H * D), sO_lat(size_t(n) * H * C);
  copy_rows(sq_I.p, q_I.p, chosen, int64_t(HI) * DI);
  copy_rows(sw.p, w.p, chosen, HI);
  copy_rows(sQt.p, Qt.p, chosen, int64_t(H) * D);
  std::vector<uint8_t> s_counted(n, 1);
  Dev<uint8_t> scounted(s_counted);
  Dev<float> sscores(size_t(n) * Tp), slse(size_t(n) * H), skl(n), sdq_I(size_t(n) * HI * DI), sdk_I(size_t(Tp) * DI),
      sdw(size_t(n) * HI);
  run(n, sq_I.b(), sw.b(), RowRanges{srow.p, skb.p, ske.p}, stopk.p, sscores.p, ssel.p, scnt.p, sQt.b(), sO_lat.b(),
      slse.p, scounted.p, skl.p, sdq_I.p, sdk_I.p, sdw.p);
  const auto all = range_rows(0, n);
  const auto s_scores = rows_of(sscores, all, Tp), s_lse = rows_of(slse, all, H);
  const auto s_topk = rows_of(stopk, all, K), s_sel = rows_of(ssel, all, K);
  const auto s_O = rows_of(sO_lat, all, int64_t(H) * C);
  const auto s_kl = rows_of(skl, all, 1), s_dw = rows_of(sdw, all, HI);
  const auto s_dqI = rows_of(sdq_I, all, int64_t(HI) * DI), s_dkI = rows_of(sdk_I, reserved, DI);

  // The short run itself: scores finite exactly in the row's window (−inf elsewhere), K distinct
  // keys of the window in the top-k.
  for (int i = 0; i < n; ++i) {
    for (int t = 0; t < Tp; ++t) {
      const float x = s_scores[size_t(i) * Tp + t];
      const bool in = t >= s_kb[i] && t < s_ke[i];
      ASSERT_TRUE(in ? std::isfinite(x) : x == -INFINITY) << "row " << chosen[i] << " key " << t << ": score " << x;
    }
    std::vector<int32_t> keys(&s_topk[size_t(i) * K], &s_topk[size_t(i) * K] + K);
    std::sort(keys.begin(), keys.end());
    ASSERT_TRUE(std::adjacent_find(keys.begin(), keys.end()) == keys.end()) << "row " << chosen[i] << ": a key repeats";
    ASSERT_TRUE(keys.front() >= s_kb[i] && keys.back() < s_ke[i]) << "row " << chosen[i] << ": a key outside the window";
  }
  EXPECT_TRUE(written("lse", s_lse));
  EXPECT_TRUE(written("O_lat", s_O));
  EXPECT_TRUE(written("kl", s_kl));
  EXPECT_TRUE(written("dw", s_dw));
  EXPECT_TRUE(written("dq_I", s_dqI));
  EXPECT_TRUE(written("dk_I of the chosen rows' keys", s_dkI));
  EXPECT_TRUE(any_nonzero(s_dqI) && any_nonzero(s_dkI)) << "the gradients must not be all 0";

  EXPECT_TRUE(same_bits("scores", long_scores, s_scores, chosen));
  // The top-k's slot order is free (SPEC.md §4) and follows the order of shared-memory atomics;
  // the set is what must agree. S(g) is the set in ascending order.
  auto sorted_rows = [&](std::vector<int32_t> v) {
    for (int i = 0; i < n; ++i) std::sort(v.begin() + size_t(i) * K, v.begin() + size_t(i + 1) * K);
    return v;
  };
  EXPECT_TRUE(same_bits("top-k (as sets)", sorted_rows(long_topk), sorted_rows(s_topk), chosen));
  EXPECT_TRUE(same_bits("S(g)", long_sel, s_sel, chosen));
  EXPECT_TRUE(same_bits("lse", long_lse, s_lse, chosen));
  EXPECT_TRUE(same_bits("O_lat", long_O, s_O, chosen));
  EXPECT_TRUE(same_bits("kl", long_kl, s_kl, chosen));
  EXPECT_TRUE(same_bits("dw", long_dw, s_dw, chosen));
  EXPECT_TRUE(same_bits("dq_I", long_dqI, s_dqI, chosen));
  EXPECT_TRUE(same_bits("dk_I of the chosen rows' keys", long_dkI, s_dkI, reserved));
}

}  // namespace
}  // namespace dsa::fused::testing
