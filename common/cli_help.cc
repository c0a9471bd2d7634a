#include "common/cli_help.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kvserve::common {
namespace {

// The repository's top-level source folders (where flags can be defined).
constexpr absl::string_view kTopLevelFolders[] = {"server/",    "tools/",   "bench/", "engine/",
                                                  "scheduler/", "kernels/", "tests/", "common/"};

// absl::ParseCommandLine ends the process with std::exit(1) both after
// printing help and on a bad flag. While it runs, this atexit handler turns
// that exit into the code we want (flushing first: _Exit does not).
std::atomic<int> parse_exit_code{-1};

void RemapParseExit() {
  const int code = parse_exit_code.load();
  if (code < 0) return;
  std::cout.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

// Whether argv asks for a flag that Abseil handles by printing and exiting.
bool AsksForHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--")) absl::ConsumePrefix(&arg, "-");
    arg = arg.substr(0, arg.find('='));
    if (arg == "help" || arg == "helpfull" || arg == "helpshort" || arg == "helppackage" ||
        arg == "helpon" || arg == "helpmatch" || arg == "version" || arg == "only_check_args") {
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<char*> ParseCommandLine(int argc, char** argv, int bad_flag_exit_code) {
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(RemapParseExit); });
  parse_exit_code = AsksForHelp(argc, argv) ? 0 : bad_flag_exit_code;
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  parse_exit_code = -1;
  return positional;
}

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
