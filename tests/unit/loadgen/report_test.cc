// The JSON / CSV writers and the /metrics scraping of kvserve-loadgen.
#include "tools/loadgen/report.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "absl/strings/str_split.h"
#include "tools/loadgen/metrics_scrape.h"
#include "tools/loadgen/progress.h"

namespace kvserve::loadgen {
namespace {

PhaseReport SamplePhase() {
  PhaseReport p;
  p.request_rate = 2.5;
  RequestRecord a;
  a.index = 0;
  a.prompt_len = 8;
  a.max_tokens = 3;
  a.sent = true;
  a.send_s = 0.5;
  a.chunk_s = {0.6, 0.7};
  a.chunk_tokens = {1, 2};
  a.num_tokens = 3;
  a.end_s = 0.8;
  a.finished = true;
  a.finish_reason = "length";
  a.usage_prompt_tokens = 8;
  a.usage_cached_prompt_tokens = 4;
  a.usage_completion_tokens = 3;
  RequestRecord b;
  b.index = 1;
  b.sent = true;
  b.send_s = 0.9;
  b.end_s = 1.0;
  b.status_code = 14;
  p.records = {a, b};
  p.slo.ttft_ms = 500;
  p.stats = ComputeStats(p.records, p.slo);
  p.metrics_before = std::map<std::string, double>{{"kvserve_prefix_cache_hits_total", 10},
                                                   {"kvserve_prefix_cache_queries_total", 100}};
  p.metrics_after = std::map<std::string, double>{{"kvserve_prefix_cache_hits_total", 40},
                                                  {"kvserve_prefix_cache_queries_total", 160}};
  return p;
}

TEST(LoadgenReportTest, JsonHasEveryField) {
  const Json j = PhaseToJson(SamplePhase(), /*with_requests=*/true);
  for (const char* key : {"phase",
                          "request_rate",
                          "concurrency",
                          "num_requests",
                          "num_sent",
                          "num_completed",
                          "num_failed",
                          "num_not_sent",
                          "num_cancelled_by_limit",
                          "duration_s",
                          "total_prompt_tokens",
                          "total_cached_prompt_tokens",
                          "total_output_tokens",
                          "request_throughput",
                          "output_token_throughput",
                          "total_token_throughput",
                          "ttft_ms",
                          "tpot_ms",
                          "itl_ms",
                          "e2e_ms",
                          "goodput",
                          "errors",
                          "prefix_cache",
                          "server_metrics_delta",
                          "metrics_error",
                          "requests"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"count", "mean", "stddev", "min", "p50", "p90", "p99", "max"}) {
    EXPECT_TRUE(j["ttft_ms"].contains(key)) << key;
  }
  EXPECT_EQ(j["request_rate"], 2.5);
  EXPECT_EQ(j["errors"]["UNAVAILABLE"], 1);
  EXPECT_NEAR(j["ttft_ms"]["p50"].get<double>(), 100, 1e-9);
  EXPECT_NEAR(j["prefix_cache"]["hit_ratio"].get<double>(), 0.5, 1e-12);  // 30 / 60
  EXPECT_NEAR(j["prefix_cache"]["client_cached_token_ratio"].get<double>(), 0.5, 1e-12);
  EXPECT_EQ(j["server_metrics_delta"]["kvserve_prefix_cache_hits_total"], 30);
  EXPECT_EQ(j["goodput"]["slo_ttft_ms"], 500);
  EXPECT_TRUE(j["goodput"]["slo_e2e_ms"].is_null());
  EXPECT_EQ(j["goodput"]["num_good"], 1);
  ASSERT_EQ(j["requests"].size(), 2u);
  EXPECT_EQ(j["requests"][0]["token_times_ms"].size(), 3u);  // per token, not per message
  EXPECT_EQ(j["requests"][1]["status"], "UNAVAILABLE");
  EXPECT_TRUE(j["requests"][1]["ttft_ms"].is_null());
  EXPECT_FALSE(PhaseToJson(SamplePhase(), false).contains("requests"));
}

TEST(LoadgenReportTest, EmptyPhaseWritesNullLatencies) {
  PhaseReport p;
  p.request_rate = INFINITY;
  p.records.resize(2);
  p.stats = ComputeStats(p.records, p.slo);
  const Json j = PhaseToJson(p, false);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_TRUE(j["ttft_ms"]["p50"].is_null());
  EXPECT_TRUE(j["prefix_cache"]["hit_ratio"].is_null());
  EXPECT_TRUE(j["server_metrics_delta"].is_null());
  EXPECT_EQ(j["num_not_sent"], 2);
}

TEST(LoadgenReportTest, CsvHeaderAndRows) {
  std::ostringstream out;
  WriteCsv({SamplePhase()}, out);
  const std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  const std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  EXPECT_EQ(header.size(), std::size(kCsvColumns));
  EXPECT_EQ(header.back(), "token_times_ms");
  const std::vector<std::string> row = absl::StrSplit(lines[1], ',');
  ASSERT_EQ(row.size(), header.size());
  EXPECT_EQ(row[1], "2.5");
  EXPECT_EQ(row[7], "OK");
  EXPECT_EQ(row[11], "100.000");  // ttft_ms
  EXPECT_EQ(row.back(), "100.000;200.000;200.000");
  const std::vector<std::string> failed = absl::StrSplit(lines[2], ',');
  EXPECT_EQ(failed[7], "UNAVAILABLE");
  EXPECT_EQ(failed[11], "");
}

TEST(LoadgenReportTest, TextSummaryAndSweepTable) {
  const PhaseReport p = SamplePhase();
  const std::string text = FormatPhase(p);
  EXPECT_NE(text.find("Errors by status:"), std::string::npos);
  EXPECT_NE(text.find("UNAVAILABLE=1"), std::string::npos);
  EXPECT_NE(text.find("Prefix cache hit ratio (server):"), std::string::npos);
  const std::string table = FormatSweepTable({p, p});
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 4);  // header, 2 rows, units
  EXPECT_EQ(RateString(INFINITY), "inf");
  EXPECT_EQ(RateString(0.5), "0.5");
}

TEST(LoadgenMetricsScrapeTest, SumsOverLabelSets) {
  const std::string text =
      "# HELP kvserve_requests_finished_total x\n"
      "# TYPE kvserve_requests_finished_total counter\n"
      "kvserve_requests_finished_total{finished_reason=\"stop\"} 3\n"
      "kvserve_requests_finished_total{finished_reason=\"length\"} 4.5\n"
      "kvserve_server_info{model=\"a b} c\",backend=\"cpu\"} 1\n"
      "kvserve_prefix_cache_hits_total 12 1700000000000\n"
      "garbage line\n";
  const auto sums = ParsePrometheusSums(text);
  EXPECT_EQ(sums.at("kvserve_requests_finished_total"), 7.5);
  EXPECT_EQ(sums.at("kvserve_server_info"), 1);
  EXPECT_EQ(sums.at("kvserve_prefix_cache_hits_total"), 12);
  EXPECT_EQ(sums.count("garbage"), 0u);
}

// A one-shot HTTP server on 127.0.0.1: answers one request with `response`.
class OneShotServer {
 public:
  explicit OneShotServer(std::string response) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 1);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, response = std::move(response)] {
      const int c = accept(fd_, nullptr, nullptr);
      char buf[4096];
      std::string request;
      while (request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0) break;
        request.append(buf, n);
      }
      request_ = request;
      (void)!write(c, response.data(), response.size());
      close(c);
    });
  }
  ~OneShotServer() {
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  const std::string& request() const { return request_; }

 private:
  int fd_;
  int port_;
  std::thread thread_;
  std::string request_;
};

