// Constraints by kind, for the grammar and scheduler tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/grammar/constraint.h"

namespace kvserve::engine::grammar::test_constraints {

inline Constraint Choice(std::vector<std::string> choices) {
  Constraint c;
  c.kind = ConstraintKind::kChoice;
  c.choices = std::move(choices);
  return c;
}

inline Constraint Regex(std::string re) {
  Constraint c;
  c.kind = ConstraintKind::kRegex;
  c.text = std::move(re);
  return c;
}

inline Constraint Schema(std::string schema) {
  Constraint c;
  c.kind = ConstraintKind::kJsonSchema;
  c.text = std::move(schema);
  return c;
}

}  // namespace kvserve::engine::grammar::test_constraints
