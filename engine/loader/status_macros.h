// Early-return helpers for absl::Status / absl::StatusOr inside the loader
// (private to engine/loader/; not a public header).
#pragma once

#include <utility>

#include "absl/status/status.h"

#define LOADER_CONCAT_INNER_(a, b) a##b
#define LOADER_CONCAT_(a, b) LOADER_CONCAT_INNER_(a, b)

// LOADER_RETURN_IF_ERROR(expr): returns the Status `expr` when it is not OK.
#define LOADER_RETURN_IF_ERROR(expr)                                  \
  do {                                                                \
    if (absl::Status loader_status_ = (expr); !loader_status_.ok()) { \
      return loader_status_;                                          \
    }                                                                 \
  } while (false)

// LOADER_ASSIGN_OR_RETURN(lhs, expr): `expr` is a StatusOr; assigns its value
// to the existing lvalue `lhs`, or returns its status.
#define LOADER_ASSIGN_OR_RETURN(lhs, expr) \
  LOADER_ASSIGN_OR_RETURN_IMPL_(LOADER_CONCAT_(loader_result_, __LINE__), lhs, expr)
#define LOADER_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                  \
  if (!result.ok()) return result.status();              \
  lhs = *std::move(result)