TEST(LoadgenHttpGetTest, ReturnsTheBodyOf200) {
  OneShotServer server("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nfoo_total 3\n");
  auto body = HttpGet("http://127.0.0.1:" + std::to_string(server.port()) + "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "foo_total 3\n");
}

TEST(LoadgenHttpGetTest, Non200IsAnError) {
  OneShotServer server("HTTP/1.0 404 Not Found\r\n\r\nnope");
  auto body = HttpGet("http://127.0.0.1:" + std::to_string(server.port()) + "/metrics");
  EXPECT_FALSE(body.ok());
}

TEST(LoadgenHttpGetTest, BadUrlAndRefusedConnection) {
  EXPECT_FALSE(HttpGet("https://127.0.0.1:1/metrics").ok());
  // Port 1 on loopback: nothing listens (connection refused), bounded anyway.
  EXPECT_FALSE(HttpGet("http://127.0.0.1:1/metrics", 2.0).ok());
}

TEST(LoadgenProgressBarTest, Bar) {
  EXPECT_EQ(ProgressBar::Bar(0, 10, 10), "[>         ]");
  EXPECT_EQ(ProgressBar::Bar(5, 10, 10), "[=====>    ]");
  EXPECT_EQ(ProgressBar::Bar(10, 10, 10), "[==========]");
}

}  // namespace
}  // namespace kvserve::loadgen
