#include "frugal/data/converters.hpp"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/durable_io.hpp"
#include "frugal/data/image/jpeg.hpp"
#include "frugal/data/image_folder.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"
#include "frugal/text/squad.hpp"

namespace frugal {
namespace fs = std::filesystem;
namespace {

std::string sample_key(int64_t n) {
  char key[32];
  std::snprintf(key, sizeof key, "%09lld", static_cast<long long>(n));
  return key;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

nlohmann::json parse_json_file(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw DataError(file.string(), -1, "cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw DataError(file.string(), static_cast<int64_t>(e.byte), std::string("invalid JSON: ") + e.what());
  } catch (const nlohmann::json::exception& e) {  // a number too large for any type (out_of_range.406)
    throw DataError(file.string(), -1, std::string("invalid JSON: ") + e.what());
  }
}

// The value at `key` of `object` with the expected type, or DataError naming the JSON path.
const nlohmann::json& member(const nlohmann::json& object, const std::string& key, nlohmann::json::value_t type,
                             const fs::path& file, const std::string& path) {
  if (!object.is_object() || !object.contains(key)) throw DataError(file.string(), -1, path + "." + key + ": missing");
  const nlohmann::json& value = object.at(key);
  const bool ok = value.type() == type || (type == nlohmann::json::value_t::number_integer && value.is_number_integer());
  if (!ok) {
    throw DataError(file.string(), -1, c10::str(path, ".", key, ": expected ", nlohmann::json(type).type_name(),
                                                ", got ", value.type_name()));
  }
  return value;
}

}  // namespace

ConvertResult convert_image_folder(const fs::path& root, ShardWriter& out, const ImageFolderConvertOptions& options) {
  ImageFolderListing listing = list_image_folder(root);
  ConvertResult result;
  result.classes = std::move(listing.classes);
  result.skipped = std::move(listing.skipped);
  for (const auto& [file, label] : listing.images) {
    std::string ext = lower(file.extension().string().substr(1));
    if (ext == "jpeg") ext = "jpg";
    std::string bytes = detail::read_file(file);
    if (ext == "jpg") {
      try {
        jpeg_size(bytes, file.string());  // the header only: an empty or non-JPEG file would fail at training time
      } catch (const DataError& e) {
        result.skipped.push_back(e.what());
        continue;
      }
      if (options.restart_markers()) {
        try {
          bytes = add_jpeg_restart_markers(bytes, file.string());
        } catch (const DataError& e) {  // stored as it is: training decides what a corrupt image means
          result.warnings.push_back(c10::str(e.what(), "; stored as it is, without restart markers"));
        }
      }
    }
    out.write({sample_key(result.samples++), {{ext, std::move(bytes)}, {"cls", std::to_string(label)}}});
  }
  for (const auto& warning : result.warnings) log::warn(warning);
  result.shards = out.finish();
  detail::write_file_synced(result.shards.front().path.parent_path() / "classes.json", nlohmann::json(result.classes).dump(1));
  return result;
}

ConvertResult convert_jsonl(const fs::path& file, ShardWriter& out) {
  std::ifstream in(file);
  if (!in) throw DataError(file.string(), -1, "cannot open");
  ConvertResult result;
  std::string line;
  int64_t line_number = 0, offset = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const int64_t line_offset = offset;
    offset += static_cast<int64_t>(line.size()) + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      result.skipped.push_back(c10::str(file.string(), ":", line_number, ": blank line"));
      continue;
    }
    try {
      const auto value = nlohmann::json::parse(line);
      if (!value.is_object()) throw DataError(file.string(), line_offset, c10::str("line ", line_number, ": not a JSON object"));
    } catch (const nlohmann::json::parse_error& e) {
      throw DataError(file.string(), line_offset + static_cast<int64_t>(e.byte) - 1,
                      c10::str("line ", line_number, ": invalid JSON: ", e.what()));
    } catch (const nlohmann::json::exception& e) {
      throw DataError(file.string(), line_offset, c10::str("line ", line_number, ": invalid JSON: ", e.what()));
    }
    out.write({sample_key(result.samples++), {{"json", line}}});
  }
  result.shards = out.finish();
  return result;
}

