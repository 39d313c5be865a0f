#pragma once
// Records, while alive, which ATen operators the current thread is inside, through a
// thread-local RecordFunction callback. When an exception escapes a forward or backward, the
// trail of the last operator entered says which op failed and on which tensors.
// RecordFunction stays out of this header: its layout depends on NDEBUG (see op_trail.cpp), so
// only that file, always compiled with NDEBUG, may see it.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frugal::detail {

struct OpRecord {
  std::string name;
  std::vector<std::string> inputs;              // "[2, 10] Float"
  std::vector<const void*> input_storages;      // storage identity, to find parameters (views share it)
};

class OpTrail {
 public:
  OpTrail();
  ~OpTrail();
  OpTrail(const OpTrail&) = delete;
  OpTrail& operator=(const OpTrail&) = delete;

  /// The operators that were active when the last one was entered, outermost first.
  std::vector<OpRecord> last_trail() const;
  void clear();

 private:
  uint64_t handle_;  // at::CallbackHandle
};

/// "[2, 10] Float" for a defined tensor.
std::string describe(const at::Tensor& tensor);

}  // namespace frugal::detail
