// The Hopper (wgmma) attention forward of attention_fwd_sm90.cu, behind attention_forward().
#pragma once

#include "fused/attention.hpp"

namespace dsa::fused {

// True when this device and shape can take the wgmma kernel: compute capability 9.0 with sm_90a
// code in the binary, C = 512, C + R ≤ 576, R a multiple of 8.
bool attention_forward_sm90_fits(const AttnFwdArgs& a);
// Launches it; the caller (attention_forward) has checked attention_forward_sm90_fits(a).
void attention_forward_sm90(const AttnFwdArgs& a, cudaStream_t s);

}  // namespace dsa::fused
