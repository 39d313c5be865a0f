// connect() outside a launcher: a world of one with an explicit backend is a real process group.
#include <catch2/catch.hpp>

#include <csignal>
#include <set>

#include "support/fixtures.hpp"

using namespace frugal;

TEST_CASE("a real gloo group of one reduces, and a dead peer cannot kill the process by SIGPIPE", "[distributed]") {
  std::signal(SIGPIPE, SIG_DFL);
  World world;
  world.master_port = 29400 + static_cast<int64_t>(::getpid() % 1000);  // ctest runs tests side by side
  auto comm = connect(world, CommunicatorOptions().backend(frugal::CollectiveBackend::gloo).timeout_seconds(30));
  CHECK(comm->backend() == "gloo");
  std::vector<torch::Tensor> t{torch::full({3}, 2.0f)};
  comm->all_reduce(t);
  CHECK(torch::equal(t[0], torch::full({3}, 2.0f)));
  CHECK(comm->any(true));
  CHECK_FALSE(comm->any(false));
  struct sigaction action {};
  sigaction(SIGPIPE, nullptr, &action);
  CHECK(action.sa_handler == SIG_IGN);
  std::signal(SIGPIPE, SIG_DFL);
}

TEST_CASE("with backend auto, a world of one needs no rendezvous", "[distributed]") {
  auto comm = connect(World{});
  CHECK(comm->backend() == "single");
  CHECK(comm->world_size() == 1);
}

namespace {

// Rank 0 of two whose peer resolved `peer`'s values: all_gather_text returns what the peer would
// send (its digest, then its text), computed by running the same check as rank 1 would.
class PeerCommunicator : public SingleProcessCommunicator {
 public:
  explicit PeerCommunicator(std::map<std::string, std::string> peer, std::set<std::string> skip = {})
      : peer_(std::move(peer)), skip_(std::move(skip)) {}
  int64_t world_size() const override { return 2; }
  std::vector<std::string> all_gather_text(const std::string& mine) override {
    // The peer's message of the same kind: a digest (16 hex digits) or the key/value lines.
    std::string theirs;
    for (const auto& [key, value] : peer_) {
      if (!per_rank_options().count(key) && !skip_.count(key)) theirs += key + '\t' + value + '\n';
    }
    if (mine.size() == 16 && mine.find('\t') == std::string::npos) theirs = theirs == last_text_ ? mine : std::string(16, '0');
    return {mine, theirs};
  }
  void expect_text(const std::map<std::string, std::string>& mine) {
    last_text_.clear();
    for (const auto& [key, value] : mine) {
      if (!per_rank_options().count(key) && !skip_.count(key)) last_text_ += key + '\t' + value + '\n';
    }
  }

 private:
  std::map<std::string, std::string> peer_;
  std::set<std::string> skip_;
  std::string last_text_;
};

}  // namespace

TEST_CASE("ranks agree on settings and data identity, per-rank options aside, or all are refused naming the key",
          "[distributed]") {
  const std::map<std::string, std::string> mine{{"trainer.max_epochs", "3"},
                                                {"trainer.device", "cuda:0"},
                                                {"data identity: training examples", "64"}};
  auto peer_with = [&](const std::string& key, const std::string& value) {
    auto peer = mine;
    peer[key] = value;
    PeerCommunicator comm(peer);
    comm.expect_text(mine);
    return comm;
  };
  auto same = peer_with("trainer.device", "cuda:1");  // per-rank: may differ
  CHECK_NOTHROW(check_ranks_agree(same, mine));
  auto other_data = peer_with("data identity: training examples", "96");
  CHECK_THROWS_WITH(check_ranks_agree(other_data, mine),
                    Catch::Contains("'data identity: training examples' is 64 on rank 0 and 96 on rank 1"));
  // The error lists exactly the keys the comparison skips.
  auto other_data_again = peer_with("data identity: training examples", "96");
  std::string message;
  try {
    check_ranks_agree(other_data_again, mine, {"model.cache_dir"});
  } catch (const ConfigError& e) {
    message = e.what();
  }
  for (const auto& key : per_rank_options()) CHECK_THAT(message, Catch::Contains(key));
  CHECK_THAT(message, Catch::Contains("model.cache_dir"));
  auto missing = mine;
  missing.erase("trainer.max_epochs");
  PeerCommunicator lacking(missing);
  lacking.expect_text(mine);
  CHECK_THROWS_WITH(check_ranks_agree(lacking, mine), Catch::Contains("'trainer.max_epochs' is 3 on rank 0 and (not set) on rank 1"));
  // A program's own per-rank key: compared unless the program names it.
  auto own = peer_with("model.cache_dir", "/scratch/node2");
  CHECK_THROWS_AS(check_ranks_agree(own, mine), ConfigError);
  auto theirs = mine;
  theirs["model.cache_dir"] = "/scratch/node2";
  PeerCommunicator named(theirs, {"model.cache_dir"});
  named.expect_text(mine);
  CHECK_NOTHROW(check_ranks_agree(named, mine, {"model.cache_dir"}));
}
