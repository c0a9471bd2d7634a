// Runs one load phase against a kvserve server: many concurrent Generate
// streams, each driven by a gRPC callback reactor (ClientReadReactor) on
// gRPC's own threads, started by one dispatcher (the calling thread) that
// follows the arrival schedule and the concurrency cap.
//
// Threads:
//   dispatcher (RunPhase's caller)  starts calls, redraws the progress bar,
//                                   cancels everything at the duration limit
//   gRPC callback threads           OnReadDone / OnDone of each call; a call
//                                   writes only its own record, and hands it
//                                   to the phase under the phase mutex in OnDone
// Termination: every started call ends in OnDone (gRPC guarantees it after
// TryCancel, a deadline or a broken connection), so the phase ends when every
// call is done; a call still not done `kCancelGraceS` after the duration
// limit is left behind (leaked, recorded as CANCELLED) rather than waited for.
#ifndef KVSERVE_TOOLS_LOADGEN_RUNNER_H_
#define KVSERVE_TOOLS_LOADGEN_RUNNER_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/v1/kvserve.grpc.pb.h"
#include "tools/loadgen/stats.h"
#include "tools/loadgen/workload.h"

namespace kvserve::loadgen {

struct PhaseOptions {
  std::string label;             // progress bar prefix, e.g. "rate=4"
  int64_t concurrency = 0;       // at most this many calls in flight; 0: no cap
  double max_duration_s = 0;     // 0: no limit; then calls in flight are cancelled
  double request_timeout_s = 0;  // per-call gRPC deadline; 0: none
  float temperature = 0;
  bool ignore_eos = true;
  std::string request_id_prefix;  // request_id = prefix + index
  bool progress = false;          // draw a progress bar on stderr
};

class Runner {
 public:
  // `num_channels` channels to `address` (plain TCP), each its own HTTP/2
  // connection; call i uses channel i % num_channels.
  Runner(const std::string& address, int num_channels);

  // Fetches the model's facts. Bounded by `timeout_s`.
  grpc::Status GetModelInfo(double timeout_s, kvserve::v1::GetModelInfoResponse* info);

  // Sends specs[i] at arrival_s[i] seconds after the phase start (never before
  // the previous one; arrival_s non-decreasing, same size as specs). Returns
  // one record per spec, in spec order; times are seconds from the phase start.
  std::vector<RequestRecord> RunPhase(const std::vector<RequestSpec>& specs,
                                      const std::vector<double>& arrival_s,
                                      const PhaseOptions& options);

  static constexpr double kCancelGraceS = 30.0;

 private:
  std::vector<std::unique_ptr<kvserve::v1::KvServe::Stub>> stubs_;
};

// The request loadgen sends for `spec`.
kvserve::v1::GenerateRequest BuildRequest(const RequestSpec& spec, const PhaseOptions& options);

}  // namespace kvserve::loadgen

#endif  // KVSERVE_TOOLS_LOADGEN_RUNNER_H_
