// SentencePiece tokenizer.model through libsentencepiece (via SpModel).
// Encoding is the library's; add_special_tokens prepends BOS (when the model
// has one), as Llama's tokenizers do. Decoding is per token and reproduces
// DecodeIds (sentencepiece 0.2):
//  - control pieces (<s>, </s>, ...) decode to nothing; they are the special
//    tokens, so skip_special changes nothing;
//  - the unknown piece decodes to the model's unk surface (" ⁇ ");
//  - byte pieces <0xNN> decode to the byte NN;
//  - other pieces decode with U+2581 replaced by ' ', except that at the
//    first position one leading U+2581 is dropped when the model adds a dummy
//    prefix or removes extra whitespace; without remove_extra_whitespaces
//    only one such space is dropped (EndsFirstPosition).
//  - a byte of a byte-piece run that is not part of a valid UTF-8 character
//    decodes to U+FFFD, one per byte (ReplacePerByte), as DecodeIds does:
//    a cut 3-byte character gives three. Other pieces are valid UTF-8, so
//    this rule on the concatenated bytes is the same as per run.
// Versions: encoding is whatever the linked libsentencepiece does (0.1.97 on
// the build image). The pinned Python oracle (0.2.3) breaks exact ties
// between equal-score unigram segmentations differently; BPE models agree.
#include <filesystem>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/sp_model.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve::engine {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581

// The ModelProto fields that decoding depends on, read with a minimal
// protobuf wire-format reader (sentencepiece_model.pb.h is not installed).
struct ProtoFlags {
  bool add_dummy_prefix = true;          // NormalizerSpec (ModelProto 3) field 3
  bool remove_extra_whitespaces = true;  // NormalizerSpec field 4
  bool has_denormalizer = false;         // ModelProto 5 with a precompiled_charsmap (2)
};

class WireReader {
 public:
  explicit WireReader(std::string_view data) : data_(data) {}

  // Reads the next field. Sets *varint for wire type 0 and *bytes for wire
  // type 2; skips fixed-size ones. Returns false at the end or on bad input.
  bool Next(uint32_t* field, uint32_t* wire_type, uint64_t* varint, std::string_view* bytes) {
    uint64_t key;
    if (pos_ >= data_.size() || !ReadVarint(&key)) return false;
    *field = static_cast<uint32_t>(key >> 3);
    *wire_type = static_cast<uint32_t>(key & 7);
    switch (*wire_type) {
      case 0:
        return ReadVarint(varint);
      case 1:
        return Skip(8);
      case 2: {
        uint64_t len;
        if (!ReadVarint(&len) || len > data_.size() - pos_) return false;
        *bytes = data_.substr(pos_, len);
        pos_ += len;
        return true;
      }
      case 5:
        return Skip(4);
      default:
        return false;
    }
  }

 private:
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Skip(size_t n) {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }

  std::string_view data_;
  size_t pos_ = 0;
};

ProtoFlags ReadProtoFlags(std::string_view model_proto) {
  ProtoFlags flags;
  WireReader model(model_proto);
  uint32_t field, wire;
  uint64_t varint = 0;
  std::string_view bytes;
  while (model.Next(&field, &wire, &varint, &bytes)) {
    if (wire != 2 || (field != 3 && field != 5)) continue;
    const bool denormalizer = field == 5;
    WireReader spec(bytes);
    std::string_view inner;
    while (spec.Next(&field, &wire, &varint, &inner)) {
      if (denormalizer) {
        if (field == 2 && wire == 2 && !inner.empty()) flags.has_denormalizer = true;
      } else if (field == 3 && wire == 0) {
        flags.add_dummy_prefix = varint != 0;
      } else if (field == 4 && wire == 0) {
        flags.remove_extra_whitespaces = varint != 0;
      }
    }
  }
  return flags;
}

std::string ReplaceSpaceSymbol(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, kSpaceSymbol.size()) == kSpaceSymbol) {
      out.push_back(' ');
      i += kSpaceSymbol.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const std::string& path) {
    std::string error;
    std::unique_ptr<SpModel> model = SpModel::Load(path, &error);
    if (model == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": cannot load SentencePiece model: ", error));
    }
    const ProtoFlags flags = ReadProtoFlags(model->SerializedModelProto());
    if (flags.has_denormalizer) {
      return absl::UnimplementedError(
          absl::StrCat(path, ": unsupported SentencePiece denormalizer_spec (decode rules)"));
    }
    std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
    t->Build(*model, flags);
    t->model_ = std::move(model);
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special_tokens) const override {
    std::vector<int> ids;
    std::string error;
    if (!model_->Encode(text, &ids, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("SentencePiece encode: ", error));
    }
    std::vector<int32_t> out;
    out.reserve(ids.size() + 1);
    if (add_special_tokens && bos_.has_value()) out.push_back(*bos_);
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  void AppendTokenBytes(int32_t id, bool first, bool skip_special,
                        std::string* out) const override {
    if (id < 0 || id >= vocab_size()) return;
    const Piece& p = pieces_[id];
    // Control pieces have empty text either way.
    out->append(first ? p.first_text : p.text);
  }

  bool EndsFirstPosition(int32_t id) const override {
    return id >= 0 && id < vocab_size() && pieces_[id].ends_first;
  }
  bool IsSpecial(int32_t id) const override {
    return id >= 0 && id < vocab_size() && pieces_[id].control;
  }
  bool ReplacePerByte() const override { return true; }
  std::optional<int32_t> bos_token_id() const override { return bos_; }
  std::optional<int32_t> eos_token_id() const override { return eos_; }

 private:
  struct Piece {
    std::string text;        // bytes anywhere but at the first position
    std::string first_text;  // bytes at the first position
    bool ends_first = false;
    bool control = false;
  };

  SentencePieceTokenizer() = default;

  void Build(const SpModel& model, const ProtoFlags& flags) {
    const bool strip_first = flags.add_dummy_prefix || flags.remove_extra_whitespaces;
    pieces_.resize(model.PieceSize());
    for (int id = 0; id < model.PieceSize(); ++id) {
      Piece& p = pieces_[id];
      const std::string& piece = model.IdToPiece(id);
      if (model.IsControl(id)) {
        p.control = true;
      } else if (model.IsUnknown(id)) {
        p.text = p.first_text = model.DecodeIds({id});
      } else if (const int byte = model.IsByte(id) ? ParseByteTokenName(piece) : -1; byte >= 0) {
        p.text = p.first_text = std::string(1, static_cast<char>(byte));
      } else {
        p.text = ReplaceSpaceSymbol(piece);
        const bool dropped = strip_first && piece.starts_with(kSpaceSymbol);
        p.first_text = dropped ? p.text.substr(1) : p.text;
        p.ends_first = dropped && !flags.remove_extra_whitespaces;
      }
    }
    if (model.bos_id() >= 0) bos_ = model.bos_id();
    if (model.eos_id() >= 0) eos_ = model.eos_id();
  }

  std::unique_ptr<SpModel> model_;
  std::vector<Piece> pieces_;  // by id
  std::optional<int32_t> bos_;
  std::optional<int32_t> eos_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("SentencePiece model not found: ", path));
  }
  return SentencePieceTokenizer::Create(path);
}

}  // namespace kvserve::engine
