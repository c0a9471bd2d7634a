// KVSERVE_CHECK: a broken invariant is a bug, not a status (docs/architecture.md,
// "Errors"). On failure it prints the condition and location to stderr and
// aborts, in every build type. Use it for conditions no input can cause;
// anything an input can cause is an absl::Status (common/status_macros.h).
#pragma once

namespace kvserve::internal {

[[noreturn]] void CheckFailed(const char* condition, const char* file, int line);

}  // namespace kvserve::internal

#define KVSERVE_CHECK(condition)                                        \
  do {                                                                  \
    if (!(condition)) [[unlikely]] {                                    \
      ::kvserve::internal::CheckFailed(#condition, __FILE__, __LINE__); \
    }                                                                   \
  } while (false)
