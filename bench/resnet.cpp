// ResNet example benchmarks (issue 10), each a ratio against a baseline measured in the same run:
// - decode: JPEG decode + RandomResizedCrop + flip to 224x224, images per second on ONE core,
//   with DCT-scaled decoding against full-size decoding (goal >= 400 img/s/core; FFCV reports
//   ~326 per vCPU); plus the validation transform; then region-of-interest decoding against
//   decoding the whole (DCT-scaled) image (data.jpeg_train_decode_roi, goal >= 1.5), on JPEGs as
//   encoded and as frugal-data convert rewrites them with restart markers (..._roi_restart);
// - train-step: a Frugal Trainer training ResNet (variant, side, batch) on CPU against torchvision
//   trained eagerly in Python with the same settings and thread count, alternating 5 rounds
//   (medians; one untimed warm-up step on each side).
// It also writes the photo-like JPEG shards the GPU check trains on (make-shards).
//
//   build/bench/frugal_bench_resnet decode build/bench/results.jsonl
//   build/bench/frugal_bench_resnet train-step build/bench/results.jsonl PYTHON [VARIANT SIDE BATCH STEPS]
//   build/bench/frugal_bench_resnet make-shards DIR IMAGES CLASSES
//   build/bench/frugal_bench_resnet decode-stages            # ms per image of each decode stage
//   build/bench/frugal_bench_resnet restart-interval build/bench/results.jsonl DIR  # real photos (bench/real_photos.py)

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench_result.hpp"
#include "frugal/frugal.hpp"
#include "interleaved.hpp"
#include "support/source_dir.hpp"
#include "python_baseline.hpp"
#include "synthetic_photo.hpp"

namespace fs = std::filesystem;
using frugal::bench::Result;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Quality 90 JPEGs; 500x375 is ImageNet's typical image.
std::vector<std::string> photo_jpegs(int64_t n, int64_t width = 500, int64_t height = 375) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(frugal::encode_jpeg(frugal::bench::picture(static_cast<uint64_t>(i), height, width), 90));
  }
  return out;
}

// Images per second of one thread applying `transform` to every image, repeated for ~2 s.
double images_per_second(const std::vector<std::string>& jpegs, const frugal::ImageTransformOptions& transform) {
  int64_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  const double begin_cpu = frugal::bench::thread_cpu_seconds();
  while (seconds_since(start) < 2.0) {
    for (const auto& jpeg : jpegs) {
      frugal::decode_and_transform(jpeg, "bench.jpg", transform, static_cast<uint64_t>(done++));
    }
  }
  return static_cast<double>(done) / (frugal::bench::thread_cpu_seconds() - begin_cpu);
}

