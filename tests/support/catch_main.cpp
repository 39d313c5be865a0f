// Catch2's main, ending the process without LibTorch's teardown (frugal::exit_process): every
// test case is a process of its own under ctest, so the ~0.1 CPU-s each saves adds up.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "frugal/config/exit_process.hpp"

int main(int argc, char** argv) {
  int code = 0;
  {
    Catch::Session session;  // its reporter's streams are flushed and closed when it is destroyed
    code = session.run(argc, argv);
  }
  frugal::exit_process(code);
}
