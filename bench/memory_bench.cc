// The memory's read and copy bandwidth now (bench/roofline.h), for scripts
// that compare programs run one after another: on this project's Zen 4 VM
// the memory moves by up to 2x within seconds, so a script samples it just
// before and just after each measurement it divides
// (bench/cpu_vs_llamacpp/run.py). Takes a second or two. Prints one line:
//   read_gbps=R copy_gbps=C threads=T mb=M
//
//   kvserve_memory_bench [--threads=N (default: every core)] [--mb=512]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "bench/roofline.h"

int main(int argc, char** argv) {
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  int mb = 512;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0) {
      threads = std::atoi(arg.c_str() + 10);
    } else if (arg.rfind("--mb=", 0) == 0) {
      mb = std::atoi(arg.c_str() + 5);
    } else {
      std::fprintf(stderr, "unknown flag %s (kvserve_memory_bench [--threads=N] [--mb=N])\n",
                   arg.c_str());
      return 2;
    }
  }
  if (threads < 1 || mb < 64) {
    std::fprintf(stderr, "need --threads >= 1 and --mb >= 64 (far larger than the caches)\n");
    return 2;
  }
  const size_t bytes = static_cast<size_t>(mb) << 20;
  const double read = kvserve::bench::ReadBytesPerSecond(threads, bytes);
  const double copy = kvserve::bench::CopyBytesPerSecond(threads, bytes);
  std::printf("read_gbps=%.2f copy_gbps=%.2f threads=%d mb=%d\n", read / 1e9, copy / 1e9, threads,
              mb);
  return read > 0 ? 0 : 1;  // 0: the read loop misread its buffer
}
