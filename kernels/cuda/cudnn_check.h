#pragma once
// DDP_CUDNN_CHECK: raises ddp::CudnnError with the call, cuDNN's status
// string and file:line (internal: needs the cuDNN headers, so only *_cuda.cpp
// files include it).

#include <cudnn.h>

#include "ddp/core/error.h"

#define DDP_CUDNN_CHECK(expr)                                                          \
  do {                                                                                 \
    cudnnStatus_t ddp_st_ = (expr);                                                    \
    if (ddp_st_ != CUDNN_STATUS_SUCCESS)                                               \
      DDP_THROW(CudnnError, "{} failed: {} ({})", #expr, cudnnGetErrorString(ddp_st_), \
                int(ddp_st_));                                                         \
  } while (0)
