// The Hopper (wgmma) attention backward of attention_bwd_sm90.cu, behind attention_backward().
#pragma once

#include "fused/attention.hpp"

namespace dsa::fused {

// True when this device and shape can take the wgmma kernel: compute capability 9.0 with sm_90a
// code in the binary, C = 512, C + R ≤ 576, R a multiple of 8.
bool attention_backward_sm90_fits(const AttnBwdArgs& a);
// Launches it; the caller (attention_backward) has checked attention_backward_sm90_fits(a).
void attention_backward_sm90(const AttnBwdArgs& a, cudaStream_t s);

}  // namespace dsa::fused
