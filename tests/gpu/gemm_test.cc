// GemmCublasLt and GemmInvariant (kernels/cuda/gemm.h) against the CPU
// kernels::Gemm (the oracle) on inputs rounded to the device type, plus the
// batch invariance of GemmInvariant: a row's bytes must not depend on the
// batch it is computed in.
#include "kernels/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvserve::gpu_test {
namespace {

using kernels::cuda::CublasLtContext;
using kernels::cuda::CudaGemmParams;
using kernels::cuda::ElemName;
using kernels::cuda::ElemSize;
using kernels::cuda::GemmCublasLt;
using kernels::cuda::GemmInvariant;

enum class Impl { kCublasLt, kInvariant };

const char* ImplName(Impl impl) { return impl == Impl::kCublasLt ? "CublasLt" : "Invariant"; }

// One cuBLASLt handle and a 32 MiB workspace for the whole binary (never
// freed: the CUDA runtime may be gone by static destruction time).
const CublasLtContext& LtContext() {
  static const CublasLtContext* ctx = [] {
    auto* c = new CublasLtContext();
    if (cublasLtCreate(&c->handle) != CUBLAS_STATUS_SUCCESS) c->handle = nullptr;
    c->workspace_bytes = size_t{32} << 20;
    if (cudaMalloc(&c->workspace, c->workspace_bytes) != cudaSuccess) {
      c->workspace = nullptr;
      c->workspace_bytes = 0;
    }
    return c;
  }();
  return *ctx;
}

// Runs one implementation and waits for it; the error, if any, as a message.
::testing::AssertionResult RunGemm(Impl impl, const CudaGemmParams& p) {
  if (impl == Impl::kCublasLt) {
    const cublasStatus_t st = GemmCublasLt(LtContext(), p, nullptr);
    if (st != CUBLAS_STATUS_SUCCESS) {
      return ::testing::AssertionFailure() << "GemmCublasLt: status " << static_cast<int>(st);
    }
  } else {
    const cudaError_t err = GemmInvariant(p, nullptr);
    if (err != cudaSuccess) {
      return ::testing::AssertionFailure() << "GemmInvariant: " << cudaGetErrorString(err);
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    return ::testing::AssertionFailure() << "after the kernel: " << cudaGetErrorString(err);
  }
  return ::testing::AssertionSuccess();
}

// Rounds every element to what `t` stores (NaN stays NaN).
std::vector<float> Rounded(ElemType t, std::vector<float> v) {
  for (float& f : v) f = RoundTo(t, f);
  return v;
}

// A device copy of `values` stored as `t`, starting `offset` elements into
// its allocation (offset > 0: a pointer that is not 256-byte aligned). The
// elements before it are NaN.
struct DeviceArray {
  DeviceBuffer buf;
  void* ptr = nullptr;
};
DeviceArray UploadAt(ElemType t, const std::vector<float>& values, int64_t offset) {
  std::vector<float> host(static_cast<size_t>(offset), NAN);
  host.insert(host.end(), values.begin(), values.end());
  DeviceArray a;
  a.buf = UploadAs(t, host);
  a.ptr = a.buf.as<char>() + offset * ElemSize(t);
  return a;
}

float Decode(ElemType t, const uint8_t* p) {
  if (t == ElemType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, p, 2);
  return t == ElemType::kBF16 ? Bf16BitsToFloat(b) : HalfBitsToFloat(b);
}

// x [m, k] laid out with row stride ldx; the padding columns are NaN (a
// kernel reading them poisons its result).
std::vector<float> WithStride(const std::vector<float>& dense, int64_t rows, int64_t cols,
                              int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * ld), NAN);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(dense.begin() + r * cols, cols, out.begin() + r * ld);
  }
  return out;
}

