// Structured-output request parsing: a body's response_format /
// structured_outputs / guided_* fields -> the engine Constraint
// (server/http/openai_constraint.h), then, for what parses, its grammar
// compiled against the byte tokenizer's vocabulary and walked by a matcher.
// Properties: nothing throws or crashes; an error is a 400 naming a
// parameter; a constraint that parses builds (CheckConstraint ran
// BuildGrammar) and compiles; the matcher allows exactly what it accepts
// (an allowed token is accepted, a disallowed one refused and nothing
// changes), and nothing is accepted once the grammar terminated.
//
// Input: one byte (bit 0: compile and walk), then a piece (the token
// choices of the walk: each byte picks among the allowed tokens), then the
// body.
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "engine/grammar/grammar_compiler.h"
#include "engine/grammar/token_matcher.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/http/openai_constraint.h"
#include "server/http/openai_protocol.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kvserve::engine::grammar::CompiledConstraint;
using kvserve::engine::grammar::GrammarCompileService;
using kvserve::engine::grammar::TokenMatcher;

constexpr int32_t kVocab = 258;

void Walk(const CompiledConstraint& compiled, std::string_view picks) {
  TokenMatcher m(compiled.grammar(), kVocab);
  for (const char pick : picks) {
    if (m.terminated()) {
      KVSERVE_FUZZ_CHECK(!m.Accept('a') && !m.Accept(257), "nothing follows termination");
      return;
    }
    m.FillMask();
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < kVocab; ++t) {
      if (m.Allowed(t)) allowed.push_back(t);
    }
    KVSERVE_FUZZ_CHECK(static_cast<int32_t>(allowed.size()) == m.NumAllowed(), "mask count");
    if (allowed.empty()) return;
    // A disallowed token is refused and changes nothing.
    for (int32_t t = 0; t < kVocab; ++t) {
      if (!m.Allowed(t)) {
        KVSERVE_FUZZ_CHECK(!m.Accept(t), "a disallowed token was accepted");
        break;
      }
    }
    const int32_t t = allowed[static_cast<uint8_t>(pick) % allowed.size()];
    KVSERVE_FUZZ_CHECK(m.Accept(t), "an allowed token was refused");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<kvserve::engine::Tokenizer> tokenizer =
      kvserve::engine::MakeByteTokenizer();
  kvserve::fuzz::FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  const std::string_view picks = in.Piece();
  absl::StatusOr<kvserve::server::http::Json> body =
      kvserve::server::http::ParseJsonBody(in.Rest());
  if (!body.ok() || !body->is_object()) return 0;
  absl::StatusOr<std::optional<kvserve::engine::grammar::Constraint>> c =
      kvserve::server::http::ParseConstraint(*body);
  if (!c.ok()) {
    const kvserve::server::http::ApiError e = kvserve::server::http::ToApiError(c.status());
    KVSERVE_FUZZ_CHECK(e.http_status == 400, std::string(c.status().message()));
    KVSERVE_FUZZ_CHECK(!e.param.empty(), std::string(c.status().message()));
    return 0;
  }
  if (!c->has_value() || (flags & 1) == 0) return 0;
  // One service per input: its cache must not carry state between inputs.
  GrammarCompileService service(
      {.tokenizer = tokenizer.get(), .vocab_size = kVocab, .stop_token_ids = {257}});
  std::shared_ptr<const CompiledConstraint> compiled = service.Compile(**c);
  while (!compiled->ready()) std::this_thread::yield();
  KVSERVE_FUZZ_CHECK(compiled->status().ok(), std::string(compiled->status().message()));
  Walk(*compiled, picks);
  return 0;
}
