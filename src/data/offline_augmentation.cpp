#include "frugal/data/offline_augmentation.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <cmath>
#include <random>

#include "frugal/data/image/jpeg.hpp"
#include "frugal/data/npy.hpp"
#include "frugal/errors.hpp"

namespace frugal {

Augmentation jitter_npy(std::string field, double sigma) {
  if (!(sigma >= 0)) throw OptionError("sigma", c10::str("jitter sigma must be >= 0, got ", sigma));
  return [field = std::move(field), sigma](const Sample& sample, uint64_t seed) {
    torch::Tensor x = decode_npy(sample.field(field), sample.key + "." + field);
    if (!x.is_floating_point()) throw DataError(sample.key + "." + field, -1, "jitter needs a floating-point array");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    x = x + sigma * torch::randn(x.sizes(), gen, x.options());
    return std::map<std::string, std::string>{{field, encode_npy(x)}};
  };
}

Augmentation flip_crop_jpeg(std::string field, double min_scale, int quality) {
  if (!(min_scale > 0 && min_scale <= 1)) throw OptionError("min_scale", c10::str("min_scale must be in (0, 1], got ", min_scale));
  return [field = std::move(field), min_scale, quality](const Sample& sample, uint64_t seed) {
    const torch::Tensor image = decode_jpeg(sample.field(field), sample.key + "." + field);
    const int64_t h = image.size(0), w = image.size(1);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    // torchvision's RandomResizedCrop: area share and log-uniform aspect ratio, 10 tries, else all.
    int64_t ch = h, cw = w, top = 0, left = 0;
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double area = h * w * (min_scale + (1 - min_scale) * uniform(rng));
      const double ratio = std::exp(std::log(3.0 / 4) + (std::log(4.0 / 3) - std::log(3.0 / 4)) * uniform(rng));
      const auto tw = static_cast<int64_t>(std::lround(std::sqrt(area * ratio)));
      const auto th = static_cast<int64_t>(std::lround(std::sqrt(area / ratio)));
      if (tw > 0 && th > 0 && tw <= w && th <= h) {
        cw = tw;
        ch = th;
        top = static_cast<int64_t>(uniform(rng) * static_cast<double>(h - th + 1));
        left = static_cast<int64_t>(uniform(rng) * static_cast<double>(w - tw + 1));
        break;
      }
    }
    torch::Tensor crop = image.slice(0, top, top + ch).slice(1, left, left + cw).permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat);
    crop = torch::nn::functional::interpolate(
        crop, torch::nn::functional::InterpolateFuncOptions().size(std::vector<int64_t>{h, w}).mode(torch::kBilinear)
                  .align_corners(false).antialias(true));
    if (uniform(rng) < 0.5) crop = crop.flip(3);
    const torch::Tensor out = crop.squeeze(0).permute({1, 2, 0}).round().clamp(0, 255).to(torch::kUInt8);
    return std::map<std::string, std::string>{{field, encode_jpeg(out, quality)}};
  };
}

Augmentation parse_augmentation(const std::string& spec) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t colon; (colon = spec.find(':', start)) != std::string::npos; start = colon + 1) parts.push_back(spec.substr(start, colon - start));
  parts.push_back(spec.substr(start));
  auto number = [&](const std::string& text) {
    try {
      size_t used = 0;
      const double value = std::stod(text, &used);
      if (used == text.size()) return value;
    } catch (const std::exception&) {
    }
    throw OptionError("op", "augmentation '" + spec + "': '" + text + "' is not a number");
  };
  if (parts.size() == 3 && parts[0] == "jitter") return jitter_npy(parts[1], number(parts[2]));
  if ((parts.size() == 2 || parts.size() == 3) && parts[0] == "flip_crop") {
    return flip_crop_jpeg(parts[1], parts.size() == 3 ? number(parts[2]) : 0.35);
  }
  throw OptionError("op", "augmentation '" + spec + "' is not jitter:FIELD:SIGMA or flip_crop:FIELD[:MIN_SCALE]");
}

AugmentResult write_augmented_shards(const std::vector<std::filesystem::path>& source, ShardWriter& out,
                                     int64_t variants, const Augmentation& augment, uint64_t seed) {
  if (variants < 1) throw OptionError("variants", c10::str("variants must be >= 1, got ", variants));
  AugmentResult result;
  std::mt19937_64 seeds(seed);
  for (const auto& shard : source) {
    ShardScanner scan(shard);
    while (auto sample = scan.next()) {
      Sample augmented{sample->key, {}};
      std::map<std::string, std::string> replaced;
      for (int64_t k = 0; k < variants; ++k) {
        // One seed per (sample, variant), drawn in sample order: a rerun gives the same shards.
        for (auto& [ext, bytes] : augment(*sample, seeds())) {
          replaced[ext];
          augmented.fields[c10::str("aug", k, ".", ext)] = std::move(bytes);
        }
      }
      for (auto& [ext, bytes] : sample->fields) {
        if (!replaced.count(ext)) augmented.fields.emplace(ext, std::move(bytes));
      }
      out.write(augmented);
      ++result.samples;
    }
  }
  result.shards = out.finish();
  return result;
}

}  // namespace frugal
