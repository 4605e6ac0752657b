// The comparison's pass (check/compare_partial.hpp) over tensors the oracle kept on the device:
// one block per chunk of kCompareChunk elements, each thread folding its strided elements with
// compare_element, the block merging the threads' partials in a fixed tree. The figures that are
// maxima, counts and positions equal the CPU pass's; the sums (RMSE, cosine) differ only in their
// order of addition.
#include "check/compare.hpp"
#include "check/gpu/cuda_util.hpp"
#include "check/gpu/held.hpp"
#include "check/gpu/host_transfer.hpp"

#include <algorithm>

namespace dsa::gpu {
namespace {

constexpr int kThreads = 256;

template <class L>
__global__ void compare_chunks_k(const double* fused, const double* exact, const L* lowp, int64_t n,
                                 const uint8_t* pad_row, int64_t per_row, ComparePartial* out) {
  // Raw storage: a __shared__ array may not have a constructor run.
  __shared__ alignas(ComparePartial) unsigned char raw[kThreads * sizeof(ComparePartial)];
  ComparePartial* part = reinterpret_cast<ComparePartial*>(raw);
  const int64_t c = blockIdx.x, begin = c * kCompareChunk;
  const int64_t end = n < begin + kCompareChunk ? n : begin + kCompareChunk;
  ComparePartial p;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads)
    compare_element(p, i, fused[i], exact[i], lowp ? double(lowp[i]) : 0.0, lowp != nullptr,
                    pad_row && pad_row[i / per_row]);
  part[threadIdx.x] = p;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) merge(part[threadIdx.x], part[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[c] = part[0];
}

template <class T>
__global__ void count_nonfinite_k(const T* x, int64_t n, bool neg_inf_allowed, unsigned long long* count) {
  unsigned long long mine = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = double(x[i]);
    mine += !isfinite(v) && !(neg_inf_allowed && v < 0 && isinf(v));
  }
  if (mine) atomicAdd(count, mine);
}

}  // namespace

std::vector<ComparePartial> compare_partials(const double* fused, const HeldTensor& exact, const HeldTensor* lowp,
                                             const uint8_t* pad_row, int64_t per_row) {
  const int64_t n = exact.size, chunks = (n + kCompareChunk - 1) / kCompareChunk;
  std::vector<ComparePartial> parts(static_cast<size_t>(chunks));
  if (chunks == 0) return parts;
  DeviceArray<ComparePartial> out(static_cast<size_t>(chunks));
  if (exact.fp32) fail("the exact side is held in fp64", __FILE__, __LINE__);
  const auto* x = static_cast<const double*>(exact.data());
  if (!lowp)
    compare_chunks_k<float><<<unsigned(chunks), kThreads>>>(fused, x, nullptr, n, pad_row, per_row, out.get());
  else if (lowp->fp32)
    compare_chunks_k<float><<<unsigned(chunks), kThreads>>>(fused, x, static_cast<const float*>(lowp->data()), n,
                                                            pad_row, per_row, out.get());
  else
    compare_chunks_k<double><<<unsigned(chunks), kThreads>>>(fused, x, static_cast<const double*>(lowp->data()), n,
                                                             pad_row, per_row, out.get());
  DSA_GPU_LAUNCHED();
  DSA_GPU_CUDA(cudaMemcpy(parts.data(), out.get(), parts.size() * sizeof(ComparePartial), cudaMemcpyDeviceToHost));
  return parts;
}

int64_t count_nonfinite(const HeldTensor& t, bool neg_inf_allowed) {
  if (t.size == 0) return 0;
  DeviceArray<unsigned long long> count(1);
  const unsigned blocks = unsigned(std::min<int64_t>((t.size + 255) / 256, 4096));
  if (t.fp32)
    count_nonfinite_k<<<blocks, 256>>>(static_cast<const float*>(t.data()), t.size, neg_inf_allowed, count.get());
  else
    count_nonfinite_k<<<blocks, 256>>>(static_cast<const double*>(t.data()), t.size, neg_inf_allowed, count.get());
  DSA_GPU_LAUNCHED();
  return static_cast<int64_t>(count.download()[0]);
}

double value_at(const HeldTensor& t, int64_t i) {
  if (t.fp32) {
    float v = 0;
    DSA_GPU_CUDA(cudaMemcpy(&v, static_cast<const float*>(t.data()) + i, sizeof v, cudaMemcpyDeviceToHost));
    return v;
  }
  double v = 0;
  DSA_GPU_CUDA(cudaMemcpy(&v, static_cast<const double*>(t.data()) + i, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

TensorD to_host(const HeldTensor& t) {
  TensorD out(t.shape, Uninitialized{});
  if (t.fp32)
    to_host<float>(static_cast<const float*>(t.data()), out.data.data(), out.data.size());
  else
    to_host<double>(static_cast<const double*>(t.data()), out.data.data(), out.data.size());
  return out;
}

}  // namespace dsa::gpu
