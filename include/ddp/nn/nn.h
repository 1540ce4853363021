#pragma once
// The nn layer: modules, containers and initialisation.

#include "ddp/nn/container.h"
#include "ddp/nn/init.h"
#include "ddp/nn/module.h"
#include "ddp/nn/ordered_dict.h"
#include "ddp/nn/activation.h"
#include "ddp/nn/dropout.h"
#include "ddp/nn/embedding.h"
#include "ddp/nn/flatten.h"
#include "ddp/nn/layer_norm.h"
#include "ddp/nn/linear.h"
#include "ddp/nn/loss.h"
// Convolution-family layers.
#include "ddp/nn/batch_norm.h"
#include "ddp/nn/conv.h"
#include "ddp/nn/cudnn.h"
#include "ddp/nn/pooling.h"
