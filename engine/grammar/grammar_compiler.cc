#include "engine/grammar/grammar_compiler.h"

#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/grammar/grammar_vocab.h"

namespace kvserve::engine::grammar {

GrammarCompileService::GrammarCompileService(GrammarVocab vocab, CompileObserver observer,
                                             size_t max_cached)
    : vocab_(std::move(vocab)), observer_(std::move(observer)), max_cached_(max_cached) {
  KVSERVE_CHECK(vocab_.tokenizer != nullptr && vocab_.vocab_size > 0);
  KVSERVE_CHECK(max_cached_ >= 1);
}

GrammarCompileService::~GrammarCompileService() {
  std::deque<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Job& job : queue_) {  // the thread is gone: no lock needed
    job.result->status_ = absl::CancelledError("the grammar compiler is shutting down");
    job.result->ready_.store(true, std::memory_order_release);
  }
}

std::shared_ptr<const CompiledConstraint> GrammarCompileService::Compile(
    const Constraint& constraint) {
  std::string key = constraint.CacheKey();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = cache_.find(key); it != cache_.end()) {
    num_cache_hits_.fetch_add(1, std::memory_order_relaxed);
    return it->second;
  }
  auto result = std::make_shared<CompiledConstraint>();
  if (stopping_) {
    result->status_ = absl::CancelledError("the grammar compiler is shutting down");
    result->ready_.store(true, std::memory_order_release);
    return result;
  }
  cache_.emplace(key, result);
  cache_order_.push_back(std::move(key));
  EvictLocked();
  queue_.push_back(Job{.constraint = constraint, .result = result});
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  cv_.notify_one();
  return result;
}

void GrammarCompileService::EvictLocked() {
  // Oldest first; an entry still compiling stays (its requests wait on it).
  for (size_t scanned = 0; cache_.size() > max_cached_ && scanned < cache_order_.size();) {
    auto it = cache_.find(cache_order_[scanned]);
    if (it != cache_.end() && it->second->ready()) {
      cache_.erase(it);
      cache_order_.erase(cache_order_.begin() + static_cast<std::ptrdiff_t>(scanned));
    } else {
      ++scanned;
    }
  }
}

void GrammarCompileService::Run() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    CompileOne(job);
  }
}

void GrammarCompileService::CompileOne(Job& job) {
  const auto start = std::chrono::steady_clock::now();
  CompiledConstraint& out = *job.result;
  absl::StatusOr<xgrammar::Grammar> grammar = BuildGrammar(job.constraint);
  if (!grammar.ok()) {
    out.status_ = grammar.status();
  } else {
    // xgrammar reports failures by throwing; none crosses this thread.
    try {
      if (!compiler_) {
        compiler_.emplace(
            MakeTokenizerInfo(*vocab_.tokenizer, vocab_.vocab_size, vocab_.stop_token_ids),
            /*max_threads=*/1, /*cache_enabled=*/false);
      }
      out.grammar_.emplace(compiler_->CompileGrammar(*grammar));
    } catch (const std::exception& e) {
      out.status_ = absl::InvalidArgumentError(absl::StrCat(
          ConstraintKindName(job.constraint.kind), ": xgrammar cannot compile it: ", e.what()));
    }
  }
  out.compile_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  num_compiled_.fetch_add(1, std::memory_order_relaxed);
  const bool ok = out.status_.ok();
  const double seconds = out.compile_seconds_;
  out.ready_.store(true, std::memory_order_release);
  if (observer_) observer_(seconds, ok);
}

}  // namespace kvserve::engine::grammar
