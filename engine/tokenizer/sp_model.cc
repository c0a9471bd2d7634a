// No Abseil header may be included in this file; see sp_model.h.
#include "engine/tokenizer/sp_model.h"

#include <sentencepiece_processor.h>

namespace kvserve::engine {

struct SpModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SpModel::SpModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpModel::~SpModel() = default;

std::unique_ptr<SpModel> SpModel::Load(const std::string& path, std::string* error) {
  auto impl = std::make_unique<Impl>();
  const auto status = impl->processor.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return std::unique_ptr<SpModel>(new SpModel(std::move(impl)));
}

bool SpModel::Encode(std::string_view text, std::vector<int>* ids, std::string* error) const {
  const auto status = impl_->processor.Encode(text, ids);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

std::string SpModel::DecodeIds(const std::vector<int>& ids) const {
  return impl_->processor.DecodeIds(ids);
}

int SpModel::PieceSize() const { return impl_->processor.GetPieceSize(); }
const std::string& SpModel::IdToPiece(int id) const { return impl_->processor.IdToPiece(id); }
bool SpModel::IsControl(int id) const { return impl_->processor.IsControl(id); }
bool SpModel::IsUnknown(int id) const { return impl_->processor.IsUnknown(id); }
bool SpModel::IsByte(int id) const { return impl_->processor.IsByte(id); }
int SpModel::bos_id() const { return impl_->processor.bos_id(); }
int SpModel::eos_id() const { return impl_->processor.eos_id(); }
int SpModel::unk_id() const { return impl_->processor.unk_id(); }
std::string SpModel::SerializedModelProto() const {
  return impl_->processor.serialized_model_proto();
}

}  // namespace kvserve::engine
