// Data pipeline benchmarks (issue 9), each a ratio against a baseline measured in the same run:
// - shard read throughput: ShardScanner (libarchive) and the indexed reader over the same
//   shards, against a raw sequential read() of the same files (goal >= 0.9);
// - loader samples/s with 0, 1, 2, 4 worker threads decoding JPEGs, against 0 workers;
// - data-wait fraction of a cheap training step with and without workers;
// - dedup items/s (exact + MinHash text, exact + dHash images);
// - loader workers against a busy training thread, before and after the thread caps (loader_threads.cpp).
// Shard reads are measured from the page cache (the reader's CPU cost) and from the disk (files
// evicted before each round); the loader and dedup figures read from the page cache.
//
//   build/bench/frugal_bench_data_pipeline build/bench/results.jsonl build/bench/data_pipeline

#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "bench_result.hpp"
#include "frugal/frugal.hpp"
#include "interleaved.hpp"
#include "loader_threads.hpp"
#include "synthetic_photo.hpp"

namespace fs = std::filesystem;
using frugal::bench::Result;

namespace {

const std::string kCommand = "build/bench/frugal_bench_data_pipeline build/bench/results.jsonl build/bench/data_pipeline";

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Drops the files from the page cache (clean pages need no privilege), so the next read comes
// from the disk: the case where sequential reads and the OS's read-ahead matter.
void evict(const std::vector<fs::path>& files) {
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

int64_t raw_read(const std::vector<fs::path>& files) {
  std::vector<char> buffer(size_t{1} << 20);
  int64_t total = 0;
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    for (ssize_t n; (n = ::read(fd, buffer.data(), buffer.size())) > 0;) total += n;
    ::close(fd);
  }
  return total;
}

void shard_throughput(const std::string& out, const fs::path& dir) {
  // ~110 KB samples (an average ImageNet JPEG), 192 MiB in 256 MiB shards' worth of files.
  std::mt19937_64 rng(1);
  frugal::ShardWriter writer(dir / "bytes", frugal::ShardWriterOptions().target_bytes(int64_t{48} << 20));
  const int64_t samples = 1800;
  std::string payload(110 * 1024, '\0');
  for (int64_t i = 0; i < samples; ++i) {
    for (auto& c : payload) c = static_cast<char>(rng());
    writer.write({std::to_string(1000000 + i), {{"bin", payload}, {"cls", std::to_string(i % 1000)}}});
  }
  writer.finish();
  const auto shards = frugal::list_shards(dir / "bytes");
  const int64_t bytes = raw_read(shards);
  auto scan_all = [&] {
    const auto start = std::chrono::steady_clock::now();
    int64_t n = 0;
    for (const auto& s : shards) {
      frugal::ShardScanner scan(s);
      while (scan.next()) ++n;
    }
    if (n != samples) throw std::runtime_error("scan lost samples");
    return seconds_since(start);
  };
  std::vector<frugal::ShardIndex> indexes;
  for (const auto& s : shards) indexes.push_back(frugal::load_shard_index(s));
  auto indexed_all = [&] {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& index : indexes) {
      for (int64_t i = 0; i < index.size(); ++i) frugal::read_indexed_sample(index, i);
    }
    return seconds_since(start);
  };
  auto raw = [&] {
    const auto start = std::chrono::steady_clock::now();
    raw_read(shards);
    return seconds_since(start);
  };
  const double mb = static_cast<double>(bytes) / 1e6;
  auto report = [&](const std::string& name, const frugal::bench::Comparison& c) {
    frugal::bench::append(out, {name, mb / c.candidate, "MB/s", mb / c.baseline, kCommand});
    std::printf("%s: %.0f MB/s, raw read of the same files %.0f MB/s (%.1f MB)\n", name.c_str(), mb / c.candidate,
                mb / c.baseline, mb);
  };
  // From the page cache: the reader's CPU cost against a bare read() (memory bandwidth).
  report("data.shard_scan_throughput_page_cache", frugal::bench::compare_interleaved(7, raw, scan_all));
  report("data.shard_indexed_read_throughput_page_cache", frugal::bench::compare_interleaved(7, raw, indexed_all));
  // From the disk: each round starts with the files evicted.
  auto cold = [&](const std::function<double()>& f) {
    return [&, f] {
      evict(shards);
      return f();
    };
  };
  report("data.shard_scan_throughput_disk", frugal::bench::compare_interleaved(5, cold(raw), cold(scan_all)));
  report("data.shard_indexed_read_throughput_disk", frugal::bench::compare_interleaved(5, cold(raw), cold(indexed_all)));
}

