#pragma once
// Named tensors making up a component's saved state (a policy's, the loss scaler's): the
// checkpoint stores them under the owner's prefix.

#include <torch/types.h>

#include <map>
#include <string>

namespace frugal {

using StateDict = std::map<std::string, torch::Tensor>;

}  // namespace frugal
