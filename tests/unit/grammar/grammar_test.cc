// The grammar layer over a tiny vocabulary (the byte tokenizer: ids 0..255
// are the bytes, 256 <bos>, 257 <eos>, plus two padding ids past it): the
// vocabulary xgrammar sees, constraints and their errors, the compile
// service's cache, the matcher's masks, and the sampler drawing through them.
#include "xgrammar/grammar.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/grammar/constraint.h"
#include "engine/grammar/grammar_compiler.h"
#include "engine/grammar/grammar_vocab.h"
#include "engine/grammar/token_matcher.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/grammar/constraint_builders.h"

namespace kvserve::engine::grammar {
namespace {

constexpr int32_t kEos = 257;
constexpr int32_t kVocab = 260;  // the model's row: two ids past the tokenizer's 258

const Tokenizer& Bytes() {
  static const std::unique_ptr<Tokenizer> t = MakeByteTokenizer();
  return *t;
}

GrammarVocab Vocab() {
  return GrammarVocab{.tokenizer = &Bytes(), .vocab_size = kVocab, .stop_token_ids = {kEos}};
}

// Waits (bounded) for a compilation.
const CompiledConstraint& Wait(const std::shared_ptr<const CompiledConstraint>& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!c->ready() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(c->ready());
  return *c;
}

std::set<int32_t> AllowedSet(const TokenMatcher& m) {
  std::set<int32_t> out;
  for (int32_t t = 0; t < kVocab; ++t) {
    if (m.Allowed(t)) out.insert(t);
  }
  return out;
}

std::set<int32_t> BytesOf(const std::string& s) {
  std::set<int32_t> out;
  for (char c : s) out.insert(static_cast<unsigned char>(c));
  return out;
}

using test_constraints::Choice;
using test_constraints::Regex;
using test_constraints::Schema;

TEST(GrammarVocabTest, EveryIdIsItsBytesAndSpecialTokensAreEmpty) {
  const std::vector<std::string> vocab = DecodedVocabulary(Bytes());
  ASSERT_EQ(vocab.size(), 258u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(vocab[b], std::string(1, static_cast<char>(b))) << b;
  EXPECT_EQ(vocab[256], "");
  EXPECT_EQ(vocab[kEos], "");
}

TEST(ConstraintTest, CacheKeysSeparateEveryField) {
  EXPECT_NE(Choice({"ab", "c"}).CacheKey(), Choice({"a", "bc"}).CacheKey());
  EXPECT_NE(Regex("a").CacheKey(), Schema("a").CacheKey());
  Constraint loose = Schema("{}");
  loose.strict = false;
  EXPECT_NE(loose.CacheKey(), Schema("{}").CacheKey());
  EXPECT_EQ(Choice({"x"}).CacheKey(), Choice({"x"}).CacheKey());
}

TEST(ConstraintTest, ChoiceGrammarEscapesQuotesBackslashesAndControlBytes) {
  EXPECT_EQ(ChoiceGrammar({"a\"b", "c\\d", "e\nf"}),
            "root ::= \"a\\\"b\" | \"c\\\\d\" | \"e\\x0af\"\n");
  // And xgrammar reads it back.
  EXPECT_TRUE(BuildGrammar(Choice({"a\"b", "c\\d", "e\nf", "ü"})).ok());
}

TEST(ConstraintTest, WhatXgrammarRefusesIsAnErrorNamingTheKind) {
  const absl::StatusOr<xgrammar::Grammar> bad_json = BuildGrammar(Schema("{not json"));
  ASSERT_FALSE(bad_json.ok());
  EXPECT_EQ(bad_json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_json.status().message().find("json_schema"), std::string::npos)
      << bad_json.status();

  const absl::StatusOr<xgrammar::Grammar> bad_regex = BuildGrammar(Regex("(unclosed"));
  ASSERT_FALSE(bad_regex.ok());
  EXPECT_NE(bad_regex.status().message().find("regex"), std::string::npos) << bad_regex.status();

  Constraint ebnf;
  ebnf.kind = ConstraintKind::kGrammar;
  ebnf.text = "root ::= undefined_rule";
  EXPECT_FALSE(BuildGrammar(ebnf).ok());
  EXPECT_FALSE(BuildGrammar(Choice({})).ok());
  EXPECT_FALSE(BuildGrammar(Choice({"a", ""})).ok());
  EXPECT_FALSE(BuildGrammar(Regex("")).ok());
}

TEST(ConstraintTest, StructuralTagsAndCompactSchemaEbnf) {
  // The compact JSON grammar of a schema, as EBNF text xgrammar reads back.
  absl::StatusOr<std::string> ebnf =
      JsonSchemaEbnf(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                         "required": ["a"]})",
                     true);
  ASSERT_TRUE(ebnf.ok()) << ebnf.status();
  Constraint grammar;
  grammar.kind = ConstraintKind::kGrammar;
  grammar.text = *ebnf;
  ASSERT_TRUE(BuildGrammar(grammar).ok()) << *ebnf;
  EXPECT_FALSE(JsonSchemaEbnf("{not json", true).ok());

