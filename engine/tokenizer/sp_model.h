// SpModel: the SentencePiece processor behind a plain C++ interface.
//
// Why an interface, implemented in a separately loaded module
// (sentencepiece_module/, built as libkvserve_sentencepiece.so):
// - Debian's libsentencepiece embeds its own copy of protobuf-lite and
//   exports those symbols. In a process that also loads libprotobuf (the gRPC
//   daemon), the dynamic linker binds one library's protobuf calls to the
//   other's copy and the process crashes at start-up. The module is
//   dlopen'ed with RTLD_LOCAL | RTLD_DEEPBIND on first use: sentencepiece's
//   calls bind to its own copy, and its symbols stay out of the global scope.
// - sentencepiece_processor.h declares `namespace absl { using
//   std::string_view; }`, which clashes with the installed Abseil; only the
//   module includes it, and this header includes neither.
// Calls cross the boundary through the vtable only (no symbol lookup).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::engine {

class SpModel {
 public:
  // Returns nullptr and sets *error when the module or the file cannot be
  // loaded. The module is found at KVSERVE_SENTENCEPIECE_MODULE (environment),
  // else where the build put it, else next to the executable.
  static std::unique_ptr<SpModel> Load(const std::string& path, std::string* error);
  virtual ~SpModel() = default;

  // Thread-safe (the processor is not modified after Load).
  virtual bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const = 0;
  virtual std::string DecodeIds(const std::vector<int>& ids) const = 0;

  virtual int PieceSize() const = 0;
  virtual const std::string& IdToPiece(int id) const = 0;
  virtual bool IsControl(int id) const = 0;
  virtual bool IsUnknown(int id) const = 0;
  virtual bool IsByte(int id) const = 0;
  virtual int bos_id() const = 0;  // -1 if none
  virtual int eos_id() const = 0;
  virtual int unk_id() const = 0;
  virtual std::string SerializedModelProto() const = 0;
};

// The module's one exported symbol: returns a new model, or nullptr with
// *error set.
using SpModelFactory = SpModel* (*)(const char* path, std::string* error);
inline constexpr const char* kSpModelFactorySymbol = "kvserve_sentencepiece_load";

}  // namespace kvserve::engine
