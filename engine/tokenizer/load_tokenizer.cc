// Loading tokenizers from files: tokenizer.json (+ tokenizer_config.json next
// to it) or tokenizer.model. Every error names the file.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf_bpe_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve::engine {
namespace {

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("file not found: ", path.string()));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InternalError(absl::StrCat("cannot read ", path.string()));
  }
  return std::move(buffer).str();
}

absl::Status WithFile(const absl::Status& status, const std::filesystem::path& path) {
  return absl::Status(status.code(), absl::StrCat(path.string(), ": ", status.message()));
}

// config.json's model_type (AutoTokenizer's choice of class depends on
// it), or "" when there is no config.json or no model_type.
absl::StatusOr<std::string> ReadModelType(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::string();
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a valid JSON object"));
  }
  auto it = j.find("model_type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerJson(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto spec = ParseHfBpeSpec(*text);
  if (!spec.ok()) return WithFile(spec.status(), path);
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const std::filesystem::path config = dir / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config, ec)) {
    auto model_type = ReadModelType(dir / "config.json");
    if (!model_type.ok()) return model_type.status();
    auto config_text = ReadFile(config);
    if (!config_text.ok()) return config_text.status();
    if (auto s = ApplyTokenizerConfig(*config_text, *model_type, &*spec); !s.ok()) {
      return WithFile(s, config);
    }
  }
  auto tokenizer = MakeHfBpeTokenizer(*std::move(spec));
  if (!tokenizer.ok()) return WithFile(tokenizer.status(), path);
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  std::error_code ec;
  if (std::filesystem::exists(dir / "tokenizer.json", ec)) {
    return LoadHfTokenizerJson((dir / "tokenizer.json").string());
  }
  if (std::filesystem::exists(dir / "tokenizer.model", ec)) {
    return LoadSentencePiece((dir / "tokenizer.model").string());
  }
  return absl::NotFoundError(
      absl::StrCat(model_dir, ": neither tokenizer.json nor tokenizer.model found"));
}

}  // namespace kvserve::engine
