#pragma once
// The nn layer: modules, containers and initialisation.

#include "ddp/nn/container.h"
#include "ddp/nn/init.h"
#include "ddp/nn/module.h"
#include "ddp/nn/ordered_dict.h"