// The oracle: kernels::Gemm on the (already rounded) fp32 values.
std::vector<float> CpuGemm(const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>* bias, int64_t m, int64_t n, int64_t k) {
  const kernels::PackedMatrix packed = kernels::PackWeights(w.data(), n, k);
  std::vector<float> y(static_cast<size_t>(m * n));
  kernels::GemmParams p;
  p.x = x.data();
  p.ldx = k;
  p.w = &packed;
  p.bias = bias != nullptr ? bias->data() : nullptr;
  p.y = y.data();
  p.ldy = n;
  p.m = m;
  kernels::Gemm(p, &kernels::ThreadPool::Default());
  return y;
}

// One problem's rounded host data and its CPU results.
struct Problem {
  ElemType in_type;
  int64_t m, n, k;
  std::vector<float> x, w, bias;  // dense, rounded to in_type
  std::vector<float> ref, ref_bias;

  Problem(ElemType t, int64_t m_, int64_t n_, int64_t k_, uint32_t seed)
      : in_type(t), m(m_), n(n_), k(k_) {
    std::mt19937 rng(seed);
    x = Rounded(t, RandomVector(static_cast<size_t>(m * k), rng));
    w = Rounded(t, RandomVector(static_cast<size_t>(n * k), rng));
    bias = Rounded(t, RandomVector(static_cast<size_t>(n), rng));
    ref = CpuGemm(x, w, nullptr, m, n, k);
    ref_bias = CpuGemm(x, w, &bias, m, n, k);
  }
};

// Layout of one run: strided runs use ldx > k, ldy > n and pointers that
// are not 256-byte aligned (bias and y off by one element).
struct Layout {
  int64_t ldx, ldy;
  int64_t x_offset, y_offset, bias_offset;
};
Layout MakeLayout(const Problem& pr, bool strided) {
  if (!strided) return {pr.k, pr.n, 0, 0, 0};
  return {pr.k + 24, pr.n + 5, 8, 1, 1};
}

// Runs `impl` on `pr` and checks y against the oracle, and that nothing
// outside y's m x n elements was written.
void CheckAgainstCpu(Impl impl, const Problem& pr, ElemType out_type, bool with_bias,
                     bool strided) {
  SCOPED_TRACE(::testing::Message()
               << ImplName(impl) << " in=" << ElemName(pr.in_type) << " out=" << ElemName(out_type)
               << " m=" << pr.m << " n=" << pr.n << " k=" << pr.k << " bias=" << with_bias
               << " strided=" << strided);
  const Layout l = MakeLayout(pr, strided);
  const DeviceArray x = UploadAt(pr.in_type, WithStride(pr.x, pr.m, pr.k, l.ldx), l.x_offset);
  const DeviceArray w = UploadAt(pr.in_type, pr.w, 0);
  const DeviceArray bias = UploadAt(pr.in_type, pr.bias, l.bias_offset);
  const size_t out_size = ElemSize(out_type);
  const size_t y_elems = static_cast<size_t>(l.y_offset + pr.m * l.ldy);
  DeviceBuffer y(y_elems * out_size);
  ASSERT_NE(x.buf.get(), nullptr);
  ASSERT_NE(y.get(), nullptr);
  PoisonNaN(y);

  CudaGemmParams p;
  p.in_type = pr.in_type;
  p.out_type = out_type;
  p.x = x.ptr;
  p.ldx = l.ldx;
  p.w = w.ptr;
  p.bias = with_bias ? bias.ptr : nullptr;
  p.y = y.as<char>() + l.y_offset * out_size;
  p.ldy = l.ldy;
  p.m = pr.m;
  p.n = pr.n;
  p.k = pr.k;
  ASSERT_TRUE(RunGemm(impl, p));

  const std::vector<uint8_t> raw = Download<uint8_t>(y, y_elems * out_size);
  const std::vector<float>& ref = with_bias ? pr.ref_bias : pr.ref;
  std::vector<float> out(static_cast<size_t>(pr.m * pr.n));
  int64_t poison_broken = 0;
  for (size_t e = 0; e < y_elems; ++e) {
    const int64_t rel = static_cast<int64_t>(e) - l.y_offset;
    const int64_t r = rel >= 0 ? rel / l.ldy : -1;
    const int64_t c = rel >= 0 ? rel % l.ldy : -1;
    const uint8_t* bytes = raw.data() + e * out_size;
    if (r >= 0 && c < pr.n) {
      out[r * pr.n + c] = Decode(out_type, bytes);
    } else if (std::any_of(bytes, bytes + out_size, [](uint8_t b) { return b != 0xFF; })) {
      ++poison_broken;
    }
  }
  EXPECT_EQ(poison_broken, 0) << "elements outside y were written";

  const double tol = Tolerance(pr.in_type);
  EXPECT_LE(RelativeError(out, ref), tol);
  // Per element too (a few wrong elements hide in a norm): |out - ref| <=
  // tol * (|ref| + rms(ref)).
  double sum_sq = 0;
  for (float v : ref) sum_sq += double{v} * v;
  const double rms = std::sqrt(sum_sq / static_cast<double>(ref.size()));
  int reported = 0;
  for (size_t i = 0; i < ref.size() && reported < 5; ++i) {
    const double bound = tol * (std::fabs(ref[i]) + rms);
    if (!(std::fabs(double{out[i]} - ref[i]) <= bound)) {
      ADD_FAILURE() << "y[" << i / pr.n << "][" << i % pr.n << "] = " << out[i] << ", expected "
                    << ref[i] << " (bound " << bound << ")";
      ++reported;
    }
  }
}

