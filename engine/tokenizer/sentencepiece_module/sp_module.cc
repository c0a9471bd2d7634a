// libkvserve_sentencepiece.so: SpModel over libsentencepiece. Loaded with
// dlopen by sp_model_loader.cc; see sp_model.h for why.
// No Abseil header may be included in this file.
#include <sentencepiece_processor.h>

#include "engine/tokenizer/sp_model.h"

namespace kvserve::engine {
namespace {

class SentencePieceModel final : public SpModel {
 public:
  bool Load(const char* path, std::string* error) {
    const auto status = processor_.Load(path);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }

  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const override {
    const auto status = processor_.Encode(text, ids);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  std::string DecodeIds(const std::vector<int>& ids) const override {
    return processor_.DecodeIds(ids);
  }
  int PieceSize() const override { return processor_.GetPieceSize(); }
  const std::string& IdToPiece(int id) const override { return processor_.IdToPiece(id); }
  bool IsControl(int id) const override { return processor_.IsControl(id); }
  bool IsUnknown(int id) const override { return processor_.IsUnknown(id); }
  bool IsByte(int id) const override { return processor_.IsByte(id); }
  int bos_id() const override { return processor_.bos_id(); }
  int eos_id() const override { return processor_.eos_id(); }
  int unk_id() const override { return processor_.unk_id(); }
  std::string SerializedModelProto() const override { return processor_.serialized_model_proto(); }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace
}  // namespace kvserve::engine

extern "C" __attribute__((visibility("default"))) kvserve::engine::SpModel*
kvserve_sentencepiece_load(const char* path, std::string* error) {
  auto model = std::make_unique<kvserve::engine::SentencePieceModel>();
  if (!model->Load(path, error)) return nullptr;
  return model.release();
}
