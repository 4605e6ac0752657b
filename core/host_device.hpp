// DSA_HD marks a function both the CPU code and the CUDA kernels call (one definition for both); a
// plain C++ compiler sees an ordinary inline function.
#pragma once

#ifdef __CUDACC__
#define DSA_HD __host__ __device__
#else
#define DSA_HD
#endif
