// The search-free quantizer (optim/detail/code_table): the nearest code on every float of [-1, 1]
// as the binary search gives it, and its vector paths equal to its scalar path on any input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "optim/detail/code_table.hpp"
#include "optim/detail/code_table_kernels.hpp"
#include "optim/detail/quantized_steps.hpp"
#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::detail;

namespace {

// The nearest code by binary search over the map, as the quantizer did before the table.
uint8_t searched(const float* map, float y) {
  const float* it = std::upper_bound(map, map + 256, y);
  const int below = it == map ? 0 : static_cast<int>(it - map) - 1;
  return nearest_code(map, below, y);
}

// Walks every float of [from, to] (ordered bit patterns, ascending values) through the table in
// chunks; the table's codes must never fall and must equal the search's at both ends of every run
// of one code. The search is monotone too, so they then agree on every float.
struct Sweep {
  const CodeTable& table;
  bool finite;  // the path for blocks known to be finite
  int64_t runs = 0, mismatches = 0, falls = 0;
  int prev_code = -1;
  float prev_value = 0;

  void check(float y, int code) {
    if (searched(table.codes(), y) != code) ++mismatches;
  }
  void walk(const std::vector<float>& values, const std::vector<uint8_t>& codes) {
    for (size_t i = 0; i < values.size(); ++i) {
      const int c = codes[i];
      if (c != prev_code) {
        if (prev_code >= 0) {
          if (c < prev_code) ++falls;
          check(prev_value, prev_code);  // the end of the previous run
        }
        check(values[i], c);  // the start of this one
        ++runs;
        prev_code = c;
      }
      prev_value = values[i];
    }
  }
};

void sweep_ascending(Sweep& sweep, bool negative_half, uint32_t top_bits) {
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<float> values;
  std::vector<uint8_t> codes(kChunk);
  values.reserve(kChunk);
  // Negative floats ascend as their magnitude falls: from -top down to -0, then 0 up to +top.
  const int64_t count = int64_t{top_bits} + 1;
  for (int64_t start = 0; start < count; start += static_cast<int64_t>(kChunk)) {
    values.clear();
    for (int64_t k = start; k < std::min<int64_t>(count, start + static_cast<int64_t>(kChunk)); ++k) {
      const uint32_t magnitude = negative_half ? top_bits - static_cast<uint32_t>(k) : static_cast<uint32_t>(k);
      values.push_back(std::bit_cast<float>(magnitude | (negative_half ? 0x80000000u : 0u)));
    }
    const auto n = static_cast<int64_t>(values.size());
    const int64_t done = vector_kernels().quantize(sweep.table, values.data(), 1.0f, sweep.finite, codes.data(), n);
    sweep.table.quantize_scalar(values.data() + done, 1.0f, codes.data() + done, n - done);
    codes.resize(values.size());
    sweep.walk(values, codes);
    codes.resize(kChunk);
  }
}

}  // namespace

TEST_CASE("the code table gives the searched nearest code on every float of [-1, 1]", "[optim][kernels]") {
  INFO("vector path: " << CodeTable::vector_path());
  for (const bool is_signed : {true, false}) {
    for (const bool finite : {true, false}) {
    const CodeTable table(dynamic_map(is_signed));
    Sweep sweep{table, finite};
    const uint32_t one = std::bit_cast<uint32_t>(1.0f);
    sweep_ascending(sweep, /*negative_half=*/true, one);
    sweep_ascending(sweep, /*negative_half=*/false, one);
    INFO((is_signed ? "signed" : "unsigned") << " map" << (finite ? ", finite-block path" : "") << ": " << sweep.runs << " runs of one code");
    CHECK(sweep.mismatches == 0);
    CHECK(sweep.falls == 0);
    CHECK(sweep.runs >= 128);
    }
  }
}

