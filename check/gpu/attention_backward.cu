// Sparse MLA backward pieces that are not GEMMs (SPEC.md §6): Δ, dlogit, the explicit path's
// per-head products and key-side accumulation, and the absorbed path's split of dK~ into dc, dk_pe.
#include "check/gpu/device_common.cuh"
#include "check/gpu/kernels.hpp"
#include "core/bands.hpp"

namespace dsa::gpu {
namespace {

// Warp per row, lanes over its elements: a thread per row read rows len apart (uncoalesced).
template <class R> __global__ void row_dots_k(const R* a, const R* b, int64_t n, int64_t len, R* out) {
  const int64_t r = blockIdx.x * int64_t(kBlock / 32) + (threadIdx.x >> 5);
  if (r >= n) return;
  const int lane = threadIdx.x & 31;
  R acc = 0;
  for (int64_t c = lane; c < len; c += 32) acc += a[r * len + c] * b[r * len + c];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[r] = acc;
}

// Block per (b, h) row: Δ, then dl over the row's slots (dP is read before dl overwrites it: the
// block's reduction lies between).
template <class R>
__global__ void dlogit_rows_k(const R* P, R* dP_dl, const int32_t* count, int64_t H, int64_t kmax, bool one_hot_only,
                              R* delta) {
  const int64_t bh = blockIdx.x, n = count[bh / H];
  const R* p = P + bh * kmax;
  R* d = dP_dl + bh * kmax;
  R acc = 0;
  int not_one_hot = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    not_one_hot |= !(p[j] == R(0) || p[j] == R(1));
    acc += p[j] * d[j];
  }
  acc = block_sum(acc);  // its barriers order every read of d above before the writes below
  const bool one_hot = !__syncthreads_or(not_one_hot);
  const R D = !one_hot_only || one_hot ? acc : delta[bh];
  if (threadIdx.x == 0) delta[bh] = D;
  for (int64_t j = threadIdx.x; j < kmax; j += blockDim.x) d[j] = j < n ? bf(p[j] * (d[j] - D)) : R(0);
}

// Block per (b, h) row, before dlogit_rows (dP still in dP): the Δ slack's terms (core/result.hpp
// DeltaSlack). band = 2⁻⁹·(Σ|dOx·Ox| + Σ_j P·|dP|) (delta_band); the shift vector Σ_j P_j·K~_j is
// O_lat itself in its first C columns (absorbed: through W_UK by Cauchy–Schwarz, W_norm[h] =
// max_d ‖W_UK[h, d, :]‖), Σ_j P_j·k_nope[key, h] on the explicit path, Σ_j P_j·k_pe[key] for dq_pe.
template <class R>
__global__ void delta_slack_k(RowKeys k, const R* P, const R* dP, int64_t H, const R* Kg, int64_t C, int64_t Rr,
                              const R* dOx, const R* Ox, int64_t width, const R* W_norm, const R* k_nope, int64_t Dn,
                              R s, R* slack_nope, R* slack_pe, KeySlack<R> ks) {
  const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, n = k.count[b], kmax = k.kmax, CR = C + Rr;
  const R* p = P + bh * kmax;
  R pd = 0, od = 0, on = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) pd += p[j] * abs(dP[bh * kmax + j]);
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    const R o = Ox[bh * width + c];
    od += abs(dOx[bh * width + c] * o);
    on += o * o;
  }
  pd = block_sum(pd), od = block_sum(od), on = block_sum(on);
  const R shift = abs(s) * delta_band(od, pd);
  R pe = 0;
  for (int64_t r = threadIdx.x; r < Rr; r += blockDim.x) {
    R acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += p[j] * Kg[(b * kmax + j) * CR + C + r];
    pe = max(pe, abs(acc));
  }
  pe = block_max(pe);
  R nope = 0;
  if (W_norm) {
    nope = sqrt(on) * W_norm[h];
  } else {
    for (int64_t e = threadIdx.x; e < Dn; e += blockDim.x) {
      R acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += p[j] * k_nope[(k.key(b, j) * H + h) * Dn + e];
      nope = max(nope, abs(acc));
    }
    nope = block_max(nope);
  }
  if (threadIdx.x == 0) slack_nope[bh] = shift * nope, slack_pe[bh] = shift * pe;
  // Key side: dK~[key] += s·dS·Q~[b, h] with dS off by the fp32 noise of dP − Δ (explicit: Q~[:C] =
  // q_nope·W_UK[h], Cauchy–Schwarz).
  const R noise = abs(s) * delta_noise_band(width, od, pd);
  R qn = 0, qp = 0;
  if (ks.Qt) {
    const R* q = ks.Qt + bh * CR;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) qn = max(qn, abs(q[c]));
    for (int64_t r = threadIdx.x; r < Rr; r += blockDim.x) qp = max(qp, abs(q[C + r]));
    qn = block_max(qn);
  } else {
    for (int64_t e = threadIdx.x; e < Dn; e += blockDim.x) qn += ks.q_nope[bh * Dn + e] * ks.q_nope[bh * Dn + e];
    for (int64_t r = threadIdx.x; r < Rr; r += blockDim.x) qp = max(qp, abs(ks.q_pe[bh * Rr + r]));
    qn = sqrt(block_sum(qn)) * ks.W_col[h];
  }
  qp = block_max(qp);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const int64_t t = k.key(b, j);
    atomicAdd(ks.key_nope + t, p[j] * noise * qn);
    atomicAdd(ks.key_pe + t, p[j] * noise * qp);
  }
}

