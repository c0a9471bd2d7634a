// How every kvserve program answers --help.
//
// Abseil's default --help lists the flags of a source file named after the
// binary ("kvserve-loadgen.cc"), which no hyphenated program has, so it says
// "No flags matched". ConfigureHelp makes --help and --helpshort list the
// flags of the program's own flag files instead, and names every file by its
// path inside the repository: never a path of the machine it was built on
// (the build also maps the source root away from __FILE__, see the top-level
// CMakeLists.txt; this is the second line of defence). --helpfull still
// lists every flag, Abseil's included.
//
// Call it in main() before absl::ParseCommandLine.
#pragma once

#include <string>
#include <vector>

namespace kvserve::common {

struct HelpOptions {
  // What --help prints above the flags (Abseil's program usage message).
  std::string usage;
  // The repository-relative files whose flags --help lists, e.g.
  // {"server/flags.cc"}.
  std::vector<std::string> flag_files;
  // --version's text; empty: "<program> <KVSERVE_VERSION>".
  std::string version;
};

void ConfigureHelp(HelpOptions options);

// absl::ParseCommandLine, except for how it ends the process: --help,
// --helpfull, --helpshort, --helpon, --helpmatch, --helppackage, --version and
// --only_check_args exit 0 after printing (Abseil exits 1), and a bad flag
// exits `bad_flag_exit_code` after Abseil's message. Returns the positional
// arguments (argv[0] first) when parsing goes on.
std::vector<char*> ParseCommandLine(int argc, char** argv, int bad_flag_exit_code = 1);

// The path of `file` inside the repository: the part from the first of the
// repository's top-level folders on ("/srv/src/kvserve/server/flags.cc" ->
// "server/flags.cc"), else `file` without leading "/" and "./" or "../".
std::string RepositoryRelativePath(const std::string& file);

}  // namespace kvserve::common
