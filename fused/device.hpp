// Device discovery (plain C++: the harness and the tools include it without nvcc).
#pragma once

#include <stdexcept>
#include <string>

namespace dsa::fused {

// Number of CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();
std::string device_name(int device);
// "sm_90" for device 0; "" without a device.
std::string device_arch(int device);
// "0000:3b:00.0": the device's PCI address, which names the physical GPU whatever
// CUDA_VISIBLE_DEVICES a process was given ("" when unknown).
std::string device_pci_bus_id(int device);
// CUDA versions as "13.0" ("" when unknown): the installed driver's API version and this runtime's.
std::string driver_version();
std::string runtime_version();
// True when the current device is compute capability 9.0 with at least smem_bytes of opt-in shared
// memory per block and `kernel` (a __global__ function) holds sm_90a machine code: a build for other
// targets has only the compute_80 trap of a wgmma kernel. False without a device.
bool sm90a_kernel_fits(const void* kernel, int smem_bytes);
// The latent widths both wgmma attention kernels take: C = 512, R a multiple of 8, C + R ≤ 576
// (nine 64-column atoms).
bool sm90a_latent_width(int C, int R);
// What forcing a wgmma kernel onto a shape or device it does not take throws: `who`, the rule, the shape.
std::invalid_argument sm90a_kernel_refused(const std::string& who, int C, int R);

}  // namespace dsa::fused
