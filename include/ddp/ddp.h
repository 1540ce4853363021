#pragma once
// The umbrella header: everything a trainer needs.

#include "ddp/autograd/engine.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/autograd/gradcheck.h"
#include "ddp/autograd/node.h"
#include "ddp/core/device.h"
#include "ddp/core/dtype.h"
#include "ddp/core/env.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "ddp/tensor/tensor.h"
#include "ddp/version.h"