// ---------------------------------------------------------------------------
// Accuracy against the CPU oracle, every shape x bias x layout.

using TypeCase = std::tuple<Impl, ElemType, ElemType>;  // impl, in, out

class GemmAccuracyTest : public ::testing::TestWithParam<TypeCase> {};

TEST_P(GemmAccuracyTest, MatchesCpuOracle) {
  const auto [impl, in_type, out_type] = GetParam();
  uint32_t seed = 1000 + static_cast<uint32_t>(in_type) * 100;
  for (int64_t m : {1, 17, 64, 300}) {
    for (int64_t n : {64, 258, 1000}) {
      for (int64_t k : {64, 576, 4096}) {
        const Problem pr(in_type, m, n, k, seed++);
        for (bool with_bias : {false, true}) {
          for (bool strided : {false, true}) {
            CheckAgainstCpu(impl, pr, out_type, with_bias, strided);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
  // A grid larger than the GPU (180 CTAs of GemmInvariant's 128 x 128 tile):
  // its other pipeline depth.
  const Problem pr(in_type, 300, 7680, 576, seed);
  for (bool with_bias : {false, true}) {
    CheckAgainstCpu(impl, pr, out_type, with_bias, /*strided=*/with_bias);
  }
}

std::string TypeCaseName(const ::testing::TestParamInfo<TypeCase>& info) {
  const auto [impl, in_type, out_type] = info.param;
  return std::string(ImplName(impl)) + "_" + ElemName(in_type) + "_to_" + ElemName(out_type);
}

const ElemType kF32 = ElemType::kF32;
const ElemType kF16 = ElemType::kF16;
const ElemType kBF16 = ElemType::kBF16;

INSTANTIATE_TEST_SUITE_P(AllTypes, GemmAccuracyTest,
                         ::testing::Values(TypeCase{Impl::kCublasLt, kF32, kF32},
                                           TypeCase{Impl::kCublasLt, kF16, kF16},
                                           TypeCase{Impl::kCublasLt, kF16, kF32},
                                           TypeCase{Impl::kCublasLt, kBF16, kBF16},
                                           TypeCase{Impl::kCublasLt, kBF16, kF32},
                                           TypeCase{Impl::kInvariant, kF32, kF32},
                                           TypeCase{Impl::kInvariant, kF16, kF16},
                                           TypeCase{Impl::kInvariant, kF16, kF32},
                                           TypeCase{Impl::kInvariant, kBF16, kBF16},
                                           TypeCase{Impl::kInvariant, kBF16, kF32}),
                         TypeCaseName);

// ---------------------------------------------------------------------------
// Batch invariance of GemmInvariant.

// The raw bytes of y's rows for x's rows (m rows, dense ldx = k, ldy = n).
std::vector<uint8_t> RunInvariantBytes(ElemType in_type, ElemType out_type,
                                       const std::vector<float>& x, const DeviceArray& w,
                                       const DeviceArray& bias, int64_t m, int64_t n, int64_t k) {
  const DeviceArray xd = UploadAt(in_type, x, 0);
  DeviceBuffer y(static_cast<size_t>(m * n) * ElemSize(out_type));
  PoisonNaN(y);
  CudaGemmParams p;
  p.in_type = in_type;
  p.out_type = out_type;
  p.x = xd.ptr;
  p.ldx = k;
  p.w = w.ptr;
  p.bias = bias.ptr;
  p.y = y.get();
  p.ldy = n;
  p.m = m;
  p.n = n;
  p.k = k;
  EXPECT_TRUE(RunGemm(Impl::kInvariant, p));
  return Download<uint8_t>(y, y.bytes());
}

class GemmInvarianceTest : public ::testing::TestWithParam<std::tuple<ElemType, ElemType>> {};

TEST_P(GemmInvarianceTest, RowBytesDoNotDependOnTheBatch) {
  const auto [in_type, out_type] = GetParam();
  const size_t os = ElemSize(out_type);
  // n = 7680: the 300-row batch is a grid of 180 CTAs, its sub-batches of
  // <= 120 (GemmInvariant's two pipeline depths must agree bit for bit).
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{258, 576}, {1000, 4096}, {7680, 576}}) {
    SCOPED_TRACE(::testing::Message() << "in=" << ElemName(in_type) << " out=" << ElemName(out_type)
                                      << " n=" << n << " k=" << k);
    constexpr int64_t kBig = 300;
    std::mt19937 rng(77 + static_cast<uint32_t>(k));
    const std::vector<float> x = Rounded(in_type, RandomVector(kBig * k, rng));
    const DeviceArray w = UploadAt(in_type, RandomVector(static_cast<size_t>(n * k), rng), 0);
    const DeviceArray bias = UploadAt(in_type, RandomVector(static_cast<size_t>(n), rng), 0);
    const std::vector<uint8_t> big = RunInvariantBytes(in_type, out_type, x, w, bias, kBig, n, k);
    // Run to run: the same batch gives the same bytes.
    ASSERT_EQ(big, RunInvariantBytes(in_type, out_type, x, w, bias, kBig, n, k));
    const size_t row_bytes = static_cast<size_t>(n) * os;

    for (int64_t r : {0, 5, 16, 63, 64, 127, 128, 200, 255, 299}) {
      const uint8_t* expected = big.data() + r * row_bytes;
      const std::vector<float> row(x.begin() + r * k, x.begin() + (r + 1) * k);
      // Sub-batches of 1, 17 and 129 rows (other rows: fresh random data),
      // the row at a position that differs from r modulo 16 and 128.
      for (int64_t m : {1, 17, 129}) {
        const int64_t pos = (r * 7 + 3) % m;
        std::vector<float> sub = Rounded(in_type, RandomVector(static_cast<size_t>(m * k), rng));
        std::copy(row.begin(), row.end(), sub.begin() + pos * k);
        const std::vector<uint8_t> y = RunInvariantBytes(in_type, out_type, sub, w, bias, m, n, k);
        EXPECT_EQ(std::memcmp(y.data() + pos * row_bytes, expected, row_bytes), 0)
            << "row " << r << " of 300 differs when computed at row " << pos << " of " << m;
      }
    }
    // A window of the big batch (x pointer offset into it): every row equal.
    const DeviceArray xd = UploadAt(in_type, x, 0);
    for (int64_t first : {3, 120, 283}) {
      const int64_t m = 17;
      DeviceBuffer y(static_cast<size_t>(m) * row_bytes);
      PoisonNaN(y);
      CudaGemmParams p;
      p.in_type = in_type;
      p.out_type = out_type;
      p.x = xd.buf.as<char>() + first * k * ElemSize(in_type);
      p.ldx = k;
      p.w = w.ptr;
      p.bias = bias.ptr;
      p.y = y.get();
      p.ldy = n;
      p.m = m;
      p.n = n;
      p.k = k;
      ASSERT_TRUE(RunGemm(Impl::kInvariant, p));
      const std::vector<uint8_t> got = Download<uint8_t>(y, y.bytes());
      EXPECT_EQ(std::memcmp(got.data(), big.data() + first * row_bytes, got.size()), 0)
          << "rows " << first << ".." << first + m - 1 << " as a batch of their own";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GemmInvarianceTest,
                         ::testing::Values(std::tuple{kF32, kF32}, std::tuple{kF16, kF16},
                                           std::tuple{kF16, kF32}, std::tuple{kBF16, kBF16},
                                           std::tuple{kBF16, kF32}),
                         [](const auto& info) {
                           return std::string(ElemName(std::get<0>(info.param))) + "_to_" +
                                  ElemName(std::get<1>(info.param));
                         });

// The fp32 path reduces in the CPU kernel's order (fma over k increasing,
// then + bias), so it matches the oracle bit for bit.
TEST(GemmInvariantF32, BitIdenticalToCpu) {
  for (const auto& [m, n, k] :
       {std::tuple<int64_t, int64_t, int64_t>{17, 258, 576}, {300, 1000, 4096}, {1, 64, 64}}) {
    SCOPED_TRACE(::testing::Message() << "m=" << m << " n=" << n << " k=" << k);
    const Problem pr(kF32, m, n, k, 4242);
    const DeviceArray x = UploadAt(kF32, pr.x, 0);
    const DeviceArray w = UploadAt(kF32, pr.w, 0);
    const DeviceArray bias = UploadAt(kF32, pr.bias, 0);
    DeviceBuffer y(static_cast<size_t>(m * n) * 4);
    PoisonNaN(y);
    CudaGemmParams p;
    p.in_type = kF32;
    p.out_type = kF32;
    p.x = x.ptr;
    p.ldx = k;
    p.w = w.ptr;
    p.bias = bias.ptr;
    p.y = y.get();
    p.ldy = n;
    p.m = m;
    p.n = n;
    p.k = k;
    ASSERT_TRUE(RunGemm(Impl::kInvariant, p));
    const std::vector<float> got = Download<float>(y, static_cast<size_t>(m * n));
    EXPECT_EQ(std::memcmp(got.data(), pr.ref_bias.data(), got.size() * 4), 0);
  }
}

// ---------------------------------------------------------------------------
// cuBLASLt plan cache: one shape, several calls with other operand pointers
// (the cached plan must take each call's bias and y).
TEST(GemmCublasLtCache, ReusedPlanTakesEachCallsPointers) {
  const Problem pr(kBF16, 17, 258, 576, 99);
  const DeviceArray x = UploadAt(kBF16, pr.x, 0);
  const DeviceArray w = UploadAt(kBF16, pr.w, 0);
  std::mt19937 rng(5);
  for (int call = 0; call < 3; ++call) {
    // A different bias each call (the first is the problem's own).
    std::vector<float> bias = call == 0 ? pr.bias : Rounded(kBF16, RandomVector(258, rng));
    const DeviceArray bias_d = UploadAt(kBF16, bias, 0);
    std::vector<float> ref = pr.ref;
    for (int64_t r = 0; r < pr.m; ++r) {
      for (int64_t c = 0; c < pr.n; ++c) ref[r * pr.n + c] += bias[c];
    }
    DeviceBuffer y(static_cast<size_t>(pr.m * pr.n) * 2);
    PoisonNaN(y);
    CudaGemmParams p;
    p.in_type = kBF16;
    p.out_type = kBF16;
    p.x = x.ptr;
    p.ldx = pr.k;
    p.w = w.ptr;
    p.bias = bias_d.ptr;
    p.y = y.get();
    p.ldy = pr.n;
    p.m = pr.m;
    p.n = pr.n;
    p.k = pr.k;
    ASSERT_TRUE(RunGemm(Impl::kCublasLt, p));
    EXPECT_LE(RelativeError(DownloadAs(kBF16, y.get(), ref.size()), ref), Tolerance(kBF16))
        << "call " << call;
  }
}

// ---------------------------------------------------------------------------
// Invalid parameters are refused before anything is launched; m = 0 is an
// empty batch (success, nothing written).

class GemmInvalidTest : public ::testing::TestWithParam<Impl> {};

TEST_P(GemmInvalidTest, RefusesBadParamsAndWritesNothing) {
  const Impl impl = GetParam();
  const int64_t m = 4, n = 64, k = 64;
  DeviceBuffer x(static_cast<size_t>(m * k + 64) * 2);
  DeviceBuffer w(static_cast<size_t>(n * k) * 2);
  DeviceBuffer y(static_cast<size_t>(m * n) * 4);
  ASSERT_NE(y.get(), nullptr);
  PoisonNaN(y);
  CudaGemmParams good;
  good.in_type = kBF16;
  good.out_type = kBF16;
  good.x = x.get();
  good.ldx = k;
  good.w = w.get();
  good.y = y.get();
  good.ldy = n;
  good.m = m;
  good.n = n;
  good.k = k;

  std::vector<std::pair<std::string, CudaGemmParams>> bad;
  auto add = [&](const char* what, auto mutate) {
    CudaGemmParams p = good;
    mutate(p);
    bad.emplace_back(what, p);
  };
  add("null x", [](CudaGemmParams& p) { p.x = nullptr; });
  add("null w", [](CudaGemmParams& p) { p.w = nullptr; });
  add("null y", [](CudaGemmParams& p) { p.y = nullptr; });
  add("m < 0", [](CudaGemmParams& p) { p.m = -1; });
  add("n = 0", [](CudaGemmParams& p) { p.n = 0; });
  add("k = 0", [](CudaGemmParams& p) { p.k = 0; });
  add("ldx < k", [](CudaGemmParams& p) { p.ldx = p.k - 8; });
  add("ldy < n", [](CudaGemmParams& p) { p.ldy = p.n - 1; });
  add("f32 in, bf16 out", [](CudaGemmParams& p) { p.in_type = kF32; });
  add("bf16 in, f16 out", [](CudaGemmParams& p) { p.out_type = kF16; });
  if (impl == Impl::kInvariant) {
    add("k % 8 != 0", [](CudaGemmParams& p) { p.k = 60; });
    add("ldx % 8 != 0", [](CudaGemmParams& p) { p.ldx = 68; });
    add("x not 16-byte aligned", [&](CudaGemmParams& p) { p.x = x.as<char>() + 2; });
  }
  for (const auto& [what, p] : bad) {
    if (impl == Impl::kCublasLt) {
      EXPECT_NE(GemmCublasLt(LtContext(), p, nullptr), CUBLAS_STATUS_SUCCESS) << what;
    } else {
      EXPECT_EQ(GemmInvariant(p, nullptr), cudaErrorInvalidValue) << what;
    }
  }
  if (impl == Impl::kCublasLt) {
    CublasLtContext no_handle = LtContext();
    no_handle.handle = nullptr;
    EXPECT_NE(GemmCublasLt(no_handle, good, nullptr), CUBLAS_STATUS_SUCCESS) << "null handle";
  }
  CudaGemmParams empty = good;
  empty.m = 0;
  EXPECT_TRUE(RunGemm(impl, empty)) << "m = 0";
  KVSERVE_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> bytes = Download<uint8_t>(y, y.bytes());
  EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0xFF; }))
      << "a refused call wrote to y";
}

INSTANTIATE_TEST_SUITE_P(BothImpls, GemmInvalidTest,
                         ::testing::Values(Impl::kCublasLt, Impl::kInvariant),
                         [](const auto& info) { return std::string(ImplName(info.param)); });

}  // namespace
}  // namespace kvserve::gpu_test