// Block per head: max over c of ‖W[h, :, c]‖ (rows × len per head).
template <class R> __global__ void col_norm_max_k(const R* W, int64_t rows, int64_t len, R* out) {
  R m = 0;
  for (int64_t c = threadIdx.x; c < len; c += blockDim.x) {
    R ss = 0;
    for (int64_t d = 0; d < rows; ++d) ss += W[(blockIdx.x * rows + d) * len + c] * W[(blockIdx.x * rows + d) * len + c];
    m = max(m, sqrt(ss));
  }
  m = block_max(m);
  if (threadIdx.x == 0) out[blockIdx.x] = m;
}

// Block per head: max over d of ‖W[h, d, :]‖ (rows of len).
template <class R> __global__ void row_norm_max_k(const R* W, int64_t rows, int64_t len, R* out) {
  R m = 0;
  for (int64_t d = threadIdx.x; d < rows; d += blockDim.x) {
    R ss = 0;
    for (int64_t c = 0; c < len; ++c) ss += W[(blockIdx.x * rows + d) * len + c] * W[(blockIdx.x * rows + d) * len + c];
    m = max(m, sqrt(ss));
  }
  m = block_max(m);
  if (threadIdx.x == 0) out[blockIdx.x] = m;
}

template <class R>
__global__ void explicit_dP_k(RowKeys k, const R* dO, const R* v, int64_t H, int64_t Dv, R* dP) {
  DSA_GRID_STRIDE(i, k.B * H * k.kmax) {
    const int64_t j = i % k.kmax, bh = i / k.kmax, h = bh % H, b = bh / H;
    if (j >= k.count[b]) {
      dP[i] = 0;
      continue;
    }
    const R* g = dO + bh * Dv;
    const R* vv = v + (k.key(b, j) * H + h) * Dv;
    R acc = 0;
    for (int64_t e = 0; e < Dv; ++e) acc += g[e] * vv[e];
    dP[i] = acc;
  }
}

template <class R>
__global__ void explicit_dq_k(RowKeys k, const R* dl, const R* k_nope, const R* k_pe, int64_t H, int64_t Dn,
                              int64_t Rr, R s, R* dq_nope, R* dq_pe) {
  const int64_t W = Dn + Rr;
  DSA_GRID_STRIDE(i, k.B * H * W) {
    const int64_t d = i % W, bh = i / W, h = bh % H, b = bh / H;
    const R* g = dl + bh * k.kmax;
    R acc = 0;
    for (int64_t j = 0; j < k.count[b]; ++j) {
      const int64_t t = k.key(b, j);
      acc += g[j] * (d < Dn ? k_nope[(t * H + h) * Dn + d] : k_pe[t * Rr + (d - Dn)]);
    }
    // dQ~ is rounded on output (SPEC.md §8); dq_nope / dq_pe are its two halves.
    if (d < Dn) dq_nope[bh * Dn + d] = bf(s * acc);
    else dq_pe[bh * Rr + (d - Dn)] = bf(s * acc);
  }
}

