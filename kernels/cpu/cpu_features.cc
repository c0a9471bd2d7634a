#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kvserve::kernels {
namespace {

// -1: no ScopedIsaOverride alive.
std::atomic<int> g_override{-1};

CpuIsa Min(CpuIsa a, CpuIsa b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

// F16C (vcvtph2ps: the fp16 weight path, gemm_avx2.cc): cpuid leaf 1, ecx
// bit 29. Every AVX2 CPU has it; checked rather than assumed (compilers'
// __builtin_cpu_supports lacks "f16c").
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}

CpuIsa Detect() {
  __builtin_cpu_init();
  // libgcc also checks that the OS saves the wider register state (XCR0).
  if (!HasF16c()) return CpuIsa::kScalar;
  if (__builtin_cpu_supports("avx512f")) return CpuIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

// $KVSERVE_CPU_ISA, or kAvx512 (no cap) when unset or unrecognised.
CpuIsa EnvCap() {
  const char* env = std::getenv("KVSERVE_CPU_ISA");
  if (env == nullptr) return CpuIsa::kAvx512;
  if (std::strcmp(env, "scalar") == 0) return CpuIsa::kScalar;
  if (std::strcmp(env, "avx2") == 0) return CpuIsa::kAvx2;
  return CpuIsa::kAvx512;
}

}  // namespace

CpuIsa DetectedIsa() {
  static const CpuIsa isa = Detect();
  return isa;
}

CpuIsa ActiveIsa() {
  const int forced = g_override.load(std::memory_order_relaxed);
  if (forced >= 0) return Min(static_cast<CpuIsa>(forced), DetectedIsa());
  static const CpuIsa isa = Min(EnvCap(), DetectedIsa());
  return isa;
}

bool HasAvx512Vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return DetectedIsa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512vnni");
  }();
  return has;
}

bool HasAvx512Bw() {
  static const bool has = [] {
    __builtin_cpu_init();
    return DetectedIsa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bw");
  }();
  return has;
}

bool HasAvx512Vbmi() {
  static const bool has = [] {
    __builtin_cpu_init();
    return DetectedIsa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512vbmi");
  }();
  return has;
}

bool HasAvx512Bf16() {
  static const bool has = [] {
    __builtin_cpu_init();
    return DetectedIsa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
}

const char* IsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

ScopedIsaOverride::ScopedIsaOverride(CpuIsa isa)
    : previous_(g_override.exchange(static_cast<int>(isa), std::memory_order_relaxed)) {}

ScopedIsaOverride::~ScopedIsaOverride() { g_override.store(previous_, std::memory_order_relaxed); }

}  // namespace kvserve::kernels
