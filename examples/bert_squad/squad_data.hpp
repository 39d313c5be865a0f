#pragma once
// The BERT example's data: SQuAD examples, their tokenized windows (features) as tensors, cached
// through Frugal's preprocessing cache so a second run does not tokenize again, and a Dataset
// over them whose batches carry input_ids (input), start/end positions (target) and the token
// types and attention mask (extra).

#include <filesystem>
#include <memory>
#include <string>

#include "frugal/frugal.hpp"

namespace bert_example {

/// The features of one SQuAD file as tensors [features, max_seq_length] (positions [features, 2]),
/// plus each feature's example index and the context character spans for post-processing.
struct FeatureTensors {
  torch::Tensor input_ids, token_type_ids, attention_mask, positions, example, char_begin, char_end, max_context;
  int64_t size() const { return input_ids.size(0); }
  /// Back to SquadFeature records (what best_answers reads).
  std::vector<frugal::SquadFeature> records() const;
};

/// Tokenizes `examples` into windows, or loads them from `cache_dir` ("" = no cache) when the
/// same file, vocabulary and options were processed before.
FeatureTensors squad_features(const std::filesystem::path& squad_file, const std::vector<frugal::SquadExample>& examples,
                              const frugal::WordPieceTokenizer& tokenizer, const std::filesystem::path& vocab_file,
                              const frugal::SquadFeatureOptions& options, bool training, const std::string& cache_dir);

class FeatureDataset : public frugal::Dataset {
 public:
  explicit FeatureDataset(FeatureTensors features) : f_(std::move(features)) {}
  int64_t size() const override { return f_.size(); }
  frugal::Batch get_batch(const std::vector<int64_t>& indices) const override;
  const FeatureTensors& features() const { return f_; }

 private:
  FeatureTensors f_;
};

}  // namespace bert_example
