// Row-wise CUDA kernels (kernels/cuda/elementwise.h) against the CPU kernels
// (kernels/cpu/elementwise.h) run on the same, already rounded, inputs; the
// conversions, Fill and FillHashUniform bit for bit against host references
// (FillHashUniform also against the builtin checkpoint the engine generates).
#include "kernels/cuda/elementwise.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "engine/builtin_models.h"
#include "gtest/gtest.h"
#include "kernels/cpu/elementwise.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvserve::gpu_test {
namespace {

namespace cuda = kernels::cuda;

constexpr ElemType kTypes[] = {ElemType::kF32, ElemType::kF16, ElemType::kBF16};
constexpr float kEps = 1e-5f;

std::vector<float> Rounded(ElemType t, std::vector<float> v) {
  for (float& x : v) x = RoundTo(t, x);
  return v;
}

std::string Name(ElemType t) { return cuda::ElemName(t); }

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// ---- RmsNorm / AddRmsNorm ------------------------------------------------------

TEST(GpuElementwise, RmsNormMatchesCpu) {
  std::mt19937 rng(1);
  const int64_t rows = 17;
  for (int64_t dim : {64, 100, 576, 4096, 4104}) {
    for (ElemType wt : kTypes) {
      for (ElemType yt : kTypes) {
        SCOPED_TRACE("dim " + std::to_string(dim) + " weight " + Name(wt) + " y " + Name(yt));
        const std::vector<float> x = RandomVector(rows * dim, rng, -2.0f, 2.0f);
        const std::vector<float> w = Rounded(wt, RandomVector(dim, rng, 0.5f, 1.5f));
        std::vector<float> ref(rows * dim);
        kernels::RmsNorm(x.data(), w.data(), ref.data(), rows, dim, kEps, nullptr);
        DeviceBuffer dx = UploadAs(ElemType::kF32, x);
        DeviceBuffer dw = UploadAs(wt, w);
        DeviceBuffer dy(rows * dim * cuda::ElemSize(yt));
        PoisonNaN(dy);
        KVSERVE_CUDA_OK(
            cuda::RmsNorm(dx.as<float>(), dw.get(), wt, dy.get(), yt, rows, dim, kEps, nullptr));
        KVSERVE_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<float> y = DownloadAs(yt, dy.get(), rows * dim);
        EXPECT_LE(RelativeError(y, Rounded(yt, ref)), Tolerance(yt));

        // Batch invariance: row 5 alone gives the same bits.
        DeviceBuffer dx1 =
            UploadAs(ElemType::kF32, std::vector<float>(x.begin() + 5 * dim, x.begin() + 6 * dim));
        DeviceBuffer dy1(dim * cuda::ElemSize(yt));
        PoisonNaN(dy1);
        KVSERVE_CUDA_OK(
            cuda::RmsNorm(dx1.as<float>(), dw.get(), wt, dy1.get(), yt, 1, dim, kEps, nullptr));
        KVSERVE_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<float> y1 = DownloadAs(yt, dy1.get(), dim);
        for (int64_t d = 0; d < dim; ++d) {
          ASSERT_TRUE(SameBits(y1[d], y[5 * dim + d])) << "element " << d;
        }
      }
    }
  }
}

TEST(GpuElementwise, AddRmsNormMatchesCpu) {
  std::mt19937 rng(2);
  const int64_t rows = 17;
  for (int64_t dim : {64, 100, 576, 4104}) {
    for (ElemType wt : kTypes) {
      for (ElemType yt : kTypes) {
        SCOPED_TRACE("dim " + std::to_string(dim) + " weight " + Name(wt) + " y " + Name(yt));
        std::vector<float> residual = RandomVector(rows * dim, rng, -3.0f, 3.0f);
        const std::vector<float> x = Rounded(yt, RandomVector(rows * dim, rng, -1.0f, 1.0f));
        const std::vector<float> w = Rounded(wt, RandomVector(dim, rng, 0.5f, 1.5f));
        DeviceBuffer dres = UploadAs(ElemType::kF32, residual);
        DeviceBuffer dx = UploadAs(yt, x);
        DeviceBuffer dw = UploadAs(wt, w);
        DeviceBuffer dy(rows * dim * cuda::ElemSize(yt));
        PoisonNaN(dy);
        std::vector<float> ref(rows * dim);
        kernels::AddRmsNorm(residual.data(), x.data(), w.data(), ref.data(), rows, dim, kEps,
                            nullptr);
        KVSERVE_CUDA_OK(cuda::AddRmsNorm(dres.as<float>(), dx.get(), dw.get(), wt, dy.get(), yt,
                                         rows, dim, kEps, nullptr));
        KVSERVE_CUDA_OK(cudaDeviceSynchronize());
        // The residual update is one fp32 addition per element: exact.
        const std::vector<float> res = DownloadAs(ElemType::kF32, dres.get(), rows * dim);
        for (size_t i = 0; i < res.size(); ++i) {
          ASSERT_TRUE(SameBits(res[i], residual[i])) << "residual " << i;
        }
        const std::vector<float> y = DownloadAs(yt, dy.get(), rows * dim);
        EXPECT_LE(RelativeError(y, Rounded(yt, ref)), Tolerance(yt));
      }
    }
  }
}

// ---- EmbeddingLookup -------------------------------------------------------------

TEST(GpuElementwise, EmbeddingLookupIsExact) {
  std::mt19937 rng(3);
  const int64_t vocab = 300, n = 23;
  for (int64_t dim : {64, 100, 576}) {
    for (ElemType t : kTypes) {
      SCOPED_TRACE("dim " + std::to_string(dim) + " " + Name(t));
      const std::vector<float> table = Rounded(t, RandomVector(vocab * dim, rng));
      std::vector<int32_t> ids(n);
      std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
      for (int32_t& id : ids) id = pick(rng);
      ids[3] = ids[9];  // a repeat
      ids[0] = vocab - 1;
      std::vector<float> ref(n * dim);
      kernels::EmbeddingLookup(table.data(), dim, ids.data(), n, ref.data());
      DeviceBuffer dtable = UploadAs(t, table);
      DeviceBuffer dids = Upload(ids);
      DeviceBuffer dout(n * dim * sizeof(float));
      PoisonNaN(dout);
      KVSERVE_CUDA_OK(cuda::EmbeddingLookup(dtable.get(), t, dim, dids.as<int32_t>(), n,
                                            dout.as<float>(), nullptr));
      KVSERVE_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> out = DownloadAs(ElemType::kF32, dout.get(), n * dim);
      for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(SameBits(out[i], ref[i])) << i;
    }
  }
}

// ---- ApplyRope -------------------------------------------------------------------

// Llama 3 inverse frequencies (theta 500000, factor 8, low 1, high 4,
// original context 8192), computed here rather than by the engine.
std::vector<float> Llama3InvFreq(int head_dim) {
  const double theta = 500000.0, factor = 8.0, low = 1.0, high = 4.0, original = 8192.0;
  std::vector<float> inv(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    double f = 1.0 / std::pow(theta, 2.0 * i / head_dim);
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > original / low) {
      f /= factor;
    } else if (wavelen >= original / high) {
      const double smooth = (original / wavelen - low) / (high - low);
      f = (1.0 - smooth) * f / factor + smooth * f;
    }
    inv[i] = static_cast<float>(f);
  }
  return inv;
}

