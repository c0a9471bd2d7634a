// Percentiles and the per-request / per-phase metrics of kvserve-loadgen on
// synthetic records whose expected values are computed by hand.
#include "tools/loadgen/stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvserve::loadgen {
namespace {

constexpr double kEps = 1e-12;

TEST(LoadgenPercentileTest, LinearInterpolationLikeNumpy) {
  // numpy.percentile([15, 20, 35, 40, 50], q) for q = 0, 10, 25, 50, 90, 99, 100
  // = 15, 17, 20, 35, 46, 49.6, 50   (h = (n - 1) q / 100 = 4q/100)
  const std::vector<double> x = {15, 20, 35, 40, 50};
  EXPECT_NEAR(Percentile(x, 0), 15, kEps);
  EXPECT_NEAR(Percentile(x, 10), 17, kEps);    // h = 0.4: 15 + 0.4 * 5
  EXPECT_NEAR(Percentile(x, 25), 20, kEps);    // h = 1
  EXPECT_NEAR(Percentile(x, 50), 35, kEps);    // h = 2
  EXPECT_NEAR(Percentile(x, 90), 46, kEps);    // h = 3.6: 40 + 0.6 * 10
  EXPECT_NEAR(Percentile(x, 99), 49.6, kEps);  // h = 3.96
  EXPECT_NEAR(Percentile(x, 100), 50, kEps);
}

TEST(LoadgenPercentileTest, EvenCountAndSingleValue) {
  // [1, 2, 3, 4]: p50 = 2.5 (h = 1.5), p90 = 3.7 (h = 2.7), p99 = 3.97 (h = 2.97).
  const std::vector<double> x = {1, 2, 3, 4};
  EXPECT_NEAR(Percentile(x, 50), 2.5, kEps);
  EXPECT_NEAR(Percentile(x, 90), 3.7, kEps);
  EXPECT_NEAR(Percentile(x, 99), 3.97, kEps);
  EXPECT_EQ(Percentile({7}, 0), 7);
  EXPECT_EQ(Percentile({7}, 99), 7);
  EXPECT_EQ(Percentile({}, 50), 0);
}

TEST(LoadgenSummarizeTest, UnsortedInput) {
  const Summary s = Summarize({50, 15, 40, 20, 35});
  EXPECT_EQ(s.count, 5);
  EXPECT_NEAR(s.mean, 32, kEps);
  // Population variance: (17^2 + 12^2 + 3^2 + 8^2 + 18^2) / 5 = 830 / 5 = 166.
  EXPECT_NEAR(s.stddev, std::sqrt(166.0), 1e-9);
  EXPECT_EQ(s.min, 15);
  EXPECT_EQ(s.max, 50);
  EXPECT_NEAR(s.p50, 35, kEps);
  EXPECT_NEAR(s.p90, 46, kEps);
  EXPECT_NEAR(s.p99, 49.6, kEps);
  EXPECT_EQ(Summarize({}).count, 0);
}

// A: sent at 1.0; messages at 1.2 (1 token), 1.3 (1), 1.5 (2); status at 1.6.
RequestRecord RecordA() {
  RequestRecord r;
  r.index = 0;
  r.sent = true;
  r.send_s = 1.0;
  r.chunk_s = {1.2, 1.3, 1.5};
  r.chunk_tokens = {1, 1, 2};
  r.num_tokens = 4;
  r.end_s = 1.6;
  r.finished = true;
  r.usage_prompt_tokens = 10;
  r.usage_cached_prompt_tokens = 4;
  r.usage_completion_tokens = 4;
  return r;
}

// B: sent at 2.0, one token at 2.5, status at 2.5.
RequestRecord RecordB() {
  RequestRecord r;
  r.index = 1;
  r.sent = true;
  r.send_s = 2.0;
  r.chunk_s = {2.5};
  r.chunk_tokens = {1};
  r.num_tokens = 1;
  r.end_s = 2.5;
  r.finished = true;
  r.usage_prompt_tokens = 6;
  r.usage_completion_tokens = 1;
  return r;
}

// C: UNAVAILABLE after one token (server died); D: never sent.
RequestRecord RecordC() {
  RequestRecord r;
  r.index = 2;
  r.sent = true;
  r.send_s = 3.0;
  r.chunk_s = {3.05};
  r.chunk_tokens = {1};
  r.num_tokens = 1;
  r.end_s = 3.1;
  r.status_code = 14;  // UNAVAILABLE
  return r;
}

RequestRecord RecordD() {
  RequestRecord r;
  r.index = 3;
  return r;
}

TEST(LoadgenRequestRecordTest, DerivedMetrics) {
  const RequestRecord a = RecordA();
  EXPECT_NEAR(*a.Ttft(), 0.2, kEps);
  EXPECT_NEAR(*a.E2e(), 0.6, kEps);
  EXPECT_NEAR(*a.Tpot(), 0.4 / 3, kEps);  // (0.6 - 0.2) / (4 - 1)
  const std::vector<double> itl = a.Itls();
  ASSERT_EQ(itl.size(), 2u);
  EXPECT_NEAR(itl[0], 0.1, kEps);
  EXPECT_NEAR(itl[1], 0.2, kEps);

  const RequestRecord b = RecordB();
  EXPECT_NEAR(*b.Ttft(), 0.5, kEps);
  EXPECT_FALSE(b.Tpot().has_value());  // one token: no TPOT
  EXPECT_TRUE(b.Itls().empty());

  // A failed request has no latency metrics.
  EXPECT_FALSE(RecordC().Ttft().has_value());
  EXPECT_FALSE(RecordC().E2e().has_value());
  EXPECT_TRUE(RecordC().Itls().empty());
  EXPECT_FALSE(RecordD().ok());
}

TEST(LoadgenComputeStatsTest, ThroughputLatencyAndErrors) {
  const PhaseStats s = ComputeStats({RecordA(), RecordB(), RecordC(), RecordD()}, Slo{});
  EXPECT_EQ(s.num_requests, 4);
  EXPECT_EQ(s.num_sent, 3);
  EXPECT_EQ(s.num_completed, 2);
  EXPECT_EQ(s.num_failed, 1);
  EXPECT_EQ(s.num_not_sent, 1);
  EXPECT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors.at("UNAVAILABLE"), 1);
  EXPECT_NEAR(s.duration_s, 3.1, kEps);  // the last status, C's
  EXPECT_EQ(s.total_output_tokens, 5);   // A 4 + B 1; C's token is not counted
  EXPECT_EQ(s.total_prompt_tokens, 16);
  EXPECT_EQ(s.total_cached_prompt_tokens, 4);
  EXPECT_NEAR(s.request_throughput, 2 / 3.1, kEps);
  EXPECT_NEAR(s.output_token_throughput, 5 / 3.1, kEps);
  EXPECT_NEAR(s.total_token_throughput, 21 / 3.1, kEps);
  // TTFT [0.2, 0.5]: mean 0.35, p50 0.35, p90 0.2 + 0.9 * 0.3 = 0.47, p99 0.497.
  EXPECT_EQ(s.ttft_s.count, 2);
  EXPECT_NEAR(s.ttft_s.mean, 0.35, kEps);
  EXPECT_NEAR(s.ttft_s.p50, 0.35, kEps);
  EXPECT_NEAR(s.ttft_s.p90, 0.47, kEps);
  EXPECT_NEAR(s.ttft_s.p99, 0.497, kEps);
  // TPOT: only A.
  EXPECT_EQ(s.tpot_s.count, 1);
  EXPECT_NEAR(s.tpot_s.p99, 0.4 / 3, kEps);
  // ITL: A's two gaps.
  EXPECT_EQ(s.itl_s.count, 2);
  EXPECT_NEAR(s.itl_s.mean, 0.15, kEps);
  EXPECT_NEAR(s.itl_s.p90, 0.19, kEps);
  // E2E [0.6, 0.5].
  EXPECT_NEAR(s.e2e_s.p50, 0.55, kEps);
  // No SLO: every completed request is good.
  EXPECT_EQ(s.num_good, 2);
  EXPECT_NEAR(s.request_goodput, 2 / 3.1, kEps);
}