template <class R>
__global__ void explicit_dkv_k(RowKeys k, const R* dl, const R* Pb, const R* q_nope, const R* q_pe, const R* dO,
                               int64_t H, int64_t Dn, int64_t Rr, int64_t Dv, R s, R* dKn, R* dKpe, R* dVv) {
  // One thread per (b, j, column) over the key row's columns [H·Dn | Rr | H·Dv].
  const int64_t W = H * Dn + Rr + H * Dv;
  DSA_GRID_STRIDE(i, k.B * k.kmax * W) {
    const int64_t col = i % W, slot = i / W, b = slot / k.kmax, j = slot % k.kmax;
    if (j >= k.count[b]) continue;
    const int64_t t = k.key(b, j);
    if (col < H * Dn) {
      const int64_t h = col / Dn, d = col % Dn;
      atomicAdd(&dKn[t * H * Dn + col], s * dl[(b * H + h) * k.kmax + j] * q_nope[(b * H + h) * Dn + d]);
    } else if (col < H * Dn + Rr) {
      const int64_t r = col - H * Dn;
      R acc = 0;
      for (int64_t h = 0; h < H; ++h) acc += dl[(b * H + h) * k.kmax + j] * q_pe[(b * H + h) * Rr + r];
      atomicAdd(&dKpe[t * Rr + r], s * acc);
    } else {
      const int64_t c = col - H * Dn - Rr, h = c / Dv, e = c % Dv;
      atomicAdd(&dVv[t * H * Dv + c], Pb[(b * H + h) * k.kmax + j] * dO[(b * H + h) * Dv + e]);
    }
  }
}

template <class R>
__global__ void absorbed_key_grads_k(const R* dKt, int64_t Tp, int64_t C, int64_t Rr, R* dc, R* dk_pe) {
  const int64_t W = C + Rr;
  DSA_GRID_STRIDE(i, Tp * W) {
    const int64_t t = i / W, col = i % W;
    if (col < C) dc[t * C + col] = bf(dKt[i]);
    else dk_pe[t * Rr + (col - C)] = bf(dKt[i]);
  }
}

}  // namespace