int decode(const std::string& results) {
  torch::set_num_threads(1);
  const auto jpegs = photo_jpegs(32);
  int64_t bytes = 0;
  for (const auto& j : jpegs) bytes += static_cast<int64_t>(j.size());
  std::printf("decode: 32 photo-like 500x375 JPEGs, %.0f KB average\n", static_cast<double>(bytes) / 32 / 1024);
  const std::string command = "build/bench/frugal_bench_resnet decode build/bench/results.jsonl";
  const auto train = frugal::ImageTransformOptions().size(224).train(true);
  std::vector<double> scaled, full;
  for (int round = 0; round < 3; ++round) {  // alternate, medians (both decode the whole image)
    scaled.push_back(images_per_second(jpegs, frugal::ImageTransformOptions(train).roi_decode(false)));
    full.push_back(images_per_second(jpegs, frugal::ImageTransformOptions(train).dct_scaling(false).roi_decode(false)));
  }
  const Result r{"resnet decode+RandomResizedCrop+flip 224 (DCT scaling vs full decode), per core",
                 frugal::bench::median(scaled), "img/s/core", frugal::bench::median(full), command};
  frugal::bench::append(results, r);
  std::printf("%s: %.0f img/s/core vs %.0f full decode (x%.2f; goal >= 400)\n", r.name.c_str(), r.value, r.baseline, r.ratio());
  const auto val = frugal::ImageTransformOptions().size(224).train(false);
  const Result v{"resnet decode+resize+center crop 224 (DCT scaling vs full decode), per core",
                 images_per_second(jpegs, frugal::ImageTransformOptions(val).dct_scaling(true).roi_decode(false)), "img/s/core",
                 images_per_second(jpegs, frugal::ImageTransformOptions(val).dct_scaling(false)),
                 command};
  frugal::bench::append(results, v);
  std::printf("%s: %.0f img/s/core vs %.0f (x%.2f)\n", v.name.c_str(), v.value, v.baseline, v.ratio());
  // Where DCT scaling pays: photos much larger than the crop (1600x1200, as in OpenImages).
  const auto large = photo_jpegs(8, 1600, 1200);
  const Result l{"resnet decode+RandomResizedCrop+flip 224 of 1600x1200 photos (DCT scaling vs full decode), per core",
                 images_per_second(large, frugal::ImageTransformOptions(train).roi_decode(false)), "img/s/core", images_per_second(large, frugal::ImageTransformOptions(train).dct_scaling(false).roi_decode(false)),
                 command};
  frugal::bench::append(results, l);
  std::printf("%s: %.0f img/s/core vs %.0f (x%.2f)\n", l.name.c_str(), l.value, l.baseline, l.ratio());
  // Region-of-interest decoding: only the crop's rows and MCU columns, against decoding the whole
  // (DCT-scaled) image, same crops, alternating rounds. Twice: the JPEGs as encoded (no restart
  // markers, as most cameras and ImageNet write them), and as frugal-data convert stores them
  // (rewritten losslessly with a restart marker per MCU: only the crop is entropy-decoded).
  std::vector<std::string> converted;
  int64_t converted_bytes = 0;
  for (const auto& j : jpegs) {
    converted.push_back(frugal::add_jpeg_restart_markers(j, "bench.jpg"));
    converted_bytes += static_cast<int64_t>(converted.back().size());
  }
  std::vector<double> roi, whole, roi_restart, whole_restart;
  for (int round = 0; round < 5; ++round) {
    roi.push_back(images_per_second(jpegs, train));
    whole.push_back(images_per_second(jpegs, frugal::ImageTransformOptions(train).roi_decode(false)));
    roi_restart.push_back(images_per_second(converted, train));
    whole_restart.push_back(images_per_second(converted, frugal::ImageTransformOptions(train).roi_decode(false)));
  }
  const Result d{"data.jpeg_train_decode_roi", frugal::bench::median(roi), "img/s/core", frugal::bench::median(whole), command};
  frugal::bench::append(results, d);
  std::printf("%s: decode+RandomResizedCrop+flip 224 with region decoding %.0f img/s/core vs %.0f whole image (x%.2f; goal >= 1.5)\n",
              d.name.c_str(), d.value, d.baseline, d.ratio());
  const Result dr{"data.jpeg_train_decode_roi_restart", frugal::bench::median(roi_restart), "img/s/core",
                  frugal::bench::median(whole_restart), command};
  frugal::bench::append(results, dr);
  std::printf("%s: the same on the JPEGs rewritten with restart markers: %.0f img/s/core vs %.0f whole image (x%.2f; goal >= 1.5)\n",
              dr.name.c_str(), dr.value, dr.baseline, dr.ratio());
  const Result dc{"data.jpeg_restart_whole_decode", frugal::bench::median(whole_restart), "img/s/core", frugal::bench::median(whole),
                  command};
  frugal::bench::append(results, dc);
  std::printf("%s: whole-image path on the rewritten JPEGs %.0f img/s/core vs %.0f as encoded (x%.2f)\n", dc.name.c_str(), dc.value,
              dc.baseline, dc.ratio());
  const Result db{"data.jpeg_restart_bytes", static_cast<double>(converted_bytes) / 32 / 1024, "KB", static_cast<double>(bytes) / 32 / 1024,
                  command};
  frugal::bench::append(results, db);
  std::printf("%s: %.1f KB per rewritten JPEG vs %.1f as encoded (x%.3f)\n", db.name.c_str(), db.value, db.baseline, db.ratio());
  const Result dl{"data.jpeg_train_decode_roi_1600x1200", images_per_second(large, train), "img/s/core",
                  images_per_second(large, frugal::ImageTransformOptions(train).roi_decode(false)), command};
  frugal::bench::append(results, dl);
  std::printf("%s: %.0f img/s/core vs %.0f (x%.2f)\n", dl.name.c_str(), dl.value, dl.baseline, dl.ratio());
  std::vector<std::string> large_converted;
  for (const auto& j : large) large_converted.push_back(frugal::add_jpeg_restart_markers(j, "bench.jpg"));
  const Result dlr{"data.jpeg_train_decode_roi_restart_1600x1200", images_per_second(large_converted, train), "img/s/core",
                   images_per_second(large_converted, frugal::ImageTransformOptions(train).roi_decode(false)), command};
  frugal::bench::append(results, dlr);
  std::printf("%s: %.0f img/s/core vs %.0f (x%.2f)\n", dlr.name.c_str(), dlr.value, dlr.baseline, dlr.ratio());
  const auto val_fast = frugal::ImageTransformOptions(val).dct_scaling(true);
  const Result dv{"data.jpeg_val_decode_roi_dct", images_per_second(jpegs, val_fast), "img/s/core",
                  images_per_second(jpegs, frugal::ImageTransformOptions(val).dct_scaling(false)), command};
  frugal::bench::append(results, dv);
  std::printf("%s: validation centre crop by region + DCT scaling %.0f img/s/core vs %.0f exact (x%.2f)\n", dv.name.c_str(), dv.value,
              dv.baseline, dv.ratio());
  return 0;
}