ConvertResult convert_squad(const fs::path& file, ShardWriter& out) {
  using T = nlohmann::json::value_t;
  const nlohmann::json squad = parse_json_file(file);
  ConvertResult result;
  int64_t without_answer = 0, text_differs = 0, answer_count = 0;
  std::string first_difference;
  const auto& data = member(squad, "data", T::array, file, "$");
  for (size_t a = 0; a < data.size(); ++a) {
    const std::string article_path = c10::str("$.data[", a, "]");
    const auto& title = member(data[a], "title", T::string, file, article_path);
    const auto& paragraphs = member(data[a], "paragraphs", T::array, file, article_path);
    for (size_t p = 0; p < paragraphs.size(); ++p) {
      const std::string paragraph_path = c10::str(article_path, ".paragraphs[", p, "]");
      const auto& context = member(paragraphs[p], "context", T::string, file, paragraph_path);
      const auto& qas = member(paragraphs[p], "qas", T::array, file, paragraph_path);
      for (size_t q = 0; q < qas.size(); ++q) {
        const std::string qa_path = c10::str(paragraph_path, ".qas[", q, "]");
        nlohmann::json record{{"id", member(qas[q], "id", T::string, file, qa_path)},
                              {"title", title},
                              {"context", context},
                              {"question", member(qas[q], "question", T::string, file, qa_path)},
                              {"answers", nlohmann::json::array()}};
        const auto& answers = member(qas[q], "answers", T::array, file, qa_path);
        if (answers.empty()) ++without_answer;
        const auto& context_text = context.get_ref<const std::string&>();
        for (size_t i = 0; i < answers.size(); ++i) {
          const std::string answer_path = c10::str(qa_path, ".answers[", i, "]");
          const auto& text = member(answers[i], "text", T::string, file, answer_path);
          const auto& start = member(answers[i], "answer_start", T::number_integer, file, answer_path);
          // answer_start counts characters; compared without adding, so a huge start cannot overflow.
          const int64_t chars = utf8_length(context_text);
          if (start.get<int64_t>() < 0 || start.get<int64_t>() > chars - utf8_length(text.get_ref<const std::string&>())) {
            throw DataError(file.string(), -1, c10::str(answer_path, ".answer_start: ", start.get<int64_t>(),
                                                        " puts the answer outside its ", chars, "-character context"));
          }
          if (!answer_matches_context(context_text, text.get_ref<const std::string&>(), start.get<int64_t>())) {
            if (text_differs++ == 0) first_difference = answer_path;
          }
          ++answer_count;
          record["answers"].push_back({{"text", text}, {"answer_start", start}});
        }
        out.write({sample_key(result.samples++), {{"json", record.dump()}}});
      }
    }
  }
  if (result.samples == 0) throw DataError(file.string(), -1, "no questions: nothing to convert (an empty data set)");
  // Converted as they are, as the examples read them; said, as the examples say it.
  if (without_answer > 0) {
    result.warnings.push_back(c10::str(file.string(), ": ", without_answer, " of ", result.samples,
                                       " questions have no answer (trained as 'no answer in the window')"));
  }
  if (text_differs > 0) {
    result.warnings.push_back(c10::str(file.string(), ": ", text_differs, " of ", answer_count, " answers differ from the context at ",
                                       "their answer_start (the first: ", first_difference, "); the span at answer_start is trained on"));
  }
  for (const auto& warning : result.warnings) log::warn(warning);
  result.shards = out.finish();
  return result;
}

std::vector<std::string> read_classes(const fs::path& shard_directory) {
  const nlohmann::json classes = parse_json_file(shard_directory / "classes.json");
  if (!classes.is_array()) throw DataError((shard_directory / "classes.json").string(), -1, "expected an array of class names");
  return classes.get<std::vector<std::string>>();
}

}  // namespace frugal
