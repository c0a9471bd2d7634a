// KVSERVE_CHECK: a broken invariant is a bug, not a status (docs/architecture.md,
// "Errors"). On failure it prints the condition and location to stderr and
// aborts, in every build type. Use it for conditions no input can cause.
#pragma once

namespace kvserve::scheduler::internal {

[[noreturn]] void CheckFailed(const char* condition, const char* file, int line);

}  // namespace kvserve::scheduler::internal

#define KVSERVE_CHECK(condition)                                                   \
  do {                                                                             \
    if (!(condition)) [[unlikely]] {                                               \
      ::kvserve::scheduler::internal::CheckFailed(#condition, __FILE__, __LINE__); \
    }                                                                              \
  } while (false)
