#include "squad_data.hpp"

namespace bert_example {
namespace fs = std::filesystem;
namespace {

const std::vector<std::string> kFields{"input_ids", "token_type_ids", "attention_mask", "positions",
                                       "example",   "char_begin",     "char_end",       "max_context"};

std::vector<torch::Tensor*> fields(FeatureTensors& f) {
  return {&f.input_ids, &f.token_type_ids, &f.attention_mask, &f.positions, &f.example, &f.char_begin, &f.char_end, &f.max_context};
}

FeatureTensors to_tensors(const std::vector<frugal::SquadFeature>& features) {
  const auto n = static_cast<int64_t>(features.size());
  const auto width = n > 0 ? static_cast<int64_t>(features.front().input_ids.size()) : 0;
  auto matrix = [&](auto member) {
    torch::Tensor t = torch::empty({n, width}, torch::kInt64);
    auto* out = t.data_ptr<int64_t>();
    for (const auto& f : features) out = std::copy((f.*member).begin(), (f.*member).end(), out);
    return t;
  };
  FeatureTensors t{matrix(&frugal::SquadFeature::input_ids), matrix(&frugal::SquadFeature::token_type_ids),
                   matrix(&frugal::SquadFeature::attention_mask), torch::empty({n, 2}, torch::kInt64), torch::empty({n}, torch::kInt64),
                   matrix(&frugal::SquadFeature::char_begin), matrix(&frugal::SquadFeature::char_end),
                   matrix(&frugal::SquadFeature::max_context)};
  for (int64_t i = 0; i < n; ++i) {
    const auto& f = features[static_cast<size_t>(i)];
    t.positions[i][0] = f.start_position;
    t.positions[i][1] = f.end_position;
    t.example[i] = f.example;
  }
  return t;
}

}  // namespace

std::vector<frugal::SquadFeature> FeatureTensors::records() const {
  std::vector<frugal::SquadFeature> out(static_cast<size_t>(size()));
  auto row = [](const torch::Tensor& t, int64_t i) {
    const torch::Tensor r = t[i].contiguous();
    return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
  };
  for (int64_t i = 0; i < size(); ++i) {
    auto& f = out[static_cast<size_t>(i)];
    f.example = example[i].item<int64_t>();
    f.input_ids = row(input_ids, i);
    f.char_begin = row(char_begin, i);
    f.char_end = row(char_end, i);
    f.max_context = row(max_context, i);
  }
  return out;
}

FeatureTensors squad_features(const fs::path& squad_file, const std::vector<frugal::SquadExample>& examples,
                              const frugal::WordPieceTokenizer& tokenizer, const fs::path& vocab_file,
                              const frugal::SquadFeatureOptions& options, bool training, const std::string& cache_dir) {
  auto build = [&] { return to_tensors(frugal::make_squad_features(examples, tokenizer, options, training)); };
  if (cache_dir.empty()) return build();
  frugal::PreprocessCache cache(cache_dir);
  const frugal::CacheKey key{"bert_squad_features", 2,  // 2: max_context
                             c10::str("max_seq_length=", options.max_seq_length, " doc_stride=", options.doc_stride,
                                      " max_query_length=", options.max_query_length, " training=", training,
                                      " vocab=", frugal::fingerprint_files({vocab_file})),
                             frugal::fingerprint_files({squad_file})};
  const auto entry = cache.get_or_build(key, [&](const fs::path& dir) {
    FeatureTensors t = build();
    auto all = fields(t);
    for (size_t i = 0; i < kFields.size(); ++i) {
      std::ofstream(dir / (kFields[i] + ".npy"), std::ios::binary) << frugal::encode_npy(*all[i]);
    }
  });
  FeatureTensors t;
  auto all = fields(t);
  for (size_t i = 0; i < kFields.size(); ++i) {
    const fs::path file = entry.dir / (kFields[i] + ".npy");
    std::ifstream in(file, std::ios::binary);
    *all[i] = frugal::decode_npy(std::string(std::istreambuf_iterator<char>(in), {}), file.string());
  }
  return t;
}

frugal::Batch FeatureDataset::get_batch(const std::vector<int64_t>& indices) const {
  const torch::Tensor at = torch::tensor(indices, torch::kInt64);
  return {f_.input_ids.index_select(0, at), f_.positions.index_select(0, at),
          {{"token_type_ids", f_.token_type_ids.index_select(0, at)}, {"attention_mask", f_.attention_mask.index_select(0, at)}}};
}

}  // namespace bert_example
