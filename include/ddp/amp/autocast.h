#pragma once
// ddp::amp::Autocast and its policy table. They are defined in the tensor
// layer (ddp/tensor/autocast.h), below the ops that consult them; see the
// Layering paragraph of Note [Autocast policy]. This is the amp layer's
// public name for them.

#include "ddp/tensor/autocast.h"