TEST_CASE("the code table's vector paths compute what its scalar path computes, also on NaN, infinities and huge values", "[optim][kernels]") {
  testing::Seeded seeded;
  INFO("vector path: " << CodeTable::vector_path());
  // The path a test run forces (FRUGAL_OPTIM_KERNELS) is the one taken, so each is tested where the CPU has it.
  if (const char* forced = std::getenv("FRUGAL_OPTIM_KERNELS")) CHECK(std::string(CodeTable::vector_path()) == forced);
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const bool is_signed : {true, false}) {
    const CodeTable table(dynamic_map(is_signed));
    torch::Tensor x = torch::randn({4099}) * torch::exp(torch::randn({4099}) * 6);
    float* data = x.data_ptr<float>();
    const float specials[] = {nan, -nan, inf, -inf, 1e30f, -1e30f, 0.0f, -0.0f, 1e-45f, -1e-45f, 3.4e38f, 1.0f, -1.0f};
    for (size_t k = 0; k < sizeof(specials) / sizeof(float); ++k) data[17 * k + 3] = specials[k];
    const float finite_top = CodeTable::finite_max(data, x.numel());
    float expected_top = 0.0f;
    for (int64_t i = 0; i < x.numel(); ++i) expected_top = std::isfinite(data[i]) ? std::max(expected_top, std::fabs(data[i])) : expected_top;
    CHECK(finite_top == expected_top);
    // A block's requantize: its finite maximum, and the codes quantize gives with it.
    std::vector<uint8_t> block_codes(4099), expected_codes(4099);
    CHECK(table.requantize(data, 4099, block_codes.data()) == expected_top);
    table.quantize_scalar(data, expected_top, expected_codes.data(), 4099);
    CHECK(block_codes == expected_codes);
    torch::Tensor finite_x = torch::randn({4099}) * torch::exp(torch::randn({4099}) * 6);
    if (!is_signed) finite_x = finite_x.abs();
    const float finite_block_top = table.requantize(finite_x.data_ptr<float>(), 4099, block_codes.data());
    table.quantize_scalar(finite_x.data_ptr<float>(), finite_block_top, expected_codes.data(), 4099);
    CHECK(block_codes == expected_codes);
    for (const float absmax : {finite_top, 1.0f, 0.0f, 1e-20f, 3.0e38f}) {
      for (const int64_t len : {int64_t{4099}, int64_t{256}, int64_t{77}, int64_t{1}}) {
        std::vector<uint8_t> vector_codes(static_cast<size_t>(len)), scalar_codes(static_cast<size_t>(len));
        table.quantize(data, absmax, vector_codes.data(), len);
        table.quantize_scalar(data, absmax, scalar_codes.data(), len);
        INFO("absmax " << absmax << ", " << len << " values");
        CHECK(vector_codes == scalar_codes);
        std::vector<float> vector_values(static_cast<size_t>(len)), scalar_values(static_cast<size_t>(len));
        table.dequantize(vector_codes.data(), absmax, vector_values.data(), len);
        table.dequantize_scalar(vector_codes.data(), absmax, scalar_values.data(), len);
        CHECK(std::memcmp(vector_values.data(), scalar_values.data(), sizeof(float) * static_cast<size_t>(len)) == 0);
      }
    }
    // What is not finite is coded as clamped: NaN as 0, infinities as the end codes.
    const float* codes = table.codes();
    CHECK(codes[table.code_of(nan)] == 0.0f);
    CHECK(codes[table.code_of(inf)] == 1.0f);
    CHECK(table.code_of(-inf) == 0);
    CHECK(codes[table.code_of(-0.0f)] == 0.0f);
  }
}

namespace {

// The smallest float that the search moves from code i up to i + 1 (bisection over the floats between them).
float searched_threshold(const float* map, int i) {
  auto ordered = [](float x) { const auto b = std::bit_cast<int32_t>(x); return b < 0 ? b ^ 0x7fffffff : b; };
  auto from_ordered = [](int32_t b) { return std::bit_cast<float>(b < 0 ? b ^ 0x7fffffff : b); };
  int32_t lo = ordered(map[i]), hi = ordered(map[i + 1]);
  while (hi - lo > 1) {
    const int32_t mid = lo + (hi - lo) / 2;
    (searched(map, from_ordered(mid)) > i ? hi : lo) = mid;
  }
  return from_ordered(hi);
}

}  // namespace

TEST_CASE("a finite block's codes are its quotients' codes also next to every threshold, for maxima over the whole float range", "[optim][kernels]") {
  // The AVX2 path multiplies by 1 / maximum: products near a threshold can fall on its other side
  // from the quotient, and must then be coded as the quotient is.
  testing::Seeded seeded;
  INFO("vector path: " << CodeTable::vector_path());
  std::vector<float> maxima = {1.0f, 3.0f, 0.1f, 1e-3f, 7e-30f, 0x1p-125f, 0x1p125f, 0x1p-126f, 3e38f, 1e-40f};
  const torch::Tensor random_exponents = torch::rand({300}, torch::kFloat64) * 250 - 125;
  for (int k = 0; k < 300; ++k) {
    maxima.push_back(static_cast<float>(std::exp2(random_exponents[k].item<double>())));
  }
  for (const bool is_signed : {true, false}) {
    const CodeTable table(dynamic_map(is_signed));
    CHECK(table.product_path());  // the dynamic maps take it (else the AVX2 path divides)
    int64_t values = 0, mismatches = 0, products_differ = 0;
    for (const float absmax : maxima) {
      std::vector<float> block{absmax};  // its finite maximum
      for (int i = 0; i < 255; ++i) {
        const float x0 = searched_threshold(table.codes(), i) * absmax;
        for (int step = -4; step <= 4; ++step) {
          auto bits = std::bit_cast<int32_t>(x0) + step;
          const float x = std::bit_cast<float>(bits);
          if (!(std::fabs(x) <= absmax)) continue;
          block.push_back(x);
          if (absmax >= 0x1p-125f && absmax <= 0x1p125f && table.code_of(x * (1.0f / absmax)) != table.code_of(x / absmax)) ++products_differ;
        }
      }
      std::vector<uint8_t> codes(block.size()), expected(block.size());
      CHECK(table.requantize(block.data(), static_cast<int64_t>(block.size()), codes.data()) == absmax);
      table.quantize_scalar(block.data(), absmax, expected.data(), static_cast<int64_t>(block.size()));
      for (size_t j = 0; j < block.size(); ++j) mismatches += codes[j] != expected[j];
      values += static_cast<int64_t>(block.size());
    }
    INFO((is_signed ? "signed" : "unsigned") << " map: " << values << " values, " << products_differ << " whose product is coded apart from the quotient");
    CHECK(products_differ > 0);  // the case is there to be caught
    CHECK(mismatches == 0);
  }
}
