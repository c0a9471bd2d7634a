// Oracle driver: dequantizes every tensor of a GGUF file with kvserve's
// loader and writes its fp32 values, raw little-endian, to
// <out_dir>/<tensor name>.f32 (tests/oracle/test_gguf_dequant.py compares
// them with the gguf package's dequantize). Exit 1 with the error on stderr
// when the file does not parse or a tensor does not dequantize.
//
//   kvserve_gguf_dequant_driver FILE.gguf OUT_DIR
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "engine/loader/gguf_dequant.h"
#include "engine/loader/gguf_file.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s FILE.gguf OUT_DIR\n", argv[0]);
    return 2;
  }
  auto file = kvserve::engine::GgufFile::Open(argv[1]);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  for (const kvserve::engine::GgufTensor& t : (*file)->tensors()) {
    std::vector<float> values(static_cast<size_t>(t.num_elements));
    const absl::Status s =
        kvserve::engine::DequantizeGgml(t.type, t.data, t.num_bytes, t.num_elements, values.data());
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", t.name.c_str(), std::string(s.message()).c_str());
      return 1;
    }
    std::ofstream out(std::string(argv[2]) + "/" + t.name + ".f32", std::ios::binary);
    out.write(reinterpret_cast<const char*>(values.data()),
              static_cast<std::streamsize>(values.size() * sizeof(float)));
  }
  return 0;
}