// The decode's stages one by one (CPU ms per image, one thread): whole and region decodes, with and
// without DCT scaling, and the crop's resize. Printed only; for finding where the time goes.
int decode_stages() {
  torch::set_num_threads(1);
  const auto jpegs = photo_jpegs(32);
  std::mt19937_64 rng(1);
  std::vector<frugal::CropBox> boxes;
  for (int i = 0; i < 32; ++i) boxes.push_back(frugal::random_resized_crop_box(500, 375, rng));
  auto timeit = [&](const char* name, auto f) {
    const double t0 = frugal::bench::thread_cpu_seconds();
    int n = 0;
    while (frugal::bench::thread_cpu_seconds() - t0 < 1.5) { for (int i = 0; i < 32; ++i) f(i); n += 32; }
    std::printf("%s: %.3f ms\n", name, 1e3 * (frugal::bench::thread_cpu_seconds() - t0) / n);
  };
  timeit("whole decode full size", [&](int i) { frugal::decode_jpeg(jpegs[i], "x"); });
  timeit("region decode full size", [&](int i) { frugal::decode_jpeg_region(jpegs[i], "x", boxes[i]); });
  std::vector<std::string> converted;
  for (const auto& j : jpegs) converted.push_back(frugal::add_jpeg_restart_markers(j, "x"));
  timeit("whole decode full size, restart markers", [&](int i) { frugal::decode_jpeg(converted[i], "x"); });
  timeit("region decode full size, restart markers", [&](int i) { frugal::decode_jpeg_region(converted[i], "x", boxes[i]); });
  // The floor without restart markers: a one-pixel box in the last row needs all of the entropy decoding.
  timeit("entropy decoding alone (a one-pixel region in the last row)",
         [&](int i) { frugal::decode_jpeg_region(jpegs[i], "x", {499, 374, 1, 1}); });
  timeit("region decode dct", [&](int i) {
    const auto& b = boxes[i];
    frugal::decode_jpeg_region(jpegs[i], "x", b, (500 * 224 + b.width - 1) / b.width, (375 * 224 + b.height - 1) / b.height); });
  timeit("whole decode dct", [&](int i) {
    const auto& b = boxes[i];
    frugal::decode_jpeg(jpegs[i], "x", (500 * 224 + b.width - 1) / b.width, (375 * 224 + b.height - 1) / b.height); });
  std::vector<frugal::DecodedRegion> regions;
  for (int i = 0; i < 32; ++i) regions.push_back(frugal::decode_jpeg_region(jpegs[i], "x", boxes[i]));
  timeit("crop_resize", [&](int i) { frugal::crop_resize(regions[i].image, regions[i].region, 224, 224); });
  timeit("flip", [&](int) { frugal::horizontal_flip(torch::empty({224, 224, 3}, torch::kUInt8)); });
  return 0;
}

