// The GGUF parser and everything built from a parsed file. Input: the bytes
// of one GGUF file. A file that parses has every tensor of at most 2^16
// values dequantized (the parser checked its size: dequantization must then
// succeed), its metadata turned into a config, its vocabulary into a
// tokenizer that encodes a short text to ids inside the vocabulary, and, when
// the config is valid, every tensor it serves read through the checkpoint.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf_model.h"
#include "engine/loader/gguf.h"
#include "engine/loader/gguf_dequant.h"
#include "engine/loader/gguf_file.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kvserve::engine::GgufFile;
using kvserve::engine::GgufTensor;

constexpr int64_t kMaxElements = int64_t{1} << 16;  // keep each run cheap

void DequantizeEveryTensor(const GgufFile& file) {
  for (const GgufTensor& t : file.tensors()) {
    if (t.num_elements > kMaxElements) continue;
    std::vector<float> out(static_cast<size_t>(t.num_elements));
    const absl::Status s =
        kvserve::engine::DequantizeGgml(t.type, t.data, t.num_bytes, t.num_elements, out.data());
    KVSERVE_FUZZ_CHECK(s.ok(), std::string(s.message()));
  }
}

void BuildTokenizer(const GgufFile& file) {
  auto vocab = kvserve::engine::ReadGgufVocab(file);
  if (!vocab.ok() || vocab->tokens.size() > 4096) return;
  auto tokenizer = kvserve::engine::MakeGgufTokenizer(*vocab);
  if (!tokenizer.ok()) return;
  auto ids = (*tokenizer)->Encode("Hello wörld  <s>\n\t12", /*add_special_tokens=*/true);
  if (!ids.ok()) return;
  for (int32_t id : *ids) {
    KVSERVE_FUZZ_CHECK(id >= 0 && id < (*tokenizer)->vocab_size(), std::to_string(id));
  }
  (void)(*tokenizer)->Decode(*ids, /*skip_special=*/false);
}

void ReadServedTensors(std::shared_ptr<const GgufFile> file) {
  auto config = kvserve::engine::GgufModelConfig(*file);
  if (!config.ok()) return;
  auto checkpoint = kvserve::engine::MakeGgufCheckpoint(file, *config);
  for (const std::string& name : checkpoint->TensorNames()) {
    auto info = checkpoint->Find(name);
    if (!info.ok()) continue;  // e.g. a q tensor whose rows do not split into heads
    int64_t elements = 1;
    for (int64_t d : (*info)->shape) elements *= d;
    if (elements > kMaxElements) continue;
    std::vector<float> out(static_cast<size_t>(elements));
    const absl::Status read = checkpoint->ReadF32(name, (*info)->shape, out.data());
    KVSERVE_FUZZ_CHECK(read.ok(), std::string(read.message()));
    checkpoint->Release(name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = GgufFile::Parse(data, size, "fuzz.gguf");
  if (!parsed.ok()) return 0;
  std::shared_ptr<const GgufFile> file(std::move(*parsed));
  DequantizeEveryTensor(*file);
  BuildTokenizer(*file);
  ReadServedTensors(file);
  return 0;
}
