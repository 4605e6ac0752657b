// Host <-> device copies of whole tensors through a pinned double buffer: the DMA of one chunk
// overlaps the multi-threaded copy (and fp64 <-> fp32 conversion, for the bf16 policy) of the
// previous one. Pageable cudaMemcpy of the multi-GiB outputs at production shapes ran at under
// 2 GB/s on the H200 machine and dominated the oracle's time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dsa::gpu {

// host[0, n) = dev[0, n) as double.
template <class R> void to_host(const R* dev, double* host, size_t n);
// dev[0, n) = host[0, n) as R (bf16 values: exact in fp32). Where every value is a bf16 number (the
// generated inputs, the bf16 outputs of a backend), 2 bytes a value cross the bus and are widened on
// the device: at production shapes the uploads of fp64 tensors had made the link the judge's
// bottleneck (5–6 GB per case at DeepSeek-V3.2, S 4096).
template <class R> void to_device(const double* host, R* dev, size_t n);
// dev[0, n) = the bf16 bit patterns of host[0, n); false (dev then partly written) where some value
// is not a bf16 number (NaN included: its payload may mean something).
bool to_device_bits(const double* host, uint16_t* dev, size_t n);

}  // namespace dsa::gpu
