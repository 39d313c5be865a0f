// LibTorch's RecordFunction has an extra member without NDEBUG, and the wheel was built with
// NDEBUG: code compiled without it (a Debug build of Frugal) would read fn.inputs() at the wrong
// offset. src/CMakeLists.txt compiles this file with NDEBUG and without the precompiled header.
#ifndef NDEBUG
#error "op_trail.cpp must be compiled with NDEBUG, as the LibTorch wheel was (RecordFunction's layout)"
#endif

#include "op_trail.hpp"

#include <ATen/record_function.h>
#include <c10/util/StringUtil.h>

#include <type_traits>

namespace frugal::detail {
namespace {

static_assert(std::is_same_v<at::CallbackHandle, uint64_t>, "OpTrail keeps the handle as uint64_t");

struct ThreadTrail {
  std::vector<OpRecord> active;
  std::vector<OpRecord> snapshot;
};
thread_local ThreadTrail trail;

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  OpRecord record{fn.name(), {}, {}};
  for (const c10::IValue& input : fn.inputs()) {
    if (!input.isTensor()) continue;
    const at::Tensor& t = input.toTensor();
    if (!t.defined()) continue;
    record.inputs.push_back(describe(t));
    record.input_storages.push_back(t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr);
  }
  trail.active.push_back(std::move(record));
  trail.snapshot = trail.active;
  return nullptr;
}

void on_exit(const at::RecordFunction&, at::ObserverContext*) {
  if (!trail.active.empty()) trail.active.pop_back();
}

}  // namespace

std::string describe(const at::Tensor& tensor) {
  return c10::str(tensor.sizes(), " ", tensor.scalar_type());
}

OpTrail::OpTrail() {
  clear();
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_enter, &on_exit).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
}

OpTrail::~OpTrail() { at::removeCallback(handle_); }

std::vector<OpRecord> OpTrail::last_trail() const { return trail.snapshot; }

void OpTrail::clear() {
  trail.active.clear();
  trail.snapshot.clear();
}

}  // namespace frugal::detail
