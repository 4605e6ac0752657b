// Online-softmax row bookkeeping shared by the attention forward kernels. A lane holds two rows,
// r0 and r0 + 8, of a 64-row head block (the mma.sync C layout, and the wgmma accumulator layout
// of each warp). In the mma.sync kernel the block's keys are split between two halves (the two
// warps of a head slice), which combine through shared memory; the wgmma kernel, whose warpgroups
// exchange the row max in a fixed order of their own, uses only quad_reduce.
#pragma once

#include <cmath>

namespace dsa::fused::softmax {

constexpr int kRows = 64;  // rows of a head block

// v[r] (r = 0, 1: rows r0, r0 + 8) reduced with op over the 4 lanes of the lane's group, which
// hold the row's other columns.
template <class Op>
__device__ __forceinline__ void quad_reduce(float (&v)[2], Op op) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    v[r] = op(v[r], __shfl_xor_sync(0xffffffffu, v[r], 1));
    v[r] = op(v[r], __shfl_xor_sync(0xffffffffu, v[r], 2));
  }
}

// quad_reduce, then published for both halves in x[2][kRows]. Every thread of the CTA calls it:
// it holds a __syncthreads(), after which combined() reads the row's value over both halves.
template <class Op>
__device__ __forceinline__ void publish_rows(float (&v)[2], float* x, int half, int r0, int t4, Op op) {
  quad_reduce(v, op);
  if (t4 == 0) {
    x[half * kRows + r0] = v[0];
    x[half * kRows + r0 + 8] = v[1];
  }
  __syncthreads();
}
template <class Op>
__device__ __forceinline__ float combined(const float* x, int r0, int r, Op op) {
  return op(x[r0 + 8 * r], x[kRows + r0 + 8 * r]);
}
// Both steps: v[r] becomes the row's value over the whole block.
template <class Op>
__device__ __forceinline__ void reduce_rows(float (&v)[2], float* x, int half, int r0, int t4, Op op) {
  publish_rows(v, x, half, r0, t4, op);
#pragma unroll
  for (int r = 0; r < 2; ++r) v[r] = combined(x, r0, r, op);
}

struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// A new tile's row max mt (log2 domain) into the running max: m_use is the max to subtract (0 while
// a row has seen no usable key, so never exp(−inf − −inf)), alpha = exp2(m_old − m_use) rescales
// what was accumulated, the running partial sum included.
__device__ __forceinline__ void update_max(const float (&mt)[2], float (&m_run)[2], float (&l_part)[2],
                                           float (&m_use)[2], float (&alpha)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float mn = fmaxf(m_run[r], mt[r]);
    m_use[r] = mn == -INFINITY ? 0.f : mn;
    alpha[r] = exp2f(m_run[r] - m_use[r]);
    m_run[r] = mn;
    l_part[r] *= alpha[r];
  }
}

}  // namespace dsa::fused::softmax
