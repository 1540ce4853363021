#pragma once
// Portability macros shared by host code and CUDA kernels.

#if defined(__CUDACC__)
#define DDP_HOST_DEVICE __host__ __device__
#define DDP_DEVICE __device__
#else
#define DDP_HOST_DEVICE
#define DDP_DEVICE
#endif

#define DDP_INLINE_HD DDP_HOST_DEVICE inline

#define DDP_STRINGIFY_IMPL(x) #x
#define DDP_STRINGIFY(x) DDP_STRINGIFY_IMPL(x)
