// A thin wrapper over sentencepiece::SentencePieceProcessor with a plain C++
// interface. It exists because sentencepiece_processor.h declares
// `namespace absl { using std::string_view; }`, which clashes with the
// installed Abseil (whose absl::string_view is its own class): the wrapper's
// .cc includes sentencepiece and no Abseil header, and this header includes
// neither.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::engine {

class SpModel {
 public:
  // Returns nullptr and sets *error when the file cannot be loaded.
  static std::unique_ptr<SpModel> Load(const std::string& path, std::string* error);
  ~SpModel();

  // Thread-safe (the processor is not modified after Load).
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  std::string DecodeIds(const std::vector<int>& ids) const;

  int PieceSize() const;
  const std::string& IdToPiece(int id) const;
  bool IsControl(int id) const;
  bool IsUnknown(int id) const;
  bool IsByte(int id) const;
  int bos_id() const;  // -1 if none
  int eos_id() const;
  int unk_id() const;
  std::string SerializedModelProto() const;

 private:
  struct Impl;
  explicit SpModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::engine
