// frugal-data: builds and checks sharded data sets from the command line.
//
//   frugal-data convert --from imagefolder images/train shards/train --shard-size 256M
//   frugal-data convert --from squad train-v1.1.json shards/squad-train
//   frugal-data augment shards/train shards/train-aug --variants 4 --op flip_crop:jpg
//   frugal-data dedup shards/raw shards/clean --report dedup.jsonl --text-field json:question
//   frugal-data index shards/from-python     # writes the .idx.json files
//   frugal-data verify shards/train          # reads every member; exit 1 if any shard is damaged
//   frugal-data verify --decode shards/train # ... and decodes every JPEG (.jpg/.jpeg) member
//   frugal-data verify --decode --decode-on gpu shards/train   # ... with nvJPEG, as GPU training decodes

#include <CLI/CLI.hpp>
#include <c10/cuda/CUDAStream.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "frugal/config/exit_process.hpp"
#include "frugal/data/converters.hpp"
#include "frugal/data/dedup.hpp"
#include "frugal/data/image/gpu_jpeg.hpp"
#include "frugal/data/image/jpeg.hpp"
#include "frugal/data/offline_augmentation.hpp"
#include "frugal/data/tar_shard.hpp"
#include "frugal/errors.hpp"

namespace {

int64_t parse_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw frugal::OptionError("shard-size", "--shard-size: '" + text + "' is not a size (e.g. 256M)");
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "B" ? 1.0
                       : unit == "k" || unit == "K" ? 1024.0
                       : unit == "M"                ? 1024.0 * 1024
                       : unit == "G"                ? 1024.0 * 1024 * 1024
                                                    : -1.0;
  if (scale < 0 || value <= 0) throw frugal::OptionError("shard-size", "--shard-size: '" + text + "' is not a size (e.g. 256M)");
  return static_cast<int64_t>(value * scale);
}

// Decodes every JPEG field of `sample` on the CPU, or with `gpu` as GPU training decodes them
// (nvJPEG, and libjpeg-turbo for what it refuses); "" or the first failure.
std::string decode_check(const frugal::Sample& sample, frugal::GpuJpegDecoder* gpu) {
  std::vector<std::string_view> jpegs;
  std::vector<std::string> names;
  for (const auto& [ext, bytes] : sample.fields) {
    const size_t dot = ext.rfind('.');
    const std::string last = dot == std::string::npos ? ext : ext.substr(dot + 1);
    if (last != "jpg" && last != "jpeg") continue;
    jpegs.emplace_back(bytes);
    names.push_back(sample.key + "." + ext);
  }
  try {
    if (gpu != nullptr && !jpegs.empty()) {
      const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
      gpu->decode(jpegs, names, stream.stream());
      stream.synchronize();  // the sample's bytes go when this returns
    }
    for (size_t i = 0; gpu == nullptr && i < jpegs.size(); ++i) frugal::decode_jpeg(jpegs[i], names[i]);
  } catch (const frugal::DataError& e) {
    return e.what();
  }
  return "";
}

