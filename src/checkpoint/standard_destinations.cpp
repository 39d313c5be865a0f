// The one place that knows which destination classes the options can turn on.
#include "frugal/checkpoint/checkpoint_policy.hpp"
#include "frugal/checkpoint/local_destination.hpp"
#include "frugal/checkpoint/remote_destination.hpp"

namespace frugal {

std::vector<std::shared_ptr<CheckpointDestination>> standard_destinations(const CheckpointOptions& options) {
  std::vector<std::shared_ptr<CheckpointDestination>> out;
  out.push_back(std::make_shared<LocalDestination>(LocalRetention{options.retention(), options.archive_dir(), options.archive_after_days()}));
  if (options.remote().enabled()) out.push_back(std::make_shared<RemoteDestination>(options.remote(), options.retention()));
  return out;
}

}  // namespace frugal