struct RopeShape {
  int head_dim, num_heads, num_kv_heads;
  float scaling;
  int64_t pad;  // extra elements per token row (odd: the unpaired path)
};

TEST(GpuElementwise, ApplyRopeMatchesCpu) {
  std::mt19937 rng(4);
  const int num_tokens = 19;
  const RopeShape shapes[] = {{64, 4, 2, 1.0f, 0},
                              {128, 32, 8, 1.0f, 0},
                              {128, 8, 2, 1.3f, 0},
                              {64, 3, 1, 1.0f, 1},
                              {16, 4, 2, 1.0f, 0}};
  for (const RopeShape& s : shapes) {
    for (ElemType t : kTypes) {
      SCOPED_TRACE("head_dim " + std::to_string(s.head_dim) + " heads " +
                   std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) + " pad " +
                   std::to_string(s.pad) + " " + Name(t));
      // Fused qkv rows: q heads, k heads, v heads (+ pad); v must stay untouched.
      const int64_t width =
          static_cast<int64_t>(s.num_heads + 2 * s.num_kv_heads) * s.head_dim + s.pad;
      const std::vector<float> qkv = Rounded(t, RandomVector(num_tokens * width, rng, -2.0f, 2.0f));
      std::vector<int32_t> positions(num_tokens);
      std::uniform_int_distribution<int32_t> pos(0, 131071);
      for (int32_t& p : positions) p = pos(rng);
      positions[0] = 0;
      positions[1] = 1;
      const std::vector<float> inv_freq = Llama3InvFreq(s.head_dim);

      std::vector<float> ref = qkv;
      kernels::RopeParams cpu{.q = ref.data(),
                              .k = ref.data() + static_cast<int64_t>(s.num_heads) * s.head_dim,
                              .q_stride = width,
                              .k_stride = width,
                              .positions = positions.data(),
                              .inv_freq = inv_freq.data(),
                              .attention_scaling = s.scaling,
                              .num_tokens = num_tokens,
                              .num_heads = s.num_heads,
                              .num_kv_heads = s.num_kv_heads,
                              .head_dim = s.head_dim};
      kernels::ApplyRope(cpu, nullptr);

      DeviceBuffer dqkv = UploadAs(t, qkv);
      DeviceBuffer dpos = Upload(positions);
      DeviceBuffer dinv = Upload(inv_freq);
      const size_t e = cuda::ElemSize(t);
      cuda::CudaRopeParams p{
          .dtype = t,
          .q = dqkv.get(),
          .k = static_cast<char*>(dqkv.get()) + static_cast<int64_t>(s.num_heads) * s.head_dim * e,
          .q_stride = width,
          .k_stride = width,
          .positions = dpos.as<int32_t>(),
          .inv_freq = dinv.as<float>(),
          .attention_scaling = s.scaling,
          .num_tokens = num_tokens,
          .num_heads = s.num_heads,
          .num_kv_heads = s.num_kv_heads,
          .head_dim = s.head_dim};
      KVSERVE_CUDA_OK(cuda::ApplyRope(p, nullptr));
      KVSERVE_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> out = DownloadAs(t, dqkv.get(), num_tokens * width);
      EXPECT_LE(RelativeError(out, Rounded(t, ref)), Tolerance(t));
      const int64_t v_begin = static_cast<int64_t>(s.num_heads + s.num_kv_heads) * s.head_dim;
      for (int tok = 0; tok < num_tokens; ++tok) {
        for (int64_t i = v_begin; i < width; ++i) {
          ASSERT_TRUE(SameBits(out[tok * width + i], qkv[tok * width + i])) << "v touched";
        }
      }
      // Position 0 is the identity (times the scaling).
      for (int64_t i = 0; i < v_begin; ++i) {
        EXPECT_EQ(out[i], RoundTo(t, qkv[i] * s.scaling)) << i;
      }
    }
  }
}

