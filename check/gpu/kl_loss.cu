// The indexer KL loss per query row and its gradient with respect to the scores (SPEC.md §7):
// the target T from the attention's per-head softmax, the indexer's log-softmax, KL and dI, then
// the chain through I = Σ_h w·φ(u) to dw and du (the GEMMs of dq_I / dk_I are on the host side).
#include "check/gpu/device_common.cuh"
#include "check/gpu/kernels.hpp"

namespace dsa::gpu {
namespace {

template <class R>
__global__ void kl_target_k(const R* A, const int32_t* count, int64_t H, int64_t kmax, R* T) {
  const int64_t b = blockIdx.x, n = count[b];
  R part = 0;
  for (int64_t j = threadIdx.x; j < kmax; j += blockDim.x) {
    R acc = 0;
    if (j < n)
      for (int64_t h = 0; h < H; ++h) acc += A[(b * H + h) * kmax + j];  // heads in order
    T[b * kmax + j] = acc;
    part += acc;
  }
  const R total = block_sum(part);
  const R norm = total > R(1e-10) ? total : R(1e-10);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) T[b * kmax + j] /= norm;
}

template <class R> __device__ __forceinline__ R phi(R u, bool relu) { return relu ? (u > R(0) ? u : R(0)) : u; }
template <class R> __device__ __forceinline__ R dphi(R u, bool relu) { return relu ? (u > R(0) ? R(1) : R(0)) : R(1); }

template <class R>
__global__ void kl_rows_k(const R* u, const R* w, const R* T, const int32_t* count, int64_t HI, int64_t kmax,
                          bool relu, R scale, R* kl, R* dw, R* du, R* scratch) {
  const int64_t b = blockIdx.x, n = count[b];
  const R* ub = u + b * kmax * HI;
  const R* wb = w + b * HI;
  const R* Tb = T + b * kmax;
  R* s = scratch + b * kmax;
  R* dub = du + b * kmax * HI;
  if (n == 0) {  // a row with no keys: no loss, no gradient
    for (int64_t i = threadIdx.x; i < kmax * HI; i += blockDim.x) dub[i] = 0;
    for (int64_t h = threadIdx.x; h < HI; h += blockDim.x) dw[b * HI + h] = 0;
    if (threadIdx.x == 0) kl[b] = 0;
    return;
  }
  // I[j] = Σ_h w·φ(u), heads in order as the reference sums them.
  R m = neg_inf<R>();
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    R acc = 0;
    for (int64_t h = 0; h < HI; ++h) acc += wb[h] * phi(ub[j * HI + h], relu);
    s[j] = acc;
    m = max(m, acc);
  }
  m = block_max(m);
  R se = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) se += exp_(s[j] - m);
  const R lse = m + log_(block_sum(se));
  // KL over the support (T > 0 only) and dI = scale·(Q − T), stored over I.
  R part = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const R logQ = s[j] - lse;
    const R t = Tb[j];
    if (t > R(0)) part += t * (log_(t > R(1e-10) ? t : R(1e-10)) - logQ);
    s[j] = scale * (exp_(logQ) - t);
  }
  const R total = block_sum(part);  // its __syncthreads also publishes s[] to the block
  if (threadIdx.x == 0) kl[b] = total;
  for (int64_t i = threadIdx.x; i < kmax * HI; i += blockDim.x) {
    const int64_t j = i / HI, h = i % HI;
    dub[i] = j < n ? bf(s[j] * wb[h] * dphi(ub[i], relu)) : R(0);
  }
  // dw[h] = Σ_j dI·φ(u): one warp per head, lanes over the keys.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int64_t h = warp; h < HI; h += warps) {
    R acc = 0;
    for (int64_t j = lane; j < n; j += 32) acc += s[j] * phi(ub[j * HI + h], relu);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) dw[b * HI + h] = acc;
  }
}