double frugal_train_seconds(const std::string& variant, int64_t side, int64_t batch, int64_t steps) {
  torch::manual_seed(0);
  frugal::ResNet net(frugal::ResNetOptions::variant(variant).num_classes(1000));
  auto data = std::make_shared<frugal::TensorDataset>(torch::randn({batch, 3, side, side}), torch::randint(0, 1000, {batch}));
  frugal::Model model(net.ptr(), frugal::LossFn<frugal::ResNetImpl>([](frugal::ResNetImpl& n, const frugal::Batch& b) {
                        return torch::nn::functional::cross_entropy(n.forward(b.input), b.target,
                                                                    torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(0.1));
                      }));
  frugal::Trainer trainer(
      model,
      [](torch::nn::Module& m) {
        const auto o = torch::optim::SGDOptions(0.1).momentum(0.875).weight_decay(3.0517578125e-05);
        return std::make_unique<torch::optim::SGD>(frugal::weight_decay_groups(m, o, frugal::is_bias_or_norm), o);
      },
      data, frugal::TrainerOptions().max_steps(steps).max_epochs(steps).device("cpu").run_dir("").log_every_n_steps(steps),
      frugal::DataLoaderOptions().batch_size(batch).shuffle(false));
  return trainer.fit().seconds;
}

// Seconds of `steps` warm steps: a (1 + steps)-step fit less a 1-step fit, so the first step's
// one-off costs (oneDNN primitive creation, allocator growth) count for neither side.
double frugal_warm_seconds(const std::string& variant, int64_t side, int64_t batch, int64_t steps) {
  return frugal_train_seconds(variant, side, batch, steps + 1) - frugal_train_seconds(variant, side, batch, 1);
}

int train_step(const std::string& results, const std::string& python, const std::string& variant, int64_t side, int64_t batch,
               int64_t steps) {
  const int threads = static_cast<int>(torch::get_num_threads());
  const std::string script = std::string(frugal::testing::source_dir()) + "/bench/resnet_train_step.py";
  const std::string command = c10::str(python, " ", script, " ", variant, " 64 ", side, " ", batch, " ", steps, " ", threads);
  const auto [ours, theirs] = frugal::bench::alternate(
      5, [&] { return frugal_warm_seconds(variant, side, batch, steps); }, [&] { return frugal::bench::python_seconds(command); },
      "torchvision");
  const double images = static_cast<double>(batch * steps);
  const Result r{c10::str("resnet train step CPU ", variant, " ", side, "px batch ", batch, " ", threads,
                          " threads (Frugal Trainer vs torchvision eager)"),
                 images / ours, "img/s", images / theirs,
                 c10::str("build/bench/frugal_bench_resnet train-step build/bench/results.jsonl ", python, " ", variant, " ",
                          side, " ", batch, " ", steps)};
  frugal::bench::append(results, r);
  std::printf("%s: %.1f img/s vs %.1f (x%.3f)\n", r.name.c_str(), r.value, r.baseline, r.ratio());
  return 0;
}