template <class R> void row_dots(const R* a, const R* b, int64_t n, int64_t len, R* out) {
  if (n <= 0) return;
  row_dots_k<<<static_cast<unsigned>((n + kBlock / 32 - 1) / (kBlock / 32)), kBlock>>>(a, b, n, len, out);
  DSA_GPU_LAUNCHED();
}
template <class R>
void dlogit_rows(const R* P, R* dP_dl, const int32_t* count, int64_t B, int64_t H, int64_t kmax, bool one_hot_only,
                 R* delta) {
  if (B * H <= 0 || kmax <= 0) return;
  dlogit_rows_k<<<static_cast<unsigned>(B * H), kBlock>>>(P, dP_dl, count, H, kmax, one_hot_only, delta);
  DSA_GPU_LAUNCHED();
}
template <class R>
void delta_slack(const RowKeys& k, const R* P, const R* dP, int64_t H, const R* Kg, int64_t C, int64_t Rr,
                 const R* dOx, const R* Ox, int64_t width, const R* W_norm, const R* k_nope, int64_t Dn, R s,
                 R* slack_nope, R* slack_pe, const KeySlack<R>& ks) {
  if (k.B * H <= 0) return;
  delta_slack_k<<<static_cast<unsigned>(k.B * H), kBlock>>>(k, P, dP, H, Kg, C, Rr, dOx, Ox, width, W_norm, k_nope, Dn,
                                                            s, slack_nope, slack_pe, ks);
  DSA_GPU_LAUNCHED();
}
template <class R> void col_norm_max(const R* W, int64_t heads, int64_t rows, int64_t len, R* out) {
  if (heads <= 0) return;
  col_norm_max_k<<<static_cast<unsigned>(heads), kBlock>>>(W, rows, len, out);
  DSA_GPU_LAUNCHED();
}
template <class R> void row_norm_max(const R* W, int64_t heads, int64_t rows, int64_t len, R* out) {
  if (heads <= 0) return;
  row_norm_max_k<<<static_cast<unsigned>(heads), kBlock>>>(W, rows, len, out);
  DSA_GPU_LAUNCHED();
}
template <class R> void explicit_dP(const RowKeys& k, const R* dO, const R* v, int64_t H, int64_t Dv, R* dP) {
  if (k.B * H * k.kmax <= 0) return;
  explicit_dP_k<<<grid_for(k.B * H * k.kmax), kBlock>>>(k, dO, v, H, Dv, dP);
  DSA_GPU_LAUNCHED();
}
template <class R>
void explicit_dq(const RowKeys& k, const R* dl, const R* k_nope, const R* k_pe, int64_t H, int64_t Dn, int64_t Rr,
                 R s, R* dq_nope, R* dq_pe) {
  if (k.B * H <= 0) return;
  explicit_dq_k<<<grid_for(k.B * H * (Dn + Rr)), kBlock>>>(k, dl, k_nope, k_pe, H, Dn, Rr, s, dq_nope, dq_pe);
  DSA_GPU_LAUNCHED();
}
template <class R>
void explicit_dkv(const RowKeys& k, const R* dl, const R* Pb, const R* q_nope, const R* q_pe, const R* dO, int64_t H,
                  int64_t Dn, int64_t Rr, int64_t Dv, R s, R* dKn, R* dKpe, R* dVv) {
  const int64_t n = k.B * k.kmax * (H * Dn + Rr + H * Dv);
  if (n <= 0) return;
  explicit_dkv_k<<<grid_for(n), kBlock>>>(k, dl, Pb, q_nope, q_pe, dO, H, Dn, Rr, Dv, s, dKn, dKpe, dVv);
  DSA_GPU_LAUNCHED();
}
template <class R>
void absorbed_key_grads(const R* dKt, int64_t Tp, int64_t C, int64_t Rr, R* dc, R* dk_pe) {
  if (Tp <= 0) return;
  absorbed_key_grads_k<<<grid_for(Tp * (C + Rr)), kBlock>>>(dKt, Tp, C, Rr, dc, dk_pe);
  DSA_GPU_LAUNCHED();
}

#define DSA_INSTANTIATE(R)                                                                                          \
  template void row_dots<R>(const R*, const R*, int64_t, int64_t, R*);                                              \
  template void dlogit_rows<R>(const R*, R*, const int32_t*, int64_t, int64_t, int64_t, bool, R*);                \
  template void delta_slack<R>(const RowKeys&, const R*, const R*, int64_t, const R*, int64_t, int64_t, const R*,     \
                               const R*, int64_t, const R*, const R*, int64_t, R, R*, R*, const KeySlack<R>&);      \
  template void row_norm_max<R>(const R*, int64_t, int64_t, int64_t, R*);                                           \
  template void col_norm_max<R>(const R*, int64_t, int64_t, int64_t, R*);                                           \
  template void explicit_dP<R>(const RowKeys&, const R*, const R*, int64_t, int64_t, R*);                           \
  template void explicit_dq<R>(const RowKeys&, const R*, const R*, const R*, int64_t, int64_t, int64_t, R, R*, R*); \
  template void explicit_dkv<R>(const RowKeys&, const R*, const R*, const R*, const R*, const R*, int64_t, int64_t, \
                                int64_t, int64_t, R, R*, R*, R*);                                                   \
  template void absorbed_key_grads<R>(const R*, int64_t, int64_t, int64_t, R*, R*);
DSA_INSTANTIATE(float)
DSA_INSTANTIATE(double)

}  // namespace dsa::gpu