// ---- SiluMul ---------------------------------------------------------------------

// A gated activation (gate_up -> act) against its CPU twin.
template <typename CpuFn, typename GpuFn>
void CheckGatedMul(CpuFn cpu, GpuFn gpu, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t rows = 17;
  for (int64_t inter : {64, 100, 1536, 4104}) {
    for (ElemType t : kTypes) {
      SCOPED_TRACE("inter " + std::to_string(inter) + " " + Name(t));
      const std::vector<float> gate_up =
          Rounded(t, RandomVector(rows * 2 * inter, rng, -6.0f, 6.0f));
      std::vector<float> ref(rows * inter);
      cpu(gate_up.data(), ref.data(), rows, inter, nullptr);
      DeviceBuffer din = UploadAs(t, gate_up);
      DeviceBuffer dout(rows * inter * cuda::ElemSize(t));
      PoisonNaN(dout);
      KVSERVE_CUDA_OK(gpu(din.get(), dout.get(), t, rows, inter, nullptr));
      KVSERVE_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> out = DownloadAs(t, dout.get(), rows * inter);
      EXPECT_LE(RelativeError(out, Rounded(t, ref)), Tolerance(t));
    }
  }
}

TEST(GpuElementwise, SiluMulMatchesCpu) { CheckGatedMul(kernels::SiluMul, cuda::SiluMul, 5); }

// ---- GeluTanhMul, HeadRmsNorm, soft-cap, scale, partial rope ----------------------

TEST(GpuElementwise, GeluTanhMulMatchesCpu) {
  CheckGatedMul(kernels::GeluTanhMul, cuda::GeluTanhMul, 15);
}

