// connect() outside a launcher: a world of one with an explicit backend is a real process group.
#include <catch2/catch.hpp>

#include <csignal>

#include "support/fixtures.hpp"

using namespace frugal;

TEST_CASE("a real gloo group of one reduces, and a dead peer cannot kill the process by SIGPIPE", "[distributed]") {
  std::signal(SIGPIPE, SIG_DFL);
  World world;
  world.master_port = 29400 + static_cast<int64_t>(::getpid() % 1000);  // ctest runs tests side by side
  auto comm = connect(world, CommunicatorOptions().backend("gloo").timeout_seconds(30));
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
