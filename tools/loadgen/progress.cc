#include "tools/loadgen/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace kvserve::loadgen {

std::string ProgressBar::Bar(int64_t done, int64_t total, int width) {
  const int64_t filled =
      total > 0 ? std::clamp<int64_t>(done * width / total, 0, width) : static_cast<int64_t>(width);
  std::string bar = "[";
  for (int i = 0; i < width; ++i) {
    bar += i < filled ? '=' : (i == filled ? '>' : ' ');
  }
  return bar + "]";
}

void ProgressBar::Update(int64_t done, int64_t in_flight, int64_t errors, double elapsed_s) {
  if (!enabled_) return;
  drawn_ = true;
  // \33[K clears the rest of the line (a shorter redraw leaves no residue).
  std::fprintf(stderr, "\r%s %s %lld/%lld done, %lld in flight, %lld errors, %.1fs\33[K",
               label_.c_str(), Bar(done, total_, 30).c_str(), static_cast<long long>(done),
               static_cast<long long>(total_), static_cast<long long>(in_flight),
               static_cast<long long>(errors), elapsed_s);
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (!enabled_ || !drawn_) return;
  std::fputc('\n', stderr);
  std::fflush(stderr);
  drawn_ = false;
}

bool StderrIsTty() { return isatty(STDERR_FILENO) == 1; }

}  // namespace kvserve::loadgen
