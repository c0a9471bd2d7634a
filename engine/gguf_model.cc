#include "engine/gguf_model.h"

#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/loader/gguf.h"

namespace kvserve::engine {
namespace {

constexpr char kModelKey[] = "tokenizer.ggml.model";

absl::StatusOr<std::optional<int32_t>> OptionalId(const GgufFile& file, const char* key) {
  if (file.Find(key) == nullptr) return std::optional<int32_t>();
  KVSERVE_ASSIGN_OR_RETURN(uint64_t id, file.GetUint(key));
  if (id > static_cast<uint64_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.source(), ": GGUF metadata \"", key, "\" = ", id, " is too large"));
  }
  return std::optional<int32_t>(static_cast<int32_t>(id));
}

absl::StatusOr<std::optional<bool>> OptionalBool(const GgufFile& file, const char* key) {
  if (file.Find(key) == nullptr) return std::optional<bool>();
  KVSERVE_ASSIGN_OR_RETURN(bool v, file.GetBool(key));
  return std::optional<bool>(v);
}

}  // namespace

bool IsGgufPath(const std::string& path) {
  std::error_code ec;
  return absl::EndsWith(path, ".gguf") && !std::filesystem::is_directory(path, ec);
}

absl::StatusOr<GgufVocab> ReadGgufVocab(const GgufFile& file) {
  GgufVocab v;
  KVSERVE_ASSIGN_OR_RETURN(std::string_view arch, file.GetString("general.architecture"));
  v.architecture = std::string(arch);
  KVSERVE_ASSIGN_OR_RETURN(std::string_view model, file.GetString(kModelKey));
  v.model = std::string(model);
  if (file.Find("tokenizer.ggml.pre") != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(std::string_view pre, file.GetString("tokenizer.ggml.pre"));
    v.pre = std::string(pre);
  }
  KVSERVE_ASSIGN_OR_RETURN(std::span<const std::string_view> tokens,
                           file.GetStringArray("tokenizer.ggml.tokens"));
  v.tokens.assign(tokens.begin(), tokens.end());
  if (file.Find("tokenizer.ggml.scores") != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(v.scores, file.GetFloatArray("tokenizer.ggml.scores"));
  }
  if (file.Find("tokenizer.ggml.token_type") != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(v.token_type, file.GetInt32Array("tokenizer.ggml.token_type"));
  }
  if (file.Find("tokenizer.ggml.merges") != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(std::span<const std::string_view> merges,
                             file.GetStringArray("tokenizer.ggml.merges"));
    v.merges.assign(merges.begin(), merges.end());
  }
  KVSERVE_ASSIGN_OR_RETURN(v.bos, OptionalId(file, "tokenizer.ggml.bos_token_id"));
  KVSERVE_ASSIGN_OR_RETURN(v.eos, OptionalId(file, "tokenizer.ggml.eos_token_id"));
  KVSERVE_ASSIGN_OR_RETURN(v.unk, OptionalId(file, "tokenizer.ggml.unknown_token_id"));
  KVSERVE_ASSIGN_OR_RETURN(v.add_bos, OptionalBool(file, "tokenizer.ggml.add_bos_token"));
  KVSERVE_ASSIGN_OR_RETURN(v.add_eos, OptionalBool(file, "tokenizer.ggml.add_eos_token"));
  return v;
}

absl::StatusOr<GgufModelParts> OpenGgufModel(const std::string& path) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> opened, GgufFile::Open(path));
  std::shared_ptr<const GgufFile> file(std::move(opened));
  GgufModelParts parts;
  KVSERVE_ASSIGN_OR_RETURN(parts.config, GgufModelConfig(*file));
  if (file->Find(kModelKey) != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(GgufVocab vocab, ReadGgufVocab(*file));
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = MakeGgufTokenizer(vocab);
    if (!tokenizer.ok()) {
      return absl::Status(tokenizer.status().code(),
                          absl::StrCat(path, ": ", tokenizer.status().message()));
    }
    parts.tokenizer = *std::move(tokenizer);
    if (file->Find("tokenizer.chat_template") != nullptr) {
      KVSERVE_ASSIGN_OR_RETURN(std::string_view source, file->GetString("tokenizer.chat_template"));
      EmbeddedChatTemplate t{.source = std::string(source)};
      if (vocab.bos.has_value()) t.bos_token = vocab.tokens[*vocab.bos];
      if (vocab.eos.has_value()) t.eos_token = vocab.tokens[*vocab.eos];
      parts.chat_template = std::move(t);
    }
  }
  parts.checkpoint = MakeGgufCheckpoint(file, parts.config);
  return parts;
}

}  // namespace kvserve::engine