void loader_threads(const std::string& out, const fs::path& dir) {
  // JPEGs of 320x240 decoded, cropped to 64x64 and flipped: a real per-sample CPU cost.
  frugal::ShardWriter writer(dir / "jpeg", frugal::ShardWriterOptions().target_bytes(int64_t{8} << 20));
  const int64_t samples = 768;
  for (int64_t i = 0; i < samples; ++i) {
    writer.write({std::to_string(1000000 + i),
                  {{"jpg", frugal::encode_jpeg(frugal::bench::picture(static_cast<uint64_t>(i % 64), 240, 320), 90)}, {"cls", std::to_string(i % 10)}}});
  }
  writer.finish();
  auto data = std::make_shared<frugal::ShardedDataset>(dir / "jpeg", [](const frugal::Sample& s, const frugal::SampleContext& c) {
    torch::Tensor image = frugal::decode_jpeg(s.field("jpg"), s.key);
    std::mt19937_64 rng(c.sample_seed());
    const int64_t top = static_cast<int64_t>(rng() % static_cast<uint64_t>(image.size(0) - 64));
    const int64_t left = static_cast<int64_t>(rng() % static_cast<uint64_t>(image.size(1) - 64));
    image = image.slice(0, top, top + 64).slice(1, left, left + 64);
    if (rng() % 2) image = image.flip(1);
    return frugal::Batch{image.permute({2, 0, 1}).contiguous(), torch::tensor(static_cast<int64_t>(std::stoll(s.field("cls")))), {}};
  });
  auto epoch_rate = [&](int64_t workers) {
    frugal::DataLoader loader(data, frugal::DataLoaderOptions().batch_size(32).num_workers(workers).prefetch_batches(8));
    loader.start_epoch(0);
    const auto start = std::chrono::steady_clock::now();
    int64_t n = 0;
    while (auto b = loader.next()) n += b->size();
    return static_cast<double>(n) / seconds_since(start);
  };
  epoch_rate(0);  // warm the page cache and the decoder
  std::vector<double> rate0;
  for (int r = 0; r < 3; ++r) rate0.push_back(epoch_rate(0));
  const double base = frugal::bench::median(rate0);
  for (const int64_t workers : {1, 2, 4}) {
    std::vector<double> rates;
    for (int r = 0; r < 3; ++r) rates.push_back(epoch_rate(workers));
    const double rate = frugal::bench::median(rates);
    frugal::bench::append(out, {"data.loader_jpeg_samples_per_s_" + std::to_string(workers) + "_workers", rate, "samples/s", base, kCommand});
    std::printf("loader: %lld workers %.0f samples/s (0 workers: %.0f)\n", static_cast<long long>(workers), rate, base);
  }

  // A cheap model step after each batch: the share of wall time spent waiting for data.
  torch::nn::Sequential model(torch::nn::Flatten(), torch::nn::Linear(3 * 64 * 64, 64), torch::nn::ReLU(), torch::nn::Linear(64, 10));
  torch::optim::SGD sgd(model->parameters(), 0.01);
  auto wait_fraction = [&](int64_t workers) {
    frugal::DataLoader loader(data, frugal::DataLoaderOptions().batch_size(32).num_workers(workers).prefetch_batches(8));
    loader.start_epoch(1);
    const auto start = std::chrono::steady_clock::now();
    while (auto b = loader.next()) {
      sgd.zero_grad();
      torch::cross_entropy_loss(model->forward(b->input.to(torch::kFloat) / 255), b->target).backward();
      sgd.step();
    }
    return loader.wait_seconds() / seconds_since(start);
  };
  const double sync = wait_fraction(0), prefetched = wait_fraction(2);
  frugal::bench::append(out, {"data.wait_fraction_cheap_step_2_workers", prefetched, "fraction", sync, kCommand});
  std::printf("data wait share of a cheap step: %.2f with 2 workers, %.2f without\n", prefetched, sync);
}