// The kink slack (core/result.hpp KinkSlack) of one chunk's rows: each term whose |u| lies within
// band·‖q_I[g,h]‖·‖k_I[key]‖ of 0 (a nonzero band: a zero vector gives u = 0 exactly, no flip)
// adds |dI·w| times max|k_I[key]| to its (row, head) and times max|q_I[g,h]| to its key.
// row_slack[b] = the row's largest head sum; key_slack[key] accumulates (atomics).
template <class R>
__global__ void kink_slack_k(RowKeys k, const R* u, const R* w, const R* dI, const R* kIg, const R* qI, int64_t HI,
                             int64_t DI, R band, R* row_slack, R* key_slack) {
  extern __shared__ unsigned char kink_smem[];
  R* qn = reinterpret_cast<R*>(kink_smem);  // [HI] ‖q_I[g,h]‖, then max|q_I[g,h]|, then the head sums
  R* qm = qn + HI;
  R* acc = qm + HI;
  const int64_t b = blockIdx.x, n = k.count[b], kmax = k.kmax;
  for (int64_t h = threadIdx.x; h < HI; h += blockDim.x) {
    R ss = 0, mx = 0;
    for (int64_t d = 0; d < DI; ++d) {
      const R q = qI[(b * HI + h) * DI + d];
      ss += q * q;
      mx = max(mx, abs(q));
    }
    qn[h] = sqrt(ss), qm[h] = mx, acc[h] = 0;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    R ss = 0, km = 0;
    for (int64_t d = 0; d < DI; ++d) {
      const R x = kIg[(b * kmax + j) * DI + d];
      ss += x * x;
      km = max(km, abs(x));
    }
    const R kn = sqrt(ss);
    for (int64_t h = 0; h < HI; ++h) {
      const R width = band * qn[h] * kn, uu = u[(b * kmax + j) * HI + h];
      if (width > R(0) && abs(uu) <= width) {
        const R c = abs(dI[b * kmax + j] * w[b * HI + h]);
        atomicAdd(&acc[h], c * km);
        atomicAdd(&key_slack[k.key(b, j)], c * qm[h]);
      }
    }
  }
  __syncthreads();
  R m = 0;
  for (int64_t h = threadIdx.x; h < HI; h += blockDim.x) m = max(m, acc[h]);
  m = block_max(m);
  if (threadIdx.x == 0) row_slack[b] = m;
}

}  // namespace

template <class R>
void kink_slack(const RowKeys& k, const R* u, const R* w, const R* dI, const R* kIg, const R* qI, int64_t HI,
                int64_t DI, R band, R* row_slack, R* key_slack) {
  if (k.B <= 0) return;
  kink_slack_k<<<static_cast<unsigned>(k.B), kBlock, 3 * HI * sizeof(R)>>>(k, u, w, dI, kIg, qI, HI, DI, band,
                                                                          row_slack, key_slack);
  DSA_GPU_LAUNCHED();
}

template <class R> void kl_target(const R* A, const int32_t* count, int64_t B, int64_t H, int64_t kmax, R* T) {
  if (B <= 0 || kmax <= 0) return;
  kl_target_k<<<static_cast<unsigned>(B), kBlock>>>(A, count, H, kmax, T);
  DSA_GPU_LAUNCHED();
}
template <class R>
void kl_rows(const R* u, const R* w, const R* T, const int32_t* count, int64_t B, int64_t HI, int64_t kmax, bool relu,
             R scale, R* kl, R* dw, R* du, R* scratch) {
  if (B <= 0) return;
  kl_rows_k<<<static_cast<unsigned>(B), kBlock>>>(u, w, T, count, HI, kmax, relu, scale, kl, dw, du, scratch);
  DSA_GPU_LAUNCHED();
}

#define DSA_INSTANTIATE(R)                                                                                   \
  template void kl_target<R>(const R*, const int32_t*, int64_t, int64_t, int64_t, R*);                       \
  template void kl_rows<R>(const R*, const R*, const R*, const int32_t*, int64_t, int64_t, int64_t, bool, R, \
                           R*, R*, R*, R*);                                                            \
  template void kink_slack<R>(const RowKeys&, const R*, const R*, const R*, const R*, const R*, int64_t, int64_t, \
                              R, R*, R*);
DSA_INSTANTIATE(float)
DSA_INSTANTIATE(double)

}  // namespace dsa::gpu
