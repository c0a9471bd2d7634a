// Early returns for absl::Status / absl::StatusOr at module boundaries.
//
//   KVSERVE_RETURN_IF_ERROR(expr);          expr is an absl::Status: returns it unless OK
//   KVSERVE_ASSIGN_OR_RETURN(lhs, expr);    expr is an absl::StatusOr<T>: returns its
//                                           status unless OK, else moves the value into
//                                           lhs (a declaration such as `auto x` or an
//                                           existing lvalue)
//
// Both work in any function returning absl::Status or absl::StatusOr<U>.
// ASSIGN_OR_RETURN expands to more than one statement: never use it as the
// body of an unbraced if or loop.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVSERVE_STATUS_CONCAT_INNER_(a, b) a##b
#define KVSERVE_STATUS_CONCAT_(a, b) KVSERVE_STATUS_CONCAT_INNER_(a, b)

#define KVSERVE_RETURN_IF_ERROR(expr)                                     \
  do {                                                                    \
    if (::absl::Status kvserve_status_ = (expr); !kvserve_status_.ok()) { \
      return kvserve_status_;                                             \
    }                                                                     \
  } while (false)

#define KVSERVE_ASSIGN_OR_RETURN(lhs, expr) \
  KVSERVE_ASSIGN_OR_RETURN_IMPL_(KVSERVE_STATUS_CONCAT_(kvserve_statusor_, __LINE__), lhs, expr)
#define KVSERVE_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                   \
  if (!result.ok()) return std::move(result).status();    \
  lhs = *std::move(result)
