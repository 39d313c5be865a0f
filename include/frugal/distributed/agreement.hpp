#pragma once
// Ranks that disagree are refused at start-up: every rank's resolved configuration (after file,
// environment and command line) and data set identity are compared before any training or any
// write into the run directory. A mismatch (a per-node wrapper script, an environment variable set
// on one node, a stale config file on one host) ends every rank with the same ConfigError naming
// the first key that differs and its value on each rank.
//
//   frugal::check_ranks_agree(*communicator, values);   // add_policies does this

#include <map>
#include <set>
#include <string>

#include "frugal/distributed/communicator.hpp"

namespace frugal {

/// Options that may differ between ranks: the device each uses, its loader threads, what it
/// shows or logs. Everything else must be equal.
const std::set<std::string>& per_rank_options();

/// Compares `values` (key -> value as text) across the ranks, leaving out per_rank_options() and
/// `per_rank`. One small collective when they agree; ConfigError on every rank when not.
void check_ranks_agree(Communicator& communicator, const std::map<std::string, std::string>& values,
                       const std::set<std::string>& per_rank = {});

}  // namespace frugal
