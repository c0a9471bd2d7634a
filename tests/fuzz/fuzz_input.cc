#include "tests/fuzz/fuzz_input.h"

#include <cstdio>
#include <cstdlib>

namespace kvserve::fuzz {

void PropertyFailed(const char* what, std::string_view detail) {
  std::fprintf(stderr, "fuzz property failed: %s\n  %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

}  // namespace kvserve::fuzz
