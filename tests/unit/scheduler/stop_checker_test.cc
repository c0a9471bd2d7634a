// StopChecker with the byte tokenizer (ids 0..255 are bytes, 256 <bos>,
// 257 <eos>): exact text emitted token by token.
#include "scheduler/stop_checker.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::scheduler {
namespace {

constexpr int32_t kEos = 257;

class StopCheckerTest : public ::testing::Test {
 protected:
  std::unique_ptr<engine::Tokenizer> tok_ = engine::MakeByteTokenizer();
  const std::vector<int32_t> eos_ = {kEos};

  struct Step {
    std::string text;
    FinishReason reason;
  };
  // Feeds the bytes of `s` (and extra ids) one token at a time.
  std::vector<Step> Run(StopChecker& c, const std::vector<int32_t>& ids) {
    std::vector<Step> steps;
    int32_t n = 0;
    for (int32_t id : ids) {
      StopChecker::Result r = c.Append(id, ++n);
      steps.push_back({r.text, r.reason});
      if (r.reason != FinishReason::kNone) break;
    }
    return steps;
  }
  static std::vector<int32_t> Ids(const std::string& s) {
    std::vector<int32_t> ids;
    for (unsigned char ch : s) ids.push_back(ch);
    return ids;
  }
  static std::string Texts(const std::vector<Step>& steps) {
    std::string t;
    for (const Step& s : steps) t += s.text + "|";
    return t;
  }
};

TEST_F(StopCheckerTest, StopStringAcrossTokensIsNotEmitted) {
  StopChecker c({.max_tokens = 100, .stop_strings = {"END"}}, eos_, tok_.get());
  auto steps = Run(c, Ids("abENDx"));
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_EQ(Texts(steps), "a|b||||");  // "E", "EN" held back, then matched
  EXPECT_EQ(steps.back().reason, FinishReason::kStopString);
}

TEST_F(StopCheckerTest, HeldTextIsReleasedWhenDisambiguated) {
  StopChecker c({.max_tokens = 100, .stop_strings = {"END"}}, eos_, tok_.get());
  auto steps = Run(c, Ids("aENx"));
  EXPECT_EQ(Texts(steps), "a|||ENx|");
  EXPECT_EQ(steps.back().reason, FinishReason::kNone);
}

TEST_F(StopCheckerTest, OverlappingPrefixes) {
  // "aaab": the held suffix shrinks to "aa" before the match at "aab".
  StopChecker c({.max_tokens = 100, .stop_strings = {"aab"}}, eos_, tok_.get());
  auto steps = Run(c, Ids("aaab"));
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(Texts(steps), "||a||");
  EXPECT_EQ(steps.back().reason, FinishReason::kStopString);
}

TEST_F(StopCheckerTest, EarliestStopStringWins) {
  StopChecker c({.max_tokens = 100, .stop_strings = {"cd", "bcdx", "b"}}, eos_, tok_.get());
  auto steps = Run(c, Ids("abcd"));
  // "b" matches at token 2 (after "a" was emitted).
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].text, "a");
  EXPECT_EQ(steps[1].text, "");
  EXPECT_EQ(steps[1].reason, FinishReason::kStopString);
}

TEST_F(StopCheckerTest, MultiByteCharacterAcrossTokens) {
  // U+00E9 is C3 A9: the first byte yields no text; the stop string "é!"
  // holds "é" back until "!" arrives.
  StopChecker c({.max_tokens = 100, .stop_strings = {"\xC3\xA9!"}}, eos_, tok_.get());
  auto steps = Run(c, {'x', 0xC3, 0xA9, '!'});
  EXPECT_EQ(Texts(steps), "x||||");
  EXPECT_EQ(steps.back().reason, FinishReason::kStopString);
  StopChecker d({.max_tokens = 100, .stop_strings = {"\xC3\xA9!"}}, eos_, tok_.get());
  EXPECT_EQ(Texts(Run(d, {0xC3, 0xA9, '?'})), "||\xC3\xA9?|");
}

TEST_F(StopCheckerTest, EosAndStopTokens) {
  StopChecker c({.max_tokens = 100, .stop_strings = {"END"}}, eos_, tok_.get());
  StopChecker::Result r1 = c.Append('E', 1);
  EXPECT_EQ(r1.text, "");
  StopChecker::Result r2 = c.Append(kEos, 2);
  EXPECT_EQ(r2.reason, FinishReason::kStopToken);
  EXPECT_EQ(r2.stop_token, kEos);
  EXPECT_EQ(r2.text, "E");  // held text is real output: flushed

  StopChecker ids({.max_tokens = 100, .stop_token_ids = {'q'}}, eos_, tok_.get());
  auto steps = Run(ids, Ids("abqz"));
  EXPECT_EQ(Texts(steps), "a|b||");
  EXPECT_EQ(steps.back().reason, FinishReason::kStopToken);

  StopChecker ignore({.max_tokens = 3, .ignore_eos = true}, eos_, tok_.get());
  steps = Run(ignore, {'a', kEos, 'b'});
  EXPECT_EQ(Texts(steps), "a||b|");  // <eos> is special: no text
  EXPECT_EQ(steps.back().reason, FinishReason::kLength);
}