// Per-head norms of the q heads of fused qkv rows (k/v and padding untouched),
// and Gemma's 1 + w, against the CPU HeadRmsNorm (which takes 1 + w folded).
TEST(GpuElementwise, HeadRmsNormMatchesCpu) {
  std::mt19937 rng(16);
  const int64_t tokens = 9, heads = 6, head_dim = 48, stride = heads * head_dim + 40;
  for (ElemType t : kTypes) {
    for (float offset : {0.0f, 1.0f}) {
      SCOPED_TRACE(Name(t) + " offset " + std::to_string(offset));
      const std::vector<float> x = Rounded(t, RandomVector(tokens * stride, rng, -2.0f, 2.0f));
      const std::vector<float> w = Rounded(t, RandomVector(head_dim, rng, -0.5f, 0.5f));
      std::vector<float> folded = w;
      for (float& v : folded) v = offset + v;
      std::vector<float> ref = x;
      kernels::HeadRmsNorm(ref.data(), stride, tokens, heads, folded.data(), head_dim, kEps,
                           nullptr);
      DeviceBuffer dx = UploadAs(t, x);
      DeviceBuffer dw = UploadAs(t, w);
      KVSERVE_CUDA_OK(cuda::HeadRmsNorm(dx.get(), t, stride, tokens, heads, dw.get(), head_dim,
                                        kEps, offset, nullptr));
      KVSERVE_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> out = DownloadAs(t, dx.get(), tokens * stride);
      EXPECT_LE(RelativeError(out, Rounded(t, ref)), Tolerance(t));
      for (int64_t tok = 0; tok < tokens; ++tok) {
        for (int64_t i = heads * head_dim; i < stride; ++i) {
          ASSERT_TRUE(SameBits(out[tok * stride + i], x[tok * stride + i])) << "tail touched";
        }
      }
    }
  }
}

TEST(GpuElementwise, SoftCapAndScaleMatchCpu) {
  std::mt19937 rng(17);
  const std::vector<float> x = RandomVector(1000, rng, -80.0f, 80.0f);
  std::vector<float> capped = x, scaled = x;
  kernels::SoftCap(capped.data(), static_cast<int64_t>(capped.size()), 30.0f);
  kernels::Scale(scaled.data(), static_cast<int64_t>(scaled.size()), 8.0f);
  DeviceBuffer dc = Upload(x);
  DeviceBuffer ds = Upload(x);
  KVSERVE_CUDA_OK(cuda::SoftCapF32(dc.as<float>(), static_cast<int64_t>(x.size()), 30.0f, nullptr));
  KVSERVE_CUDA_OK(cuda::ScaleF32(ds.as<float>(), static_cast<int64_t>(x.size()), 8.0f, nullptr));
  KVSERVE_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_LE(RelativeError(DownloadAs(ElemType::kF32, dc.get(), x.size()), capped), 1e-6);
  EXPECT_EQ(DownloadAs(ElemType::kF32, ds.get(), x.size()), scaled);  // one exact product
  EXPECT_EQ(cuda::SoftCapF32(dc.as<float>(), 4, 0.0f, nullptr), cudaErrorInvalidValue);
}

// Phi-3 / Phi-4-mini partial rotary: only the first rotary_dim elements of a
// head rotate, pairs (i, i + rotary_dim / 2); the rest is untouched.
TEST(GpuElementwise, PartialRopeMatchesCpu) {
  std::mt19937 rng(18);
  const int num_tokens = 7, heads = 3, kv_heads = 1, head_dim = 32;
  const int64_t width = (heads + 2 * kv_heads) * head_dim;
  for (int rotary_dim : {24, 12, 32}) {
    for (ElemType t : kTypes) {
      SCOPED_TRACE("rotary " + std::to_string(rotary_dim) + " " + Name(t));
      const std::vector<float> qkv = Rounded(t, RandomVector(num_tokens * width, rng, -2.0f, 2.0f));
      std::vector<int32_t> positions = {0, 1, 5, 77, 300, 4095, 9};
      std::vector<float> inv_freq(rotary_dim / 2);
      for (int i = 0; i < rotary_dim / 2; ++i) {
        inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rotary_dim));
      }
      std::vector<float> ref = qkv;
      kernels::ApplyRope({.q = ref.data(),
                          .k = ref.data() + heads * head_dim,
                          .q_stride = width,
                          .k_stride = width,
                          .positions = positions.data(),
                          .inv_freq = inv_freq.data(),
                          .attention_scaling = 1.19f,
                          .num_tokens = num_tokens,
                          .num_heads = heads,
                          .num_kv_heads = kv_heads,
                          .head_dim = head_dim,
                          .rotary_dim = rotary_dim},
                         nullptr);
      DeviceBuffer dqkv = UploadAs(t, qkv);
      DeviceBuffer dpos = Upload(positions);
      DeviceBuffer dinv = Upload(inv_freq);
      KVSERVE_CUDA_OK(cuda::ApplyRope(
          {.dtype = t,
           .q = dqkv.get(),
           .k = static_cast<char*>(dqkv.get()) + heads * head_dim * cuda::ElemSize(t),
           .q_stride = width,
           .k_stride = width,
           .positions = dpos.as<int32_t>(),
           .inv_freq = dinv.as<float>(),
           .attention_scaling = 1.19f,
           .num_tokens = num_tokens,
           .num_heads = heads,
           .num_kv_heads = kv_heads,
           .head_dim = head_dim,
           .rotary_dim = rotary_dim},
          nullptr));
      KVSERVE_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> out = DownloadAs(t, dqkv.get(), num_tokens * width);
      EXPECT_LE(RelativeError(out, Rounded(t, ref)), Tolerance(t));
    }
  }
}