  Constraint tag;
  tag.kind = ConstraintKind::kStructuralTag;
  tag.text = R"({"type": "structural_tag", "format": {"type": "tag", "begin": "<a>",
                 "content": {"type": "grammar", "grammar": )" +
             nlohmann::json(*ebnf).dump() + R"(}, "end": "</a>"}})";
  EXPECT_TRUE(BuildGrammar(tag).ok()) << BuildGrammar(tag).status();
  EXPECT_NE(tag.CacheKey(), [&] {
    Constraint same_text = tag;
    same_text.kind = ConstraintKind::kGrammar;
    return same_text.CacheKey();
  }());
  tag.text = R"({"type": "structural_tag", "format": {"type": "no_such_format"}})";
  const absl::StatusOr<xgrammar::Grammar> bad = BuildGrammar(tag);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("structural_tag"), std::string::npos) << bad.status();
}

TEST(CompileServiceTest, EqualConstraintsShareOneCompilation) {
  GrammarCompileService service(Vocab());
  auto a = service.Compile(Choice({"yes", "no"}));
  auto b = service.Compile(Choice({"yes", "no"}));
  EXPECT_EQ(a.get(), b.get());
  auto c = service.Compile(Choice({"yes", "maybe"}));
  EXPECT_NE(a.get(), c.get());
  EXPECT_TRUE(Wait(a).status().ok()) << a->status();
  EXPECT_TRUE(Wait(c).status().ok()) << c->status();
  EXPECT_EQ(service.num_compiled(), 2);
  EXPECT_EQ(service.num_cache_hits(), 1);
}

TEST(CompileServiceTest, AFailedCompilationIsReadyWithTheError) {
  double observed = -1;
  bool observed_ok = true;
  std::atomic<int> calls{0};
  {
    GrammarCompileService service(Vocab(), [&](double s, bool ok) {
      observed = s;
      observed_ok = ok;
      ++calls;
    });
    const CompiledConstraint& r = Wait(service.Compile(Schema("[1, 2")));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }  // joined: the observer has run
  EXPECT_EQ(calls.load(), 1);
  EXPECT_FALSE(observed_ok);
  EXPECT_GE(observed, 0);
}

TEST(CompileServiceTest, TheCacheIsBoundedAndEvictedGrammarsStayValid) {
  GrammarCompileService service(Vocab(), nullptr, /*max_cached=*/2);
  auto first = service.Compile(Choice({"a"}));
  Wait(first);
  for (const char* s : {"b", "c", "d"}) Wait(service.Compile(Choice({s})));
  // "a" was dropped from the cache: compiled again, a new result.
  auto again = service.Compile(Choice({"a"}));
  EXPECT_NE(again.get(), first.get());
  Wait(again);
  EXPECT_EQ(service.num_compiled(), 5);
  TokenMatcher m(first->grammar(), kVocab);  // the dropped one still works
  m.FillMask();
  EXPECT_EQ(AllowedSet(m), BytesOf("a"));
}

TEST(TokenMatcherTest, ChoiceAllowsExactlyTheNextBytesThenOnlyEos) {
  GrammarCompileService service(Vocab());
  const CompiledConstraint& c = Wait(service.Compile(Choice({"yes", "no", "nope"})));
  ASSERT_TRUE(c.status().ok()) << c.status();
  TokenMatcher m(c.grammar(), kVocab);
  m.FillMask();
  EXPECT_EQ(AllowedSet(m), BytesOf("yn"));
  EXPECT_FALSE(m.Accept('x'));  // refused, nothing changes
  ASSERT_TRUE(m.Accept('n'));
  ASSERT_TRUE(m.Accept('o'));
  m.FillMask();
  // "no" is complete (EOS) or goes on to "nope".
  EXPECT_EQ(AllowedSet(m), (std::set<int32_t>{'p', kEos}));
  ASSERT_TRUE(m.Accept('p'));
  ASSERT_TRUE(m.Accept('e'));
  m.FillMask();
  EXPECT_EQ(AllowedSet(m), (std::set<int32_t>{kEos}));
  EXPECT_EQ(m.NumAllowed(), 1);
  EXPECT_FALSE(m.terminated());
  ASSERT_TRUE(m.Accept(kEos));
  EXPECT_TRUE(m.terminated());
}