TEST_F(StopCheckerTest, MaxTokensFlushesHeldText) {
  StopChecker c({.max_tokens = 2, .stop_strings = {"END"}}, eos_, tok_.get());
  auto steps = Run(c, Ids("aE"));
  EXPECT_EQ(Texts(steps), "a|E|");
  EXPECT_EQ(steps.back().reason, FinishReason::kLength);
}

TEST_F(StopCheckerTest, MinTokens) {
  StopChecker c({.max_tokens = 10, .min_tokens = 3, .stop_strings = {"x"}}, eos_, tok_.get());
  EXPECT_EQ(c.StopTokensToMask(0).size(), 1u);
  EXPECT_EQ(c.StopTokensToMask(2).size(), 1u);
  EXPECT_TRUE(c.StopTokensToMask(3).empty());
  // "x" before the third token is text; the third token "x" stops.
  auto steps = Run(c, Ids("xyxz"));
  EXPECT_EQ(Texts(steps), "x|y||");
  EXPECT_EQ(steps.back().reason, FinishReason::kStopString);
  // A stop string ending at or after min_tokens counts even if it began before.
  StopChecker d({.max_tokens = 10, .min_tokens = 2, .stop_strings = {"ab"}}, eos_, tok_.get());
  steps = Run(d, Ids("abc"));
  EXPECT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps.back().reason, FinishReason::kStopString);
  // An EOS sampled anyway below min_tokens (every logit masked) does not stop.
  StopChecker e({.max_tokens = 10, .min_tokens = 2}, eos_, tok_.get());
  EXPECT_EQ(e.Append(kEos, 1).reason, FinishReason::kNone);
  EXPECT_EQ(e.Append(kEos, 2).reason, FinishReason::kNone);
  EXPECT_EQ(e.Append(kEos, 3).reason, FinishReason::kStopToken);
}

TEST_F(StopCheckerTest, FlushReturnsHeldText) {
  StopChecker c({.max_tokens = 10, .stop_strings = {"END"}}, eos_, tok_.get());
  EXPECT_EQ(c.Append('E', 1).text, "");
  EXPECT_EQ(c.Append('N', 2).text, "");
  EXPECT_EQ(c.Flush(), "EN");
}

TEST_F(StopCheckerTest, NoTokenizerNoText) {
  StopChecker c({.max_tokens = 2}, eos_, nullptr);
  EXPECT_EQ(c.Append('a', 1).text, "");
  EXPECT_EQ(c.Append(kEos, 2).reason, FinishReason::kStopToken);
}

// A cut UTF-8 character is flushed as U+FFFD when the request finishes; a
// stop string that this flushed text completes still stops it (found by
// tests/fuzz/stop_checker_fuzz.cc: the text used to be emitted with the stop string).
TEST_F(StopCheckerTest, StopStringCompletedByTheFinalFlushAtLength) {
  StopChecker c({.max_tokens = 2, .stop_strings = {"a\xEF\xBF\xBD"}}, eos_, tok_.get());
  auto steps = Run(c, {'a', 0xC2});  // 0xC2 opens a 2-byte character
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(Texts(steps), "||");
  EXPECT_EQ(steps.back().reason, FinishReason::kStopString);
}

TEST_F(StopCheckerTest, StopStringCompletedByTheFinalFlushAtStopToken) {
  StopChecker c({.max_tokens = 10, .stop_strings = {"\xEF\xBF\xBD"}}, eos_, tok_.get());
  StopChecker::Result r = c.Append('x', 1);
  EXPECT_EQ(r.text, "x");
  r = c.Append(0xE6, 2);
  EXPECT_EQ(r.text, "");
  r = c.Append(kEos, 3);
  EXPECT_EQ(r.reason, FinishReason::kStopString);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.stop_string, "\xEF\xBF\xBD");
}

TEST_F(StopCheckerTest, FinalFlushWithoutAStopStringStillEndsAtLength) {
  StopChecker c({.max_tokens = 2, .stop_strings = {"zz"}}, eos_, tok_.get());
  auto steps = Run(c, {'a', 0xC2});
  EXPECT_EQ(Texts(steps), "a|\xEF\xBF\xBD|");
  EXPECT_EQ(steps.back().reason, FinishReason::kLength);
}

}  // namespace
}  // namespace kvserve::scheduler
