// Runtime CPU dispatch. The binary is built for baseline x86-64; the kernels
// pick AVX2+FMA(+F16C) or AVX-512F code paths at run time from cpuid, never from
// -march=native. $KVSERVE_CPU_ISA=scalar|avx2|avx512 caps the choice (tests).
#pragma once

namespace kvserve::kernels {

enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The widest ISA both the CPU and $KVSERVE_CPU_ISA allow (computed once), or
// the ISA a live ScopedIsaOverride sets.
CpuIsa ActiveIsa();
// What the CPU supports, ignoring the environment.
CpuIsa DetectedIsa();
const char* IsaName(CpuIsa isa);
// AVX-512 VNNI (vpdpbusd), used by the kAvx512 path of int8 x int8 products
// (gemm_dot.h) when present; without it that path takes the AVX2 body.
bool HasAvx512Vnni();
// AVX512-BF16 (vdpbf16ps), used likewise by bf16 dot products.
bool HasAvx512Bf16();
// AVX512-BW (byte and word lanes), with VNNI for attention over integer KV codes.
bool HasAvx512Bw();
// AVX512-VBMI (vpermi2b: byte tables), with BF16 for attention over fp8 KV rows.
bool HasAvx512Vbmi();

// Tests: while alive, ActiveIsa() returns min(isa, DetectedIsa()), so every
// kernel's ISA paths can be compared in one process. Process-wide; create
// and destroy it on the thread that calls the kernels, with no kernel running.
class ScopedIsaOverride {
 public:
  explicit ScopedIsaOverride(CpuIsa isa);
  ~ScopedIsaOverride();
  ScopedIsaOverride(const ScopedIsaOverride&) = delete;
  ScopedIsaOverride& operator=(const ScopedIsaOverride&) = delete;

 private:
  int previous_;
};

}  // namespace kvserve::kernels
