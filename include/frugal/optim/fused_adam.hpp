#pragma once
// FusedAdam: Adam with L2 weight decay as one fused kernel (frugal/optim/fused_adam_family.hpp).
#include "frugal/optim/fused_adam_family.hpp"
