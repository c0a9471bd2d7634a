#include "common/cli_help.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kvserve::common {
namespace {

// The repository's top-level source folders (where flags can be defined).
constexpr absl::string_view kTopLevelFolders[] = {"server/",    "tools/",   "bench/", "engine/",
                                                  "scheduler/", "kernels/", "tests/", "common/"};

}  // namespace

std::string RepositoryRelativePath(const std::string& file) {
  for (absl::string_view folder : kTopLevelFolders) {
    if (absl::StartsWith(file, folder)) return file;
  }
  // The last "/<folder>" wins: a checkout inside a folder named "tools" still
  // maps /home/me/tools/kvserve/server/flags.cc to server/flags.cc.
  size_t best = std::string::npos;
  for (absl::string_view folder : kTopLevelFolders) {
    const size_t at = file.rfind(absl::StrCat("/", folder));
    if (at != std::string::npos && (best == std::string::npos || at > best)) best = at;
  }
  if (best != std::string::npos) return file.substr(best + 1);
  size_t start = 0;
  while (start < file.size() && (file[start] == '/' || file[start] == '.')) ++start;
  return file.substr(start);
}

void ConfigureHelp(HelpOptions options) {
  absl::SetProgramUsageMessage(options.usage);
  auto files = std::make_shared<const std::vector<std::string>>(std::move(options.flag_files));
  auto is_ours = [files](absl::string_view file) {
    const std::string relative = RepositoryRelativePath(std::string(file));
    return std::find(files->begin(), files->end(), relative) != files->end();
  };
  absl::FlagsUsageConfig config;
  config.contains_help_flags = is_ours;
  config.contains_helpshort_flags = is_ours;
  config.normalize_filename = [](absl::string_view file) {
    return RepositoryRelativePath(std::string(file));
  };
  if (!options.version.empty()) {
    config.version_string = [version = options.version] { return version + "\n"; };
  }
  absl::SetFlagsUsageConfig(config);
}

}  // namespace kvserve::common
