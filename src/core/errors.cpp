#include "frugal/errors.hpp"

#include <c10/util/Exception.h>

namespace frugal {

std::string message_of(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return c10_error ? c10_error->what_without_backtrace() : e.what();
}

}  // namespace frugal
