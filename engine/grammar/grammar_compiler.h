// GrammarCompileService: compiles constraints into xgrammar CompiledGrammars
// on a thread of its own, caching them by Constraint::CacheKey().
//
// Compiling a grammar against a vocabulary (xgrammar precomputes which
// tokens each grammar position accepts) takes milliseconds to seconds, so it
// never runs on the engine loop thread: Compile() only looks the key up or
// queues it and returns at once; the scheduler admits a constrained request
// once its CompiledConstraint is ready(), and every other request keeps
// stepping meanwhile. Equal constraints share one compilation, also while it
// is still running.
//
// The vocabulary (xgrammar's TokenizerInfo, grammar_vocab.h) is built on the
// compile thread before its first compilation: a server that never sees a
// constraint never pays for it.
//
// Threads: Compile() and the accessors are safe from any thread; a
// CompiledConstraint is written once by the compile thread, then read-only
// (ready() is the acquire). The destructor joins the thread; compilations
// still queued then finish as Cancelled.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/grammar/constraint.h"
#include "engine/tokenizer/tokenizer.h"
#include "xgrammar/compiler.h"

namespace kvserve::engine::grammar {

class CompiledConstraint {
 public:
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // ready() only. InvalidArgument when xgrammar refused the constraint.
  const absl::Status& status() const { return status_; }
  // ready() and status().ok() only.
  const xgrammar::CompiledGrammar& grammar() const { return *grammar_; }
  double compile_seconds() const { return compile_seconds_; }  // ready() only

 private:
  friend class GrammarCompileService;
  std::atomic<bool> ready_{false};
  absl::Status status_;
  std::optional<xgrammar::CompiledGrammar> grammar_;
  double compile_seconds_ = 0;
};

struct GrammarVocab {
  const Tokenizer* tokenizer = nullptr;  // must outlive the service
  int32_t vocab_size = 0;                // the logits row's length
  std::vector<int32_t> stop_token_ids;   // end a grammar (the model's EOS ids)
};

class GrammarCompileService {
 public:
  // Called on the compile thread after each compilation (seconds it took,
  // whether it succeeded); must be thread-safe and cheap.
  using CompileObserver = std::function<void(double seconds, bool ok)>;

  // max_cached: compiled grammars kept (the oldest finished one is dropped
  // beyond it; requests holding it keep it alive).
  explicit GrammarCompileService(GrammarVocab vocab, CompileObserver observer = nullptr,
                                 size_t max_cached = 256);
  ~GrammarCompileService();
  GrammarCompileService(const GrammarCompileService&) = delete;
  GrammarCompileService& operator=(const GrammarCompileService&) = delete;

  // Never waits for a compilation. The result becomes ready() later.
  std::shared_ptr<const CompiledConstraint> Compile(const Constraint& constraint);

  int32_t vocab_size() const { return vocab_.vocab_size; }
  int64_t num_compiled() const { return num_compiled_.load(std::memory_order_relaxed); }
  int64_t num_cache_hits() const { return num_cache_hits_.load(std::memory_order_relaxed); }

 private:
  struct Job {
    Constraint constraint;
    std::shared_ptr<CompiledConstraint> result;
  };
  void Run();
  void CompileOne(Job& job);
  void EvictLocked();

  const GrammarVocab vocab_;
  const CompileObserver observer_;
  const size_t max_cached_;
  std::optional<xgrammar::GrammarCompiler> compiler_;  // compile thread only

  std::mutex mu_;
  std::condition_variable cv_;
  absl::flat_hash_map<std::string, std::shared_ptr<CompiledConstraint>> cache_;  // guarded by mu_
  std::deque<std::string> cache_order_;                                          // guarded by mu_
  std::deque<Job> queue_;                                                        // guarded by mu_
  bool stopping_ = false;                                                        // guarded by mu_
  std::thread thread_;                                                           // started lazily
  std::atomic<int64_t> num_compiled_{0};
  std::atomic<int64_t> num_cache_hits_{0};
};

}  // namespace kvserve::engine::grammar
