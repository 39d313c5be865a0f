// Launched N times by torchrun (tests/distributed/collectives_test.sh): checks all_reduce (sum,
// max), broadcast and barrier across the ranks over gloo, and with `die` makes rank 1 exit early
// so that the others must fail with a CommunicationError within the timeout.
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "frugal/config/config.hpp"
#include "frugal/config/exit_process.hpp"
#include "frugal/distributed/communicator.hpp"

int run(int argc, char** argv) {
  const bool die = argc > 1 && std::string(argv[1]) == "die";
  const bool mismatch = argc > 1 && std::string(argv[1]) == "mismatch";
  const frugal::World world = frugal::detect_world(frugal::process_environment());
  auto comm = frugal::connect(world, frugal::CommunicatorOptions().backend(frugal::CollectiveBackend::gloo).timeout_seconds(die ? 5 : 60));
  const int64_t r = comm->rank(), n = comm->world_size();

  std::vector<torch::Tensor> sum{torch::full({1000}, static_cast<float>(r + 1)), torch::arange(3, torch::kDouble) * r};
  comm->all_reduce(sum);
  const float expected = static_cast<float>(n * (n + 1) / 2);
  bool ok = torch::all(sum[0] == expected).item<bool>() &&
            torch::equal(sum[1], torch::arange(3, torch::kDouble) * static_cast<double>(n * (n - 1) / 2));
  std::vector<torch::Tensor> max{torch::tensor({static_cast<float>(r)})};
  comm->all_reduce(max, frugal::ReduceOp::max);
  ok = ok && max[0].item<float>() == static_cast<float>(n - 1);
  std::vector<torch::Tensor> from_root{torch::full({4}, static_cast<float>(r == 0 ? 42 : -1))};
  comm->broadcast(from_root, 0);
  ok = ok && torch::all(from_root[0] == 42.0f).item<bool>();
  comm->barrier();
  if (!ok) {
    std::cerr << "rank " << r << ": wrong collective result\n";
    return 1;
  }
  std::cout << "rank " << r << " of " << n << ": collectives ok" << std::endl;
  if (mismatch) {  // rank 1 sends a longer all-reduce than the others: a collective mismatch
    std::vector<torch::Tensor> t{torch::ones({r == 1 ? 4096 : 1024})};
    comm->all_reduce(t);
    comm->barrier();
    std::cout << "rank " << r << ": the mismatched all_reduce returned" << std::endl;
    return 0;
  }
  if (!die) return 0;

  if (r == 1) return 0;  // rank 1 leaves; the others' next collective must fail, not hang
  // Rank 1 is surely gone before the others send: a write to its closed sockets must become an
  // error, not a SIGPIPE that kills the process (found under load in CI).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto start = std::chrono::steady_clock::now();
  try {
    std::vector<torch::Tensor> t{torch::ones({1 << 20})};
    comm->all_reduce(t);
    std::cerr << "rank " << r << ": all_reduce with a dead peer succeeded\n";
    return 1;
  } catch (const frugal::CommunicationError& e) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "rank " << r << ": failed after " << seconds << " s: " << std::string(e.what()).substr(0, 160) << std::endl;
    // torchrun stops the other ranks as soon as one exits: give a slower survivor (a sanitizer
    // build) time to report its own failure first.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    return seconds < 30 ? 7 : 1;  // 7: the expected, prompt failure
  }
}

int run_or_say(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "probe: " << e.what() << "\n";
    return 1;
  }
}

int main(int argc, char** argv) { frugal::exit_process(run_or_say(argc, argv)); }