TEST(TokenMatcherTest, PaddingIdsAndSpecialTokensAreNeverAllowed) {
  GrammarCompileService service(Vocab());
  // Any byte at all, forever: only <bos> and the padding ids stay masked.
  const CompiledConstraint& c = Wait(service.Compile(Regex("[\\x00-\\xff]*")));
  ASSERT_TRUE(c.status().ok()) << c.status();
  TokenMatcher m(c.grammar(), kVocab);
  m.FillMask();
  EXPECT_FALSE(m.Allowed(256));
  EXPECT_FALSE(m.Allowed(258));
  EXPECT_FALSE(m.Allowed(259));
  EXPECT_TRUE(m.Allowed('a'));
  EXPECT_TRUE(m.Allowed(kEos));
  std::vector<int32_t> disallowed;
  m.AppendDisallowed(&disallowed);
  for (int32_t t : disallowed) EXPECT_FALSE(m.Allowed(t));
  EXPECT_EQ(static_cast<int32_t>(disallowed.size()) + m.NumAllowed(), kVocab);
}

TEST(TokenMatcherTest, JsonSchemaForcesItsKeysInOrder) {
  GrammarCompileService service(Vocab());
  const CompiledConstraint& c =
      Wait(service.Compile(Schema(R"({"type": "object", "properties": {"ok": {"type": "boolean"}},
                 "required": ["ok"]})")));
  ASSERT_TRUE(c.status().ok()) << c.status();
  TokenMatcher m(c.grammar(), kVocab);
  std::string text;
  // Follow the grammar greedily: whenever one byte is allowed, take it.
  for (int i = 0; i < 64; ++i) {
    m.FillMask();
    const std::set<int32_t> allowed = AllowedSet(m);
    if (allowed.size() != 1) break;
    const int32_t t = *allowed.begin();
    if (t == kEos) break;
    text += static_cast<char>(t);
    ASSERT_TRUE(m.Accept(t));
  }
  EXPECT_EQ(text, "{\"ok\": ");  // compact JSON: ": " and no other whitespace
  m.FillMask();
  EXPECT_EQ(AllowedSet(m), BytesOf("tf"));
}

// The sampler draws through a grammar mask: whatever the temperature,
// top-k, top-p, min-p and penalties, every draw is an allowed token, and a
// disallowed token with the highest logit never wins.
TEST(MaskedSamplingTest, DrawsOnlyAllowedTokensUnderEverySetting) {
  GrammarCompileService service(Vocab());
  const CompiledConstraint& c = Wait(service.Compile(Regex("[0-9]+")));
  ASSERT_TRUE(c.status().ok()) << c.status();
  TokenMatcher m(c.grammar(), kVocab);
  m.FillMask();
  const std::set<int32_t> allowed = AllowedSet(m);
  ASSERT_EQ(allowed, BytesOf("0123456789"));

  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = normal(rng);
  logits['a'] = 50.0f;  // the model's favourite is not allowed
  std::vector<float> masked = logits;
  m.ApplyMask(masked);
  for (int32_t t = 0; t < kVocab; ++t) {
    if (allowed.contains(t)) {
      EXPECT_EQ(masked[t], logits[t]) << t;
    } else {
      EXPECT_EQ(masked[t], -std::numeric_limits<float>::infinity()) << t;
    }
  }

  int32_t best_allowed = '0';
  for (int32_t t : allowed) {
    if (logits[t] > logits[best_allowed]) best_allowed = t;
  }
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(Sample(masked, greedy, {}, {}).token, best_allowed);
  SamplingParams top1;
  top1.top_k = 1;
  top1.seed = 3;
  EXPECT_EQ(Sample(masked, top1, {}, {}).token, best_allowed);

  const std::vector<int32_t> history = {'a', 'a', '5', '7'};
  for (const SamplingParams& p :
       {SamplingParams{.temperature = 1.0f},
        SamplingParams{.temperature = 2.5f, .top_k = 4, .top_p = 0.9f},
        SamplingParams{.temperature = 0.7f, .min_p = 0.05f, .repetition_penalty = 1.3f},
        SamplingParams{
            .temperature = 1.0f, .presence_penalty = -2.0f, .frequency_penalty = -2.0f}}) {
    std::set<int32_t> drawn;
    SamplingParams q = p;
    for (uint64_t seed = 0; seed < 300; ++seed) {
      q.seed = seed;
      const int32_t t = Sample(masked, q, history, history).token;
      EXPECT_TRUE(allowed.contains(t)) << t;
      drawn.insert(t);
    }
    EXPECT_GT(drawn.size(), 1u);  // sampling, not a constant
  }
}

}  // namespace
}  // namespace kvserve::engine::grammar
