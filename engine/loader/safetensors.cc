// SafetensorsCheckpoint::Open (single file or sharded index) and ReadF32.
#include "engine/loader/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/loader/dtype_convert.h"
#include "engine/loader/mapped_file.h"
#include "engine/loader/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace kvserve::engine {
namespace {

using Json = nlohmann::json;

constexpr char kIndexName[] = "model.safetensors.index.json";
constexpr char kSingleName[] = "model.safetensors";

std::string ShapeString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The checkpoint over one or more mapped files.
//
// Invariants: every TensorInfo::data points into a mapping in files_, which
// lives as long as this object; a name is in at most one of tensors_ and
// unsupported_.
class MappedCheckpoint final : public SafetensorsCheckpoint {
 public:
  explicit MappedCheckpoint(std::string source) : source_(std::move(source)) {}

  absl::StatusOr<const TensorInfo*> Find(std::string_view name) const override {
    if (auto it = tensors_.find(name); it != tensors_.end()) return &it->second;
    if (auto it = unsupported_.find(name); it != unsupported_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor \"", std::string(name), "\" in ", it->second.file, " has dtype ",
          it->second.dtype_name, ", which is not supported (supported: F32, F16, BF16)"));
    }
    return absl::NotFoundError(
        absl::StrCat("tensor \"", std::string(name), "\" not found in ", source_));
  }

  bool Contains(std::string_view name) const override {
    return tensors_.contains(name) || unsupported_.contains(name);
  }

  std::vector<std::string> TensorNames() const override {
    std::vector<std::string> names;
    names.reserve(tensors_.size() + unsupported_.size());
    for (const auto& [name, info] : tensors_) names.push_back(name);
    for (const auto& [name, info] : unsupported_) names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
  }

  // Maps `path` and adds its tensors; a name already present is an error.
  absl::StatusOr<const MappedFile*> AddFile(const std::string& path) {
    absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
    if (!file.ok()) return file.status();
    absl::StatusOr<std::vector<RawTensor>> raw = ParseSafetensorsHeader(**file);
    if (!raw.ok()) return raw.status();
    for (RawTensor& t : *raw) {
      if (const std::string* other = FileOf(t.name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor \"", t.name, "\" is stored twice: in ", *other, " and in ", path));
      }
      if (!t.dtype.has_value()) {
        unsupported_.emplace(t.name, Unsupported{path, std::move(t.dtype_name)});
        continue;
      }
      std::string name = t.name;
      tensors_.emplace(std::move(name), TensorInfo{.name = std::move(t.name),
                                                   .file = path,
                                                   .dtype = *t.dtype,
                                                   .shape = std::move(t.shape),
                                                   .data = t.data,
                                                   .num_bytes = t.num_bytes});
    }
    files_.push_back(*std::move(file));
    return files_.back().get();
  }

  // The file holding `name`, or nullptr.
  const std::string* FileOf(std::string_view name) const {
    if (auto it = tensors_.find(name); it != tensors_.end()) return &it->second.file;
    if (auto it = unsupported_.find(name); it != unsupported_.end()) return &it->second.file;
    return nullptr;
  }

 private:
  struct Unsupported {
    std::string file;
    std::string dtype_name;
  };

  std::string source_;  // what Find's NotFound names: the file or the index
  std::vector<std::unique_ptr<MappedFile>> files_;  // owns the mappings
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::map<std::string, Unsupported, std::less<>> unsupported_;
};

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> OpenSingle(const std::string& path) {
  auto ckpt = std::make_unique<MappedCheckpoint>(path);
  if (absl::StatusOr<const MappedFile*> f = ckpt->AddFile(path); !f.ok()) return f.status();
  return ckpt;
}