// ---- GatherRows ------------------------------------------------------------------

TEST(GpuElementwise, GatherRowsIsExact) {
  std::mt19937 rng(6);
  const int64_t src_rows = 50, rows = 17;
  // 16-byte rows, 4-byte rows, byte rows, and a source 4 bytes off alignment.
  for (const auto& [row_bytes, offset] :
       std::vector<std::pair<int64_t, int64_t>>{{8192, 0}, {516, 0}, {7, 0}, {512, 4}}) {
    SCOPED_TRACE("row_bytes " + std::to_string(row_bytes) + " offset " + std::to_string(offset));
    std::vector<uint8_t> src(src_rows * row_bytes + offset);
    for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
    std::vector<int32_t> indices(rows);
    std::uniform_int_distribution<int32_t> pick(0, src_rows - 1);
    for (int32_t& i : indices) i = pick(rng);
    indices[2] = indices[11];
    DeviceBuffer dsrc = Upload(src);
    DeviceBuffer didx = Upload(indices);
    DeviceBuffer ddst(rows * row_bytes);
    PoisonNaN(ddst);
    KVSERVE_CUDA_OK(cuda::GatherRows(static_cast<char*>(dsrc.get()) + offset, didx.as<int32_t>(),
                                     rows, row_bytes, ddst.get(), nullptr));
    KVSERVE_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> dst = Download<uint8_t>(ddst, rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(std::memcmp(dst.data() + r * row_bytes,
                            src.data() + offset + indices[r] * row_bytes, row_bytes),
                0)
          << "row " << r;
    }
  }
}

// ---- conversions and fills --------------------------------------------------------

// Random values plus every special case a conversion must round right.
std::vector<float> ConversionInputs(int64_t n, std::mt19937& rng) {
  const float specials[] = {0.0f,        -0.0f,        INFINITY, -INFINITY, NAN,    65504.0f,
                            65519.0f,    65520.0f,     1e-8f,    -6e-8f,    1e-45f, 3.3e38f,
                            1.00390625f, 1.001953125f, -2.5f,    1e30f,     6.1e-5f};
  std::vector<float> v = RandomVector(n, rng, -100.0f, 100.0f);
  for (int64_t i = 0; i < n; i += 97) v[i] = specials[(i / 97) % std::size(specials)];
  return v;
}

// Compares n elements of type t on the device with the host's RN of `want`.
void ExpectBits(ElemType t, const DeviceBuffer& d, size_t byte_offset,
                const std::vector<float>& want) {
  const size_t n = want.size();
  const char* base = static_cast<const char*>(d.get()) + byte_offset;
  if (t == ElemType::kF32) {
    std::vector<float> got(n);
    cudaMemcpy(got.data(), base, n * 4, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << i;
      } else {
        ASSERT_TRUE(SameBits(got[i], want[i])) << i << ": " << got[i] << " vs " << want[i];
      }
    }
    return;
  }
  std::vector<uint16_t> got(n);
  cudaMemcpy(got.data(), base, n * 2, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t bits =
        t == ElemType::kBF16 ? FloatToBf16Bits(want[i]) : FloatToHalfBits(want[i]);
    const float got_f = t == ElemType::kBF16 ? Bf16BitsToFloat(got[i]) : HalfBitsToFloat(got[i]);
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got_f)) << i;
    } else {
      ASSERT_EQ(got[i], bits) << i << ": " << want[i] << " -> " << got_f;
    }
  }
}

