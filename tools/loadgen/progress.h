// A one-line progress bar on stderr, redrawn in place ("\r"). Drawn only
// when enabled (kvserve-loadgen enables it when stderr is a TTY), so logs
// and captured stderr stay clean.
#ifndef KVSERVE_TOOLS_LOADGEN_PROGRESS_H_
#define KVSERVE_TOOLS_LOADGEN_PROGRESS_H_

#include <cstdint>
#include <string>

namespace kvserve::loadgen {

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string label, int64_t total)
      : enabled_(enabled), label_(std::move(label)), total_(total) {}
  ~ProgressBar() { Finish(); }

  // Redraws the line: done/total, in flight, errors, elapsed seconds.
  void Update(int64_t done, int64_t in_flight, int64_t errors, double elapsed_s);
  // Ends the line (once); nothing when disabled or never drawn.
  void Finish();

  // "[=========>          ]" of `width` cells for done/total.
  static std::string Bar(int64_t done, int64_t total, int width);

 private:
  bool enabled_;
  bool drawn_ = false;
  std::string label_;
  int64_t total_;
};

// True when stderr is a terminal.
bool StderrIsTty();

}  // namespace kvserve::loadgen

#endif  // KVSERVE_TOOLS_LOADGEN_PROGRESS_H_