// model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: shard file}}.
// Each shard is mapped once; every tensor the index names must be in its shard.
absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> OpenIndex(const std::string& index_path) {
  std::ifstream in(index_path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(index_path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  Json index;
  try {
    index = Json::parse(text.str());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": not valid JSON: ", e.what()));
  }
  const auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || weight_map == index.end() || !weight_map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": field \"weight_map\" missing or not an object"));
  }
  // shard file -> the first tensor the index puts there (for messages), sorted
  // so shards are mapped in a stable order.
  std::map<std::string, std::string> shards;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string() || shard.get<std::string>().empty() ||
        shard.get<std::string>().front() == '/') {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map entry for tensor \"",
                                                     tensor, "\" is not a relative file name"));
    }
    shards.emplace(shard.get<std::string>(), tensor);
  }
  const std::string dir = DirName(index_path);
  auto ckpt = std::make_unique<MappedCheckpoint>(index_path);
  for (const auto& [shard, first_tensor] : shards) {
    const std::string shard_path = absl::StrCat(dir, "/", shard);
    absl::StatusOr<const MappedFile*> f = ckpt->AddFile(shard_path);
    if (!f.ok()) {
      return absl::Status(f.status().code(),
                          absl::StrCat(index_path, ": shard \"", shard, "\" (holding tensor \"",
                                       first_tensor, "\"): ", f.status().message()));
    }
  }
  for (const auto& [tensor, shard] : weight_map->items()) {
    const std::string shard_path = absl::StrCat(dir, "/", shard.get<std::string>());
    const std::string* file = ckpt->FileOf(tensor);
    if (file == nullptr || *file != shard_path) {
      return absl::InvalidArgumentError(absl::StrCat(
          index_path, ": tensor \"", tensor, "\" is mapped to ", shard_path,
          file == nullptr ? ", but no shard holds it" : absl::StrCat(", but it is in ", *file)));
    }
  }
  return ckpt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& path) {
  if (IsDirectory(path)) {
    const std::string index = absl::StrCat(path, "/", kIndexName);
    if (Exists(index)) return OpenIndex(index);
    const std::string single = absl::StrCat(path, "/", kSingleName);
    if (Exists(single)) return OpenSingle(single);
    return absl::NotFoundError(
        absl::StrCat(path, ": no ", kIndexName, " or ", kSingleName, " in this directory"));
  }
  if (!Exists(path)) return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  if (path.ends_with(".json")) return OpenIndex(path);
  return OpenSingle(path);
}

absl::StatusOr<const TensorInfo*> SafetensorsCheckpoint::FindWithShape(
    std::string_view name, std::span<const int64_t> expected_shape) const {
  absl::StatusOr<const TensorInfo*> found = Find(name);
  if (!found.ok()) return found.status();
  const TensorInfo& t = **found;
  if (!std::equal(t.shape.begin(), t.shape.end(), expected_shape.begin(), expected_shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", std::string(name), "\" in ", t.file,
                                                   " has shape ", ShapeString(t.shape),
                                                   ", expected ", ShapeString(expected_shape)));
  }
  size_t count = 1;
  for (int64_t d : t.shape) count *= static_cast<size_t>(d);
  if (count * DTypeSize(t.dtype) != t.num_bytes) {
    // Open checks this for files; a hand-made TensorInfo could still be wrong.
    return absl::InternalError(absl::StrCat("tensor \"", std::string(name), "\" in ", t.file,
                                            " holds ", t.num_bytes, " bytes, not ", count, " x ",
                                            DTypeName(t.dtype)));
  }
  return &t;
}

absl::Status SafetensorsCheckpoint::ReadF32(std::string_view name,
                                            std::span<const int64_t> expected_shape,
                                            float* out) const {
  absl::StatusOr<const TensorInfo*> found = FindWithShape(name, expected_shape);
  if (!found.ok()) return found.status();
  const TensorInfo& t = **found;
  ConvertToF32(t.dtype, t.data, t.num_bytes / DTypeSize(t.dtype), out);
  return absl::OkStatus();
}

}  // namespace kvserve::engine
