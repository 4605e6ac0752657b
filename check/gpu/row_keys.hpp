// The key set of each query row of one chunk, as the device kernels read it: either a list
// (S(g), the valid visible keys of the attention's index row, deduplicated) or a contiguous
// range (V(g), every visible key, for the dense loss). Chunks are consecutive global rows.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace dsa::gpu {

struct RowKeys {
  const int32_t* count = nullptr;   // [B] keys of each row
  const int64_t* offset = nullptr;  // [B] list form: start of the row in keys
  const int32_t* keys = nullptr;    // list form; nullptr selects the range form
  const int32_t* first = nullptr;   // [B] range form: the row's first key
  int64_t B = 0;                    // rows in the chunk
  int64_t kmax = 0;                 // slots per row in the padded [B, kmax, ...] buffers

  DSA_HD int64_t key(int64_t b, int64_t j) const { return keys ? keys[offset[b] + j] : first[b] + j; }
};

}  // namespace dsa::gpu