TEST(GpuElementwise, ConversionsRoundToNearestEven) {
  std::mt19937 rng(7);
  for (int64_t n : {1, 7, 1000003}) {
    // Element offsets 0 and 1 (the unaligned, scalar path).
    for (int64_t offset : {0, 1}) {
      const std::vector<float> src = ConversionInputs(n, rng);
      for (ElemType dst_t : kTypes) {
        SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset) + " f32 -> " +
                     Name(dst_t));
        DeviceBuffer dsrc = UploadAs(ElemType::kF32, src);
        DeviceBuffer ddst((n + offset) * cuda::ElemSize(dst_t));
        PoisonNaN(ddst);
        KVSERVE_CUDA_OK(cuda::ConvertFromF32(
            dsrc.as<float>(), static_cast<char*>(ddst.get()) + offset * cuda::ElemSize(dst_t),
            dst_t, n, nullptr));
        KVSERVE_CUDA_OK(cudaDeviceSynchronize());
        ExpectBits(dst_t, ddst, offset * cuda::ElemSize(dst_t), src);
      }
      for (ElemType src_t : kTypes) {
        const std::vector<float> held = Rounded(src_t, src);  // what the device holds
        DeviceBuffer dsrc = UploadAs(src_t, held);
        for (ElemType dst_t : kTypes) {
          SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset) + " " +
                       Name(src_t) + " -> " + Name(dst_t));
          DeviceBuffer ddst((n + offset) * cuda::ElemSize(dst_t));
          PoisonNaN(ddst);
          KVSERVE_CUDA_OK(cuda::ConvertElems(
              dsrc.get(), src_t, static_cast<char*>(ddst.get()) + offset * cuda::ElemSize(dst_t),
              dst_t, n, nullptr));
          KVSERVE_CUDA_OK(cudaDeviceSynchronize());
          ExpectBits(dst_t, ddst, offset * cuda::ElemSize(dst_t), held);
        }
      }
    }
  }
}

TEST(GpuElementwise, FillWritesEveryElement) {
  for (ElemType t : kTypes) {
    for (float value : {0.5f, -1.2345678f, NAN, 70000.0f}) {
      const int64_t n = 1003;
      DeviceBuffer d((n + 1) * cuda::ElemSize(t));
      PoisonNaN(d);
      KVSERVE_CUDA_OK(cuda::Fill(d.get(), t, n, value, nullptr));
      KVSERVE_CUDA_OK(cudaDeviceSynchronize());
      std::vector<float> want(n, value);
      ExpectBits(t, d, 0, want);
      // The element past n is untouched (still the 0xFF poison: NaN).
      const std::vector<float> all = DownloadAs(t, d.get(), n + 1);
      EXPECT_TRUE(std::isnan(all[n]));
    }
  }
}

// engine/builtin_models.cc HashUniform, reimplemented.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
float HashUniform(uint64_t seed, uint64_t tensor, uint64_t index) {
  const uint64_t h = SplitMix64(SplitMix64(seed ^ (tensor * 0x632be59bd9b4e019ULL)) + index);
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ULL << 23) - 1.0);
}

TEST(GpuElementwise, FillHashUniformIsBitExact) {
  struct Spec {
    uint64_t seed, tensor;
    float scale, offset;
  };
  const Spec specs[] = {{engine::kBuiltinSeed, 0, 1.0f, 0.0f},
                        {engine::kBuiltinSeed, 7, std::sqrt(3.0f / 576.0f), 0.0f},
                        {12345, 3, 0.1f, 1.0f},
                        {0, 1u << 20, 0.02f, -0.3f}};
  const int64_t n = (1 << 20) + 3;
  for (const Spec& s : specs) {
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = s.offset + s.scale * HashUniform(s.seed, s.tensor, static_cast<uint64_t>(i));
    }
    for (ElemType t : kTypes) {
      SCOPED_TRACE("tensor " + std::to_string(s.tensor) + " " + Name(t));
      DeviceBuffer d(n * cuda::ElemSize(t));
      PoisonNaN(d);
      KVSERVE_CUDA_OK(
          cuda::FillHashUniform(d.get(), t, n, s.seed, s.tensor, s.scale, s.offset, nullptr));
      KVSERVE_CUDA_OK(cudaDeviceSynchronize());
      ExpectBits(t, d, 0, want);
    }
  }
}

