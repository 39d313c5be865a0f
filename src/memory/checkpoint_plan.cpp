#include "frugal/memory/checkpoint_plan.hpp"

#include <c10/util/StringUtil.h>

#include "frugal/errors.hpp"

namespace frugal {

ActivationCheckpointing ActivationCheckpointing::parse(const std::string& text, const std::string& key) {
  ActivationCheckpointing plan;
  if (text == "off" || text == "false" || text.empty()) return plan;
  if (text == "full" || text == "true") {
    plan.scope = CheckpointScope::full;
  } else if (text == "attention") {
    plan.scope = CheckpointScope::attention;
  } else if (text == "stage") {
    plan.scope = CheckpointScope::stage;
  } else if (text.rfind("every:", 0) == 0) {
    const std::string k = text.substr(6);
    size_t used = 0;
    int64_t every = 0;
    try {
      every = std::stoll(k, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != k.size() || every < 1) {
      throw OptionError(key, c10::str(key, ": every:K needs a whole number K >= 1, got '", text, "'"));
    }
    plan.scope = CheckpointScope::every;
    plan.every = every;
  } else {
    throw OptionError(key, c10::str(key, " must be off, full, every:K, attention or stage, got '", text, "'"));
  }
  return plan;
}

std::string ActivationCheckpointing::to_string() const {
  switch (scope) {
    case CheckpointScope::off: return "off";
    case CheckpointScope::full: return "full";
    case CheckpointScope::every: return c10::str("every:", every);
    case CheckpointScope::attention: return "attention";
    case CheckpointScope::stage: return "stage";
  }
  return "?";
}

bool ActivationCheckpointing::covers_layer(int64_t index) const {
  if (scope == CheckpointScope::full) return true;
  if (scope == CheckpointScope::every) return index % every == 0;
  return false;
}

}  // namespace frugal
