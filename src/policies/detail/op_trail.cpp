#include "op_trail.hpp"

#include <c10/util/StringUtil.h>

namespace frugal::detail {
namespace {

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