TEST(GpuElementwise, FillHashUniformMatchesTheBuiltinCheckpoint) {
  const absl::StatusOr<engine::ModelConfig> config = engine::BuiltinModelConfig("tiny");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::unique_ptr<engine::SafetensorsCheckpoint> checkpoint =
      engine::MakeBuiltinCheckpoint(*config, engine::kBuiltinSeed);
  for (const engine::BuiltinTensorSpec& spec : engine::BuiltinTensorSpecs(*config)) {
    SCOPED_TRACE(spec.name);
    const absl::StatusOr<const engine::TensorInfo*> info = checkpoint->Find(spec.name);
    ASSERT_TRUE(info.ok()) << info.status();
    const int64_t n = static_cast<int64_t>((*info)->num_bytes / sizeof(float));
    DeviceBuffer d(n * sizeof(float));
    PoisonNaN(d);
    KVSERVE_CUDA_OK(cuda::FillHashUniform(d.get(), ElemType::kF32, n, engine::kBuiltinSeed,
                                          spec.index, spec.scale, spec.offset, nullptr));
    KVSERVE_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = Download<uint8_t>(d, (*info)->num_bytes);
    ASSERT_EQ(std::memcmp(got.data(), (*info)->data, (*info)->num_bytes), 0);
  }
}

TEST(GpuElementwise, FillHashUniformPast2To31Elements) {
  // 64-bit element indices: the last elements of a 2^31 + 1000 bf16 tensor.
  const int64_t n = (int64_t{1} << 31) + 1000;
  DeviceBuffer d(n * 2);
  if (d.get() == nullptr) GTEST_SKIP() << "no room for a 4 GiB tensor";
  const float scale = 0.05f, offset = 0.0f;
  KVSERVE_CUDA_OK(
      cuda::FillHashUniform(d.get(), ElemType::kBF16, n, 99, 5, scale, offset, nullptr));
  KVSERVE_CUDA_OK(cudaDeviceSynchronize());
  const int64_t tail = 4096;
  std::vector<float> want(tail);
  for (int64_t i = 0; i < tail; ++i) {
    want[i] = offset + scale * HashUniform(99, 5, static_cast<uint64_t>(n - tail + i));
  }
  ExpectBits(ElemType::kBF16, d, (n - tail) * 2, want);
}

// ---- invalid arguments -------------------------------------------------------------

TEST(GpuElementwise, InvalidArguments) {
  DeviceBuffer buf(4096);
  float* f = buf.as<float>();
  EXPECT_EQ(cuda::RmsNorm(nullptr, f, ElemType::kF32, f, ElemType::kF32, 1, 8, kEps, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::RmsNorm(f, f, ElemType::kF32, f, ElemType::kF32, 1, 0, kEps, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::RmsNorm(f, f, static_cast<ElemType>(7), f, ElemType::kF32, 1, 8, kEps, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::RmsNorm(f, f, ElemType::kF32, f, ElemType::kF32, 0, 8, kEps, nullptr),
            cudaSuccess);
  cuda::CudaRopeParams rope{.dtype = ElemType::kF32,
                            .q = f,
                            .k = f,
                            .q_stride = 64,
                            .k_stride = 64,
                            .positions = buf.as<int32_t>(),
                            .inv_freq = f,
                            .num_tokens = 1,
                            .num_heads = 1,
                            .num_kv_heads = 1,
                            .head_dim = 63};
  EXPECT_EQ(cuda::ApplyRope(rope, nullptr), cudaErrorInvalidValue);  // odd head_dim
  rope.head_dim = 2048;
  EXPECT_EQ(cuda::ApplyRope(rope, nullptr), cudaErrorInvalidValue);  // too large
  rope.head_dim = 64;
  rope.positions = nullptr;
  EXPECT_EQ(cuda::ApplyRope(rope, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::SiluMul(nullptr, f, ElemType::kF32, 1, 8, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::GatherRows(f, nullptr, 1, 8, f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::ConvertFromF32(f, nullptr, ElemType::kF16, 8, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::ConvertElems(f, ElemType::kF16, f, ElemType::kBF16, -1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Fill(nullptr, ElemType::kF32, 8, 0.0f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::FillHashUniform(nullptr, ElemType::kF32, 8, 0, 0, 1.0f, 0.0f, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::EmbeddingLookup(f, ElemType::kF32, 8, nullptr, 1, f, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Fill(f, ElemType::kF32, 0, 0.0f, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace kvserve::gpu_test
