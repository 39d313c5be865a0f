#pragma once
// FusedAdamW: AdamW (decoupled weight decay) as one fused kernel (frugal/optim/fused_adam_family.hpp).
#include "frugal/optim/fused_adam_family.hpp"
