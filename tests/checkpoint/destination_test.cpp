// Checkpoint destinations: the retention rule every destination applies, and a destination of
// the test's own (a mirror directory, as a parallel file system would be) plugged into the policy
// without the policy knowing it: it hears every checkpoint, brings a newer one to a fresh run
// directory, and a commit it does not get fails the fit naming it.
#include <catch2/catch.hpp>

#include "frugal/checkpoint/checkpoint_destination.hpp"
#include "support/checkpointed_run.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> kept(const Retained& r) {
  std::set<std::string> all(r.newest);
  all.insert(r.best.begin(), r.best.end());
  return {all.begin(), all.end()};
}

// Copies each published checkpoint folder into `mirror_`; at a resume copies the newest one there
// back when the local directory has nothing as new.
class MirrorDirectory : public CheckpointDestination {
 public:
  MirrorDirectory(fs::path mirror, std::string refuse_commit = "") : mirror_(std::move(mirror)), refuse_(std::move(refuse_commit)) {}
  std::string name() const override { return "mirror"; }
  std::string where() const override { return mirror_.string(); }
  bool off_machine() const override { return true; }
  std::string location_of(const std::string& name) const override { return (mirror_ / name).string(); }
  void open(const TrainingRun& /*run*/, const CheckpointStore& local) override {
    local_ = &local;
    events.push_back("open");
  }
  std::vector<std::string> fetch_newer() override {
    events.push_back("fetch_newer");
    const auto theirs = CheckpointStore(mirror_).find_latest_valid();
    const auto ours = local_->find_latest_valid();
    if (!theirs || (ours && ours->info.step >= theirs->info.step)) return {};
    const fs::path incoming = local_->root() / "incoming.tmp";
    fs::create_directories(local_->root());
    fs::copy(theirs->info.dir, incoming, fs::copy_options::recursive);
    local_->adopt(incoming, theirs->info.dir.filename().string());
    return {};
  }
  void published(const CheckpointInfo& info) override {
    fs::create_directories(mirror_);
    fs::copy(info.dir, mirror_ / info.dir.filename(), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    events.push_back("published " + std::to_string(info.step));
  }
  std::string wait_committed(Clock::time_point /*since*/) override {
    events.push_back("wait_committed");
    return refuse_;
  }
  void close() override { events.push_back("close"); }

  std::vector<std::string> events;

 private:
  fs::path mirror_;
  std::string refuse_;
  const CheckpointStore* local_ = nullptr;
};

CheckpointedRun make_run(const fs::path& dir, int64_t max_steps, uint64_t init_seed) {
  return checkpointed_run(TrainerOptions().device("cpu").run_dir(dir.string()).max_epochs(10).max_steps(max_steps),
                          CheckpointOptions().every_n_steps(5), CheckpointedRunOptions().init_seed(init_seed));
}

}  // namespace

TEST_CASE("retention is one rule: the newest keep_last and the best keep_best by the monitored value", "[checkpoint][destination]") {
  const std::vector<RetentionCandidate> candidates{
      {"ckpt-1", 0.9}, {"ckpt-2", 0.3}, {"ckpt-3", std::nullopt}, {"ckpt-4", 0.3}, {"ckpt-5", std::nan("")}, {"ckpt-6", 0.8}};
  CHECK(kept(retain(candidates, {2, 0, "loss", MonitorMode::min})) == std::vector<std::string>{"ckpt-5", "ckpt-6"});
  // Equal scores: the older reached it first. Unknown and NaN values are never ranked.
  CHECK(kept(retain(candidates, {1, 1, "loss", MonitorMode::min})) == std::vector<std::string>{"ckpt-2", "ckpt-6"});
  CHECK(kept(retain(candidates, {1, 2, "loss", MonitorMode::max})) == std::vector<std::string>{"ckpt-1", "ckpt-6"});
  CHECK(kept(retain(candidates, {0, 0, "loss", MonitorMode::min})).size() == candidates.size());  // keep_last 0: all
  CHECK(kept(retain({}, {3, 1, "loss", MonitorMode::min})).empty());
}

TEST_CASE("a destination of one's own hears every checkpoint, brings a newer one to a fresh directory, and fails the fit without its commit",
          "[checkpoint][destination]") {
  torch::set_num_threads(1);
  const auto root = scratch_dir("destination");
  CheckpointedRun clean = make_run(root / "clean", 15, 1);
  clean.trainer->fit();

  // The first machine trains 10 steps; its checkpoints also go to the mirror.
  auto mirror = std::make_shared<MirrorDirectory>(root / "mirror");
  CheckpointedRun first = make_run(root / "first", 10, 1);
  first.checkpoint->add_destination(mirror);
  first.trainer->fit();
  CHECK(mirror->events == std::vector<std::string>{"open", "fetch_newer", "published 5", "published 10", "wait_committed", "close"});
  CHECK(CheckpointStore(root / "mirror").list().size() == 2);

  // A fresh machine (an empty run directory) resumes from the mirror's newest and ends where an
  // uninterrupted run ends.
  auto second_mirror = std::make_shared<MirrorDirectory>(root / "mirror");
  CheckpointedRun second = make_run(root / "second", 15, 3);
  second.checkpoint->add_destination(second_mirror);
  const auto result = second.trainer->fit();
  CHECK(result.state.step == 15);
  CHECK(second_mirror->events == std::vector<std::string>{"open", "fetch_newer", "published 15", "wait_committed", "close"});
  CHECK(torch::equal(flat_parameters(*clean.net), flat_parameters(*second.net)));
  // Without the destination the fresh directory starts over and ends elsewhere.
  CheckpointedRun alone = make_run(root / "alone", 15, 3);
  alone.trainer->fit();
  CHECK_FALSE(torch::equal(flat_parameters(*clean.net), flat_parameters(*alone.net)));

  // A destination that does not commit fails the end of the fit, naming it and why.
  CheckpointedRun third = make_run(root / "third", 5, 1);
  third.checkpoint->add_destination(std::make_shared<MirrorDirectory>(root / "full", "the mirror is full"));
  try {
    third.trainer->fit();
    FAIL("the fit ended without the mirror's commit");
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("is only local: it was not committed to " + (root / "full").string() + ": the mirror is full"));
  }
  CHECK_THROWS_AS(third.checkpoint->add_destination(nullptr), OptionError);
}
