// LR schedules: the multipliers torch.optim.lr_scheduler computes for the same settings.
#include <catch2/catch.hpp>

#include "frugal/core/lr_schedule.hpp"
#include "frugal/errors.hpp"

using namespace frugal;

TEST_CASE("linear warmup then decay, as BERT fine-tuning uses", "[core][lr]") {
  auto f = lr::linear_warmup_decay(10, 110);
  CHECK(f(0) == 0.0);
  CHECK(f(5) == Approx(0.5));
  CHECK(f(10) == Approx(1.0));
  CHECK(f(60) == Approx(0.5));
  CHECK(f(110) == 0.0);
  CHECK(f(200) == 0.0);
  CHECK_THROWS_AS(lr::linear_warmup_decay(10, 5), OptionError);
}

TEST_CASE("step decay and cosine", "[core][lr]") {
  auto s = lr::step_decay(3, 0.1);
  CHECK(s(2) == Approx(1.0));
  CHECK(s(3) == Approx(0.1));
  CHECK(s(7) == Approx(0.01));
  auto c = lr::cosine(0, 100, 0.1);
  CHECK(c(0) == Approx(1.0));
  CHECK(c(50) == Approx(0.55));
  CHECK(c(100) == Approx(0.1));
  CHECK(lr::constant()(12345) == 1.0);
}
