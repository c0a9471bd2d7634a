#include "server/server_config.h"

#include <gtest/gtest.h>

#include "server/health_monitor.h"
#include "server/status_map.h"

namespace kvserve::server {
namespace {

std::string Error(const ServerConfig& c) {
  const absl::Status s = ValidateConfig(c);
  return s.ok() ? "" : std::string(s.message());
}

TEST(ServerConfig, DefaultsAreValid) { EXPECT_EQ(Error(ServerConfig{}), ""); }

TEST(ServerConfig, BadValuesNameTheFlag) {
  ServerConfig c;
  c.block_size = 0;
  EXPECT_EQ(Error(c), "--block_size: must be in [1, 256], got 0");
  c = ServerConfig{};
  c.port = 70000;
  EXPECT_NE(Error(c).find("--port:"), std::string::npos);
  c = ServerConfig{};
  c.backend = "tpu";
  EXPECT_NE(Error(c).find("--backend: must be auto, cpu or cuda"), std::string::npos);
  c = ServerConfig{};
  c.tls_cert_file = "cert.pem";
  EXPECT_NE(Error(c).find("--tls_key_file"), std::string::npos);
  c = ServerConfig{};
  c.tls_client_ca_file = "ca.pem";
  EXPECT_NE(Error(c).find("--tls_client_ca_file"), std::string::npos);
  c = ServerConfig{};
  c.max_num_seqs = 0;
  EXPECT_NE(Error(c).find("--max_num_seqs"), std::string::npos);
  c = ServerConfig{};
  c.drain_timeout_s = -1;
  EXPECT_NE(Error(c).find("--drain_timeout_s"), std::string::npos);
}

TEST(ServerConfig, ServedModelNames) {
  ServerConfig c;
  c.model = "/models/llama";
  EXPECT_EQ(ServedNames(c), std::vector<std::string>{"/models/llama"});  // default: --model
  c.served_model_names = {"llama", "llama-3"};
  EXPECT_EQ(Error(c), "");
  EXPECT_EQ(ServedNames(c), (std::vector<std::string>{"llama", "llama-3"}));
  c.served_model_names = {"llama", ""};
  EXPECT_NE(Error(c).find("--served_model_name"), std::string::npos) << Error(c);
  c.served_model_names = {"llama", "x", "llama"};
  EXPECT_NE(Error(c).find("\"llama\" given twice"), std::string::npos) << Error(c);
}

TEST(ServerConfig, HttpPort) {
  ServerConfig c;
  for (int port : {-1, 0, 8000}) {
    c.http_port = port;
    EXPECT_EQ(Error(c), "") << port;
  }
  c.http_port = -2;
  EXPECT_EQ(Error(c), "--http_port: must be in [-1, 65535], got -2");
  c = ServerConfig{};
  c.http_io_threads = 0;
  EXPECT_NE(Error(c).find("--http_io_threads"), std::string::npos);
  // The HTTP port serves TLS (and mTLS) with the gRPC port's flags.
  c = ServerConfig{};
  c.http_port = 8000;
  c.tls_cert_file = "cert.pem";
  c.tls_key_file = "key.pem";
  EXPECT_EQ(Error(c), "");
  c.tls_client_ca_file = "ca.pem";
  EXPECT_EQ(Error(c), "");
  c.tls_key_file = "";
  EXPECT_NE(Error(c).find("--tls_key_file"), std::string::npos);
}

TEST(ServerConfig, KvCacheDtype) {
  ServerConfig c;
  for (const char* ok : {"auto", "bfloat16", "float16", "fp8_e4m3", "int8", "int4", "fp4_e2m1"}) {
    c.kv_cache_dtype = ok;
    EXPECT_EQ(Error(c), "") << ok;
    c.backend = "cpu";
    EXPECT_EQ(Error(c), "") << ok;
    c.backend = "auto";
  }
  c.kv_cache_dtype = "fp8";
  EXPECT_EQ(Error(c),
            "--kv_cache_dtype: must be one of auto, bfloat16, float16, fp8_e4m3, int8, int4, "
            "fp4_e2m1, got \"fp8\"");
  // The CUDA backend has every format too (kernels/cuda/kv_codec.cuh).
  c.backend = "cuda";
  for (const char* ok : {"auto", "bfloat16", "float16", "fp8_e4m3", "int8", "int4", "fp4_e2m1"}) {
    c.kv_cache_dtype = ok;
    EXPECT_EQ(Error(c), "") << ok;
  }
  c.kv_cache_dtype = "int3";
  EXPECT_NE(Error(c).find("--kv_cache_dtype: must be one of"), std::string::npos) << Error(c);
}

TEST(ServerConfig, Quantization) {
  ServerConfig c;
  for (const char* ok : {"none", "int8", "w8a8"}) {
    c.quantization = ok;
    c.backend = "cpu";
    EXPECT_EQ(Error(c), "") << ok;
  }
  c.quantization = "int4";
  EXPECT_EQ(Error(c), "--quantization: must be none, int8 or w8a8, got \"int4\"");
  c.quantization = "int8";
  c.backend = "cuda";
  EXPECT_NE(Error(c).find("--quantization: the cuda backend has no quantized weights"),
            std::string::npos)
      << Error(c);
  c.quantization = "none";
  EXPECT_EQ(Error(c), "");
}

TEST(ServerConfig, MatmulPrecision) {
  ServerConfig c;
  c.backend = "cpu";
  for (const char* ok : {"float32", "bfloat16"}) {
    c.matmul_precision = ok;
    EXPECT_EQ(Error(c), "") << ok;
  }
  c.matmul_precision = "fp8";
  EXPECT_EQ(Error(c), "--matmul_precision: must be float32 or bfloat16, got \"fp8\"");
  c.matmul_precision = "bfloat16";
  c.quantization = "int8";
  EXPECT_NE(Error(c).find("--matmul_precision: bfloat16 takes bf16 weights"), std::string::npos)
      << Error(c);
  c.quantization = "none";
  c.backend = "cuda";
  EXPECT_NE(Error(c).find("--matmul_precision: the cuda backend"), std::string::npos) << Error(c);
}

TEST(HealthMonitor, StallOnlyWhileBusy) {
  const TimePoint t0{std::chrono::seconds(1000)};
  const auto stall = std::chrono::seconds(5);
  // Idle: healthy however old the last step is.
  EXPECT_TRUE(EngineLooksAlive(std::nullopt, t0, t0 + std::chrono::hours(1), stall));
  // Just became busy after a long idle period: not stalled yet.
  EXPECT_TRUE(
      EngineLooksAlive(t0 + std::chrono::seconds(100), t0, t0 + std::chrono::seconds(101), stall));
  // Busy, stepping: healthy.
  EXPECT_TRUE(
      EngineLooksAlive(t0, t0 + std::chrono::seconds(8), t0 + std::chrono::seconds(10), stall));
  // Busy, no step for longer than the timeout: stalled.
  EXPECT_FALSE(
      EngineLooksAlive(t0, t0 + std::chrono::seconds(1), t0 + std::chrono::seconds(7), stall));
}

TEST(StatusMap, CodesAndMessagesCarryOver) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const grpc::Status s = ToGrpcStatus(absl::ResourceExhaustedError("queue full"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(), "queue full");
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("x")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpcStatus(absl::DeadlineExceededError("x")).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(ToGrpcStatus(absl::UnauthenticatedError("x")).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace kvserve::server