// Restart markers every N MCUs on real photographs (bench/real_photos.py writes them): the bytes
// they add, and region decoding's speed against the whole-image path on the rewritten files
// (RandomResizedCrop + flip to 224, one core, alternating rounds). N = 0: one interval per MCU row.
int restart_interval(const std::string& results, const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> photos;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".jpg") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    photos.emplace_back(entry.path().filename().string(), std::string(std::istreambuf_iterator<char>(in), {}));
  }
  std::sort(photos.begin(), photos.end());
  if (photos.empty()) throw std::runtime_error("no .jpg in " + dir.string() + " (bench/real_photos.py writes them)");
  int64_t original = 0;
  std::vector<std::string> as_encoded;
  for (const auto& [name, jpeg] : photos) {
    original += static_cast<int64_t>(jpeg.size());
    as_encoded.push_back(jpeg);
  }
  const auto train = frugal::ImageTransformOptions().size(224).train(true);
  const auto whole_path = frugal::ImageTransformOptions(train).roi_decode(false);
  const std::string command = "build/bench/frugal_bench_resnet restart-interval build/bench/results.jsonl " + dir.string();
  std::printf("restart-interval: %zu real photos, %.0f KB in all\n", photos.size(), static_cast<double>(original) / 1024);
  for (const int interval : {1, 2, 4, 8, 0}) {
    std::vector<std::string> rewritten;
    int64_t bytes = 0;
    for (const auto& [name, jpeg] : photos) {
      const frugal::JpegSize size = frugal::jpeg_size(jpeg, name);
      // One interval per MCU row: the MCU row's width in MCUs (16-pixel MCUs of 4:2:0 are the most common).
      const int mcus = interval > 0 ? interval : static_cast<int>((size.width + 15) / 16);
      rewritten.push_back(frugal::add_jpeg_restart_markers(jpeg, name, mcus));
      bytes += static_cast<int64_t>(rewritten.back().size());
    }
    std::vector<double> roi, whole, as_encoded_whole;
    for (int round = 0; round < 3; ++round) {
      roi.push_back(images_per_second(rewritten, train));
      whole.push_back(images_per_second(rewritten, whole_path));
      as_encoded_whole.push_back(images_per_second(as_encoded, whole_path));
    }
    const std::string label = interval > 0 ? c10::str(interval) : std::string("row");
    const Result size{c10::str("data.jpeg_restart_bytes_real_every_", label), static_cast<double>(bytes) / 1024, "KB",
                      static_cast<double>(original) / 1024, command};
    const Result speed{c10::str("data.jpeg_train_decode_roi_restart_real_every_", label), frugal::bench::median(roi), "img/s/core",
                       frugal::bench::median(whole), command};
    const Result end_to_end{c10::str("data.jpeg_train_decode_roi_restart_real_vs_as_encoded_every_", label), frugal::bench::median(roi),
                            "img/s/core", frugal::bench::median(as_encoded_whole), command};
    for (const auto& r : {size, speed, end_to_end}) frugal::bench::append(results, r);
    std::printf("marker every %s MCU(s): bytes x%.3f; region decode %.0f img/s/core vs whole %.0f (x%.2f), vs whole as encoded %.0f (x%.2f)\n",
                label.c_str(), size.ratio(), speed.value, speed.baseline, speed.ratio(), end_to_end.baseline, end_to_end.ratio());
  }
  return 0;
}

// Shards of photo-like JPEGs in ImageNet's size, with classes.json, for the GPU check.
int make_shards(const fs::path& dir, int64_t images, int64_t classes) {
  const auto jpegs = photo_jpegs(64);
  frugal::ShardWriter writer(dir, frugal::ShardWriterOptions().target_bytes(int64_t{64} << 20));
  for (int64_t i = 0; i < images; ++i) {
    writer.write({c10::str(1000000 + i), {{"jpg", jpegs[static_cast<size_t>(i % 64)]}, {"cls", std::to_string(i % classes)}}});
  }
  writer.finish();
  std::vector<std::string> names;
  for (int64_t c = 0; c < classes; ++c) names.push_back(c10::str("class", c));
  std::ofstream(dir / "classes.json") << nlohmann::json(names).dump();
  std::printf("make-shards: %lld images in %s\n", static_cast<long long>(images), dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  try {
    if (a.size() >= 2 && a[0] == "decode") return decode(a[1]);
    if (a.size() >= 1 && a[0] == "decode-stages") return decode_stages();
    if (a.size() == 3 && a[0] == "restart-interval") return restart_interval(a[1], a[2]);
    if (a.size() >= 3 && a[0] == "train-step") {
      return train_step(a[1], a[2], a.size() > 3 ? a[3] : "resnet50", a.size() > 4 ? std::stoll(a[4]) : 128,
                        a.size() > 5 ? std::stoll(a[5]) : 16, a.size() > 6 ? std::stoll(a[6]) : 6);
    }
    if (a.size() == 4 && a[0] == "make-shards") return make_shards(a[1], std::stoll(a[2]), std::stoll(a[3]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frugal_bench_resnet: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: frugal_bench_resnet decode RESULTS | train-step RESULTS PYTHON [VARIANT SIDE BATCH STEPS] | "
                       "make-shards DIR IMAGES CLASSES\n");
  return 2;
}