void print_shards(const std::vector<frugal::ShardInfo>& shards, int64_t samples) {
  int64_t bytes = 0;
  for (const auto& s : shards) {
    std::printf("  %s  %lld samples  %lld bytes\n", s.path.c_str(), static_cast<long long>(s.samples),
                static_cast<long long>(s.bytes));
    bytes += s.bytes;
  }
  std::printf("wrote %lld samples in %zu shards, %.1f MiB\n", static_cast<long long>(samples), shards.size(),
              static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"frugal-data: convert, augment, deduplicate, index and verify tar shards (WebDataset layout)"};
  app.require_subcommand(1);
  std::string shard_size = "256M", prefix = "shard";
  auto writer_options = [&] { return frugal::ShardWriterOptions().target_bytes(parse_size(shard_size)).prefix(prefix); };
  auto add_writer_flags = [&](CLI::App* sub) {
    sub->add_option("--shard-size", shard_size, "Start a new shard after this many bytes (k, M, G)")->capture_default_str();
    sub->add_option("--prefix", prefix, "Shard names: PREFIX-000000.tar ...")->capture_default_str();
  };

  std::string input, output, from, op, report, text_field, image_field;
  int64_t variants = 0, seed = 0, image_distance = 4;
  double text_threshold = 0.8;

  auto* convert = app.add_subcommand("convert", "Image folder, JSONL or SQuAD JSON → shards");
  convert->add_option("--from", from, "Source layout")->required()->check(CLI::IsMember({"imagefolder", "jsonl", "squad"}));
  convert->add_option("input", input, "Folder of class folders, or the .jsonl / SQuAD .json file")->required();
  convert->add_option("output", output, "Directory for the shards")->required();
  bool restart_markers = true;
  convert->add_flag("--restart-markers,!--no-restart-markers", restart_markers,
                    "Rewrite JPEGs losslessly with a restart marker per MCU, so crops decode only their part (imagefolder)")
      ->capture_default_str();
  add_writer_flags(convert);

  auto* augment = app.add_subcommand("augment", "Precompute K augmented variants of each sample");
  augment->add_option("input", input, "Directory of source shards")->required();
  augment->add_option("output", output, "Directory for the augmented shards")->required();
  augment->add_option("--variants", variants, "Variants per sample (K)")->required()->check(CLI::PositiveNumber);
  augment->add_option("--op", op, "jitter:FIELD:SIGMA (float .npy) or flip_crop:FIELD[:MIN_SCALE] (JPEG)")->required();
  augment->add_option("--seed", seed, "Seed of the variants")->capture_default_str();
  add_writer_flags(augment);

  auto* dedup = app.add_subcommand("dedup", "Remove exact and near duplicates, with a report of every removal");
  dedup->add_option("input", input, "Directory of source shards")->required();
  dedup->add_option("output", output, "Directory for the deduplicated shards")->required();
  dedup->add_option("--report", report, "JSONL file: one line per removed sample")->required();
  dedup->add_option("--text-field", text_field, "Near-duplicate text: FIELD (e.g. txt) or json:KEY");
  dedup->add_option("--text-threshold", text_threshold, "Estimated Jaccard similarity to call texts duplicates")->capture_default_str();
  dedup->add_option("--image-field", image_field, "Near-duplicate images: JPEG field (e.g. jpg)");
  dedup->add_option("--image-distance", image_distance, "Largest dHash Hamming distance (of 64 bits)")->capture_default_str();
  add_writer_flags(dedup);

  auto* index = app.add_subcommand("index", "Write missing or stale .idx.json files beside the shards");
  index->add_option("input", input, "Directory of shards, or one shard")->required();
  auto* verify = app.add_subcommand("verify", "Read every member of every shard; exit 1 if any is damaged");
  verify->add_option("input", input, "Directory of shards, or one shard")->required();
  bool decode = false;
  verify->add_flag("--decode", decode, "Also decode every JPEG member (.jpg, .jpeg, augN.jpg): a bad image is damage");
  std::string decode_on = "cpu";
  verify->add_option("--decode-on", decode_on, "Decode with libjpeg-turbo (cpu) or nvJPEG on GPU 0 (gpu), as training would")
      ->check(CLI::IsMember({"cpu", "gpu"}));

  CLI11_PARSE(app, argc, argv);
  try {
    if (convert->parsed()) {
      frugal::ShardWriter out(output, writer_options());
      const frugal::ConvertResult r =
          from == "imagefolder" ? frugal::convert_image_folder(input, out, frugal::ImageFolderConvertOptions().restart_markers(restart_markers))
                                      : from == "jsonl"     ? frugal::convert_jsonl(input, out)
                                                            : frugal::convert_squad(input, out);
      for (const auto& why : r.skipped) std::printf("skipped %s\n", why.c_str());
      if (!r.classes.empty()) std::printf("%zu classes, listed in %s/classes.json\n", r.classes.size(), output.c_str());
      print_shards(r.shards, r.samples);
    } else if (augment->parsed()) {
      frugal::ShardWriter out(output, writer_options());
      const auto r = frugal::write_augmented_shards(frugal::list_shards(input), out, variants,
                                                    frugal::parse_augmentation(op), static_cast<uint64_t>(seed));
      std::printf("%lld variants of each sample (%s)\n", static_cast<long long>(variants), op.c_str());
      print_shards(r.shards, r.samples);
    } else if (dedup->parsed()) {
      frugal::ShardWriter out(output, writer_options());
      const auto r = frugal::deduplicate_shards(
          frugal::list_shards(input), out,
          frugal::DedupOptions().text_field(text_field).text_threshold(text_threshold).image_field(image_field)
              .image_max_distance(image_distance),
          report);
      std::map<std::string, int64_t> reasons;
      for (const auto& d : r.removed) ++reasons[d.reason];
      std::printf("scanned %lld, kept %lld, removed %zu", static_cast<long long>(r.scanned),
                  static_cast<long long>(r.kept), r.removed.size());
      for (const auto& [reason, n] : reasons) std::printf(" (%s: %lld)", reason.c_str(), static_cast<long long>(n));
      std::printf("; every removal is in %s\n", report.c_str());
      print_shards(r.shards, r.kept);
    } else if (index->parsed() || verify->parsed()) {
      int damaged = 0;
      // Unavailable (no GPU, no libnvjpeg): an error saying why, before any shard is read.
      std::unique_ptr<frugal::GpuJpegDecoder> gpu;
      if (verify->parsed() && decode && decode_on == "gpu") gpu = std::make_unique<frugal::GpuJpegDecoder>(0);
      for (const auto& shard : frugal::list_shards(input)) {
        if (index->parsed()) {
          const frugal::ShardIndex i = frugal::load_shard_index(shard);
          std::printf("%s  %lld samples  index %s\n", shard.c_str(), static_cast<long long>(i.size()),
                      frugal::index_path(shard).c_str());
          continue;
        }
        try {
          frugal::ShardScanner scan(shard);
          int64_t samples = 0, bad_images = 0;
          while (const auto sample = scan.next()) {
            ++samples;
            if (!decode) continue;
            if (const std::string why = decode_check(*sample, gpu.get()); !why.empty()) {
              ++bad_images;
              std::printf("%s  BAD IMAGE  at byte offset %lld: sample '%s': %s\n", shard.c_str(),
                          static_cast<long long>(scan.sample_offset()), sample->key.c_str(), why.c_str());
            }
          }
          if (bad_images > 0) {
            ++damaged;
            std::printf("%s  DAMAGED  %lld of %lld samples hold an image that does not decode\n", shard.c_str(),
                        static_cast<long long>(bad_images), static_cast<long long>(samples));
          } else {
            std::printf("%s  ok  %lld samples%s\n", shard.c_str(), static_cast<long long>(samples), decode ? ", every image decodes" : "");
          }
        } catch (const frugal::DataError& e) {
          ++damaged;
          std::printf("%s  DAMAGED  %s\n", shard.c_str(), e.what());
        }
      }
      return damaged ? 1 : 0;
    }
  } catch (const frugal::Error& e) {
    std::fprintf(stderr, "frugal-data: error: %s\n", e.what());
    return 2;
  }
  return 0;
}

int main(int argc, char** argv) { frugal::exit_process(run(argc, argv)); }
