#pragma once
// A scope held open around a forward pass and its loss (an autocast guard): what a policy hands
// the Trainer's step, and what a probe step (frugal/core/probe_step.hpp) opens.

namespace frugal {

class ForwardGuard {
 public:
  virtual ~ForwardGuard() = default;
};

}  // namespace frugal