void dedup_throughput(const std::string& out, const fs::path& dir) {
  std::mt19937_64 rng(5);
  const char* vocabulary[] = {"model", "data", "batch", "gradient", "shard", "loss", "token", "image", "train", "step",
                              "layer", "weight", "the", "a", "of", "and", "to", "in", "is", "for"};
  frugal::ShardWriter text_writer(dir / "text");
  const int64_t texts = 4000;
  for (int64_t i = 0; i < texts; ++i) {
    std::string text;
    for (int w = 0; w < 60; ++w) text += std::string(vocabulary[rng() % 20]) + " ";
    text_writer.write({std::to_string(1000000 + i), {{"txt", text}}});
  }
  text_writer.finish();
  frugal::ShardWriter image_writer(dir / "images");
  const int64_t images = 400;
  for (int64_t i = 0; i < images; ++i) {
    image_writer.write({std::to_string(1000000 + i), {{"jpg", frugal::encode_jpeg(frugal::bench::picture(static_cast<uint64_t>(i), 240, 320), 90)}}});
  }
  image_writer.finish();
  auto run = [&](const fs::path& source, const frugal::DedupOptions& options, int64_t n, const std::string& name) {
    frugal::ShardWriter sink(dir / (name + "_out"));
    const auto start = std::chrono::steady_clock::now();
    frugal::deduplicate_shards(frugal::list_shards(source), sink, options, dir / (name + ".jsonl"));
    const double rate = static_cast<double>(n) / seconds_since(start);
    // Baseline: reading and rewriting the same shards with no dedup at all.
    frugal::ShardWriter copy(dir / (name + "_copy"));
    const auto copy_start = std::chrono::steady_clock::now();
    for (const auto& s : frugal::list_shards(source)) {
      frugal::ShardScanner scan(s);
      while (auto sample = scan.next()) copy.write(*sample);
    }
    copy.finish();
    const double copy_rate = static_cast<double>(n) / seconds_since(copy_start);
    frugal::bench::append(out, {"data.dedup_" + name + "_items_per_s", rate, "items/s", copy_rate, kCommand});
    std::printf("dedup %s: %.0f items/s (copy without dedup %.0f items/s)\n", name.c_str(), rate, copy_rate);
  };
  run(dir / "text", frugal::DedupOptions().text_field("txt"), texts, "text_minhash");
  run(dir / "images", frugal::DedupOptions().image_field("jpg"), images, "image_dhash");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s results.jsonl work_dir [loader-threads]\n", argv[0]);
    return 2;
  }
  const bool only_loader_threads = argc > 3 && std::string(argv[3]) == "loader-threads";
  torch::set_num_threads(1);
  const fs::path dir = argv[2];
  fs::remove_all(dir);
  fs::create_directories(dir);
  frugal::log::set_level(frugal::log::Level::warn);
  if (!only_loader_threads) {
    shard_throughput(argv[1], dir);
    loader_threads(argv[1], dir);
  }
  frugal::bench::loader_threads_scaling(argv[1], dir, kCommand);
  frugal::bench::collate_reuse(argv[1], kCommand);
  if (!only_loader_threads) dedup_throughput(argv[1], dir);
  fs::remove_all(dir);
  return 0;
}