TEST(LoadgenGoodputTest, EachSloOnItsOwnAndTogether) {
  const std::vector<RequestRecord> records = {RecordA(), RecordB(), RecordC()};
  auto good = [&](Slo slo) { return ComputeStats(records, slo).num_good; };
  Slo ttft;
  ttft.ttft_ms = 300;  // A (200 ms) meets, B (500 ms) does not
  EXPECT_EQ(good(ttft), 1);
  Slo tpot;
  tpot.tpot_ms = 100;  // A's TPOT is 133 ms: miss; B has no TPOT: meets
  EXPECT_EQ(good(tpot), 1);
  EXPECT_TRUE(MeetsSlo(RecordB(), tpot));
  EXPECT_FALSE(MeetsSlo(RecordA(), tpot));
  Slo e2e;
  e2e.e2e_ms = 550;  // A 600 ms misses, B 500 ms meets
  EXPECT_EQ(good(e2e), 1);
  EXPECT_TRUE(MeetsSlo(RecordB(), e2e));
  Slo all;
  all.ttft_ms = 300;
  all.e2e_ms = 550;  // A misses e2e, B misses ttft
  EXPECT_EQ(good(all), 0);
  Slo loose;
  loose.ttft_ms = 1000;
  loose.tpot_ms = 1000;
  loose.e2e_ms = 1000;
  const PhaseStats s = ComputeStats(records, loose);
  EXPECT_EQ(s.num_good, 2);  // the failed C never counts
  EXPECT_NEAR(s.request_goodput, 2 / 3.1, kEps);
  EXPECT_FALSE(MeetsSlo(RecordC(), loose));
}

TEST(LoadgenStatusCodeNameTest, Names) {
  EXPECT_EQ(StatusCodeName(0), "OK");
  EXPECT_EQ(StatusCodeName(1), "CANCELLED");
  EXPECT_EQ(StatusCodeName(4), "DEADLINE_EXCEEDED");
  EXPECT_EQ(StatusCodeName(8), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(StatusCodeName(14), "UNAVAILABLE");
  EXPECT_EQ(StatusCodeName(16), "UNAUTHENTICATED");
  EXPECT_EQ(StatusCodeName(99), "CODE_99");
}

TEST(LoadgenComputeStatsTest, OkWithoutFinalMessageIsAnError) {
  RequestRecord r = RecordA();
  r.finished = false;
  const PhaseStats s = ComputeStats({r}, Slo{});
  EXPECT_EQ(s.num_failed, 1);
  EXPECT_EQ(s.errors.at("NO_FINAL_MESSAGE"), 1);
}

}  // namespace
}  // namespace kvserve::loadgen
