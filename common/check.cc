#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace kvserve::internal {

void CheckFailed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: KVSERVE_CHECK failed: %s\n", file, line, condition);
  std::fflush(stderr);
  std::abort();
}

}  // namespace kvserve::internal
