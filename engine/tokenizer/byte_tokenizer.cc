// Byte tokenizer of the builtin models: ids 0..255 are the bytes themselves,
// 256 is <bos>, 257 is <eos>; vocabulary size 258.
#include <memory>

#include "engine/tokenizer/tokenizer.h"

namespace kvserve::engine {
namespace {

constexpr int32_t kBos = 256;
constexpr int32_t kEos = 257;
constexpr int32_t kVocabSize = 258;

class ByteTokenizer final : public Tokenizer {
 public:
  int32_t vocab_size() const override { return kVocabSize; }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size() + 1);
    if (add_special_tokens) ids.push_back(kBos);
    for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }

  void AppendTokenBytes(int32_t id, bool first, bool skip_special,
                        std::string* out) const override {
    if (id >= 0 && id < 256) {
      out->push_back(static_cast<char>(id));
    } else if (id == kBos || id == kEos) {
      if (!skip_special) out->append(id == kBos ? "<bos>" : "<eos>");
    }
    // Ids outside the vocabulary decode to nothing.
  }

  bool IsSpecial(int32_t id) const override { return id == kBos || id == kEos; }
  std::optional<int32_t> bos_token_id() const override { return kBos; }
  std::optional<int32_t> eos_token_id() const override { return kEos; }
};

}  // namespace

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace kvserve::engine
