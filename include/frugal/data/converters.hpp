#pragma once
// Turn common source layouts into shards (the `frugal-data convert` tool calls these):
// - an image folder, one subfolder per class (torchvision ImageFolder): "<key>.<jpg|png|...>"
//   with the file's bytes (JPEGs rewritten losslessly with restart markers, unless switched off)
//   and "<key>.cls" with the class index; classes.json lists the classes in index order (sorted
//   folder names, as ImageFolder does);
// - a JSONL file: one "<key>.json" per line;
// - a SQuAD v1.1 JSON file: one "<key>.json" per question with id, title, context, question and
//   answers ([{text, answer_start}]).
// Keys number the samples in source order. Malformed input throws DataError naming the file
// and the line or JSON path.
//
//   frugal::ShardWriter out("shards/train", frugal::ShardWriterOptions().target_bytes(64 << 20));
//   frugal::ConvertResult r = frugal::convert_image_folder("images/train", out);

#include <filesystem>
#include <string>
#include <vector>

#include "frugal/data/tar_shard.hpp"

namespace frugal {

struct ConvertResult {
  int64_t samples = 0;
  std::vector<ShardInfo> shards;
  std::vector<std::string> classes;  // image folders
  std::vector<std::string> skipped;  // files passed over, with the reason (never silently)
  std::vector<std::string> warnings;  // converted, but worth knowing (logged too), naming the file
};

struct ImageFolderConvertOptions {
  /// Rewrite every JPEG losslessly with a restart marker after each MCU
  /// (add_jpeg_restart_markers): the same pixels, usually a smaller file, and region decoding
  /// (RandomResizedCrop's) then entropy-decodes only the crop instead of everything above its
  /// last row. A JPEG that cannot be rewritten (corrupt data) is stored as it is, with a warning
  /// naming it.
  TORCH_ARG(bool, restart_markers) = true;
};

ConvertResult convert_image_folder(const std::filesystem::path& root, ShardWriter& out,
                                   const ImageFolderConvertOptions& options = ImageFolderConvertOptions());
ConvertResult convert_jsonl(const std::filesystem::path& file, ShardWriter& out);
ConvertResult convert_squad(const std::filesystem::path& file, ShardWriter& out);

/// "classes.json" of an image-folder conversion, from the shard directory.
std::vector<std::string> read_classes(const std::filesystem::path& shard_directory);

}  // namespace frugal
