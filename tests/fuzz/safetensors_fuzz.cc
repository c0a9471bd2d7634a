// The safetensors header and the sharded index. Input: one byte choosing the
// mode, then
//   mode even: the bytes of one .safetensors file;
//   mode odd:  Piece() = a shard file's bytes, Rest() = the index JSON, whose
//              weight_map may name the shard "model-00001.safetensors".
// Every tensor a file that opens lists is read back with its own shape, so
// offsets and sizes the header claims are exercised against the mapping.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "engine/loader/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

namespace fs = std::filesystem;

// One scratch directory per process (libFuzzer may run several), removed at
// exit. Kept as a plain string so the exit handler never sees a destroyed object.
char g_scratch[256];

const fs::path ScratchDir() {
  if (g_scratch[0] == '\0') {
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path dir = base / ("kvserve_fuzz_safetensors_" + std::to_string(getpid()));
    fs::create_directories(dir);
    std::snprintf(g_scratch, sizeof(g_scratch), "%s", dir.c_str());
    std::atexit([] {
      std::error_code ignored;
      fs::remove_all(g_scratch, ignored);
    });
  }
  return fs::path(g_scratch);
}

void WriteFile(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void ReadEveryTensor(const kvserve::engine::SafetensorsCheckpoint& checkpoint) {
  constexpr int64_t kMaxElements = int64_t{1} << 16;  // keep each run cheap
  for (const std::string& name : checkpoint.TensorNames()) {
    absl::StatusOr<const kvserve::engine::TensorInfo*> info = checkpoint.Find(name);
    if (!info.ok()) continue;  // an unsupported dtype: listed, not readable
    int64_t elements = 1;
    for (int64_t d : (*info)->shape) elements *= d;
    if (elements > kMaxElements) continue;
    std::vector<float> out(static_cast<size_t>(elements));
    const absl::Status read = checkpoint.ReadF32(name, (*info)->shape, out.data());
    KVSERVE_FUZZ_CHECK(read.ok(), std::string(read.message()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvserve::fuzz::FuzzInput in(data, size);
  const bool sharded = in.Byte() & 1;
  const fs::path dir = ScratchDir();
  fs::remove(dir / "model.safetensors.index.json");
  fs::remove(dir / "model.safetensors");
  fs::path open_path;
  if (sharded) {
    WriteFile(dir / "model-00001.safetensors", in.Piece());
    WriteFile(dir / "model.safetensors.index.json", in.Rest());
    open_path = dir / "model.safetensors.index.json";
  } else {
    WriteFile(dir / "model.safetensors", in.Rest());
    open_path = dir / "model.safetensors";
  }
  auto checkpoint = kvserve::engine::SafetensorsCheckpoint::Open(open_path.string());
  if (checkpoint.ok()) ReadEveryTensor(**checkpoint);
  return 0;
}
