// The training log line reads like a person's: figures rounded to what a reader uses, and the
// policies' figures said again only when they change (the memory report once, at the start).
#include <catch2/catch.hpp>

#include "core/detail/step_line.hpp"

using frugal::detail::readable_figure;
using frugal::detail::readable_number;
using frugal::detail::StepLine;

TEST_CASE("figures are rounded and given their units", "[core][log]") {
  CHECK(readable_number(433.71) == "434");
  CHECK(readable_number(0.0372971) == "0.0373");
  CHECK(readable_number(2.304918) == "2.3");
  CHECK(readable_number(std::nan("")) == "nan");
  CHECK(readable_figure("peak_memory_mb", 452.797) == "peak memory 453 MB");
  CHECK(readable_figure("memory_gradients_mb", 5.66904) == "memory gradients 5.67 MB");
  CHECK(readable_figure("tflops", 0.0372971) == "0.0373 TFLOP/s");
  CHECK(readable_figure("tokens_per_s", 1234.4) == "1234 tokens/s");
  CHECK(readable_figure("mfu", 0.0373) == "mfu 3.73%");
  CHECK(readable_figure("loss_scale", 65536.0) == "loss scale 65536");
}

TEST_CASE("a figure that keeps its rounded value is said once, and again when it changes", "[core][log]") {
  StepLine line;
  const frugal::Metrics first{{"memory_parameters_mb", 5.66904}, {"loss_scale", 65536.0}, {"tflops", 0.0372971}};
  const std::string a = line.format({10, 0, 2.304918, 0.001, 433.7, 0.031}, first);
  CHECK(a == "step 10 epoch 0 loss 2.3 lr 0.001 434 samples/s data wait 3%, loss scale 65536, memory parameters 5.67 MB, "
             "0.0373 TFLOP/s");
  // The same figures, or ones that round alike: nothing after the step's own.
  const frugal::Metrics jitter{{"memory_parameters_mb", 5.66904}, {"loss_scale", 65536.0}, {"tflops", 0.037301}};
  CHECK(line.format({20, 0, 2.1, 0.001, 440.0, 0.0}, jitter) == "step 20 epoch 0 loss 2.1 lr 0.001 440 samples/s data wait 0%");
  // The loss scale halves: said, and only it.
  const frugal::Metrics halved{{"memory_parameters_mb", 5.66904}, {"loss_scale", 32768.0}, {"tflops", 0.037301}};
  CHECK(line.format({30, 1, 2.0, 0.0005, 441.0, 0.0}, halved) ==
        "step 30 epoch 1 loss 2 lr 0.0005 441 samples/s data wait 0%, loss scale 32768");
}
