#include "kernels/cpu/elementwise.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/cpu_features.h"

namespace kvserve::kernels {
namespace {

// Rows per chunk such that a chunk is worth a thread wake-up.
int64_t RowGrain(int64_t row_floats) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_floats));
}

void ForRows(ThreadPool* pool, int64_t rows, int64_t grain,
             const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    fn(0, rows);
  } else {
    pool->ParallelFor(rows, grain, fn);
  }
}

// ---- sum of squares and scaling: the only reductions here ----

float SumSquaresScalar(const float* x, int64_t dim) {
  float acc = 0.0f;
  for (int64_t d = 0; d < dim; ++d) acc += x[d] * x[d];
  return acc;
}

__attribute__((target("avx2,fma"))) float SumSquaresAvx2(const float* x, int64_t dim) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t d = 0;
  for (; d + 32 <= dim; d += 32) {
    __m256 v0 = _mm256_loadu_ps(x + d), v1 = _mm256_loadu_ps(x + d + 8);
    __m256 v2 = _mm256_loadu_ps(x + d + 16), v3 = _mm256_loadu_ps(x + d + 24);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
    a2 = _mm256_fmadd_ps(v2, v2, a2);
    a3 = _mm256_fmadd_ps(v3, v3, a3);
  }
  for (; d + 8 <= dim; d += 8) {
    __m256 v = _mm256_loadu_ps(x + d);
    a0 = _mm256_fmadd_ps(v, v, a0);
  }
  float acc =
      internal::HorizontalSum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; d < dim; ++d) acc = std::fma(x[d], x[d], acc);
  return acc;
}

// y = x * inv * weight, elementwise (same bits on any ISA).
void ScaleRow(const float* x, float inv, const float* weight, float* y, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) y[d] = (x[d] * inv) * weight[d];
}

void NormRow(const float* x, const float* weight, float* y, int64_t dim, float eps, bool avx2) {
  const float ss = avx2 ? SumSquaresAvx2(x, dim) : SumSquaresScalar(x, dim);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  ScaleRow(x, inv, weight, y, dim);
}

// ---- SiluMul ----

void SiluMulRowScalar(const float* g, const float* u, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

__attribute__((target("avx2,fma"))) void SiluMulRowAvx2(const float* g, const float* u, float* out,
                                                        int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i);
    __m256 e = internal::Exp256(_mm256_xor_ps(gv, sign));
    __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
  }
  if (i < n) {
    alignas(32) float gt[8] = {}, ut[8] = {}, ot[8];
    std::memcpy(gt, g + i, sizeof(float) * (n - i));
    std::memcpy(ut, u + i, sizeof(float) * (n - i));
    SiluMulRowAvx2(gt, ut, ot, 8);
    std::memcpy(out + i, ot, sizeof(float) * (n - i));
  }
}

// (x[i], x[i + half]) <- (x[i] c - x[i + half] s, x[i + half] c + x[i] s)
void RotateHalf(float* x, const float* cos, const float* sin, int half) {
  for (int i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

}  // namespace

void RmsNorm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps,
             ThreadPool* pool) {
  const bool avx2 = ActiveIsa() >= CpuIsa::kAvx2;
  ForRows(pool, rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) NormRow(x + r * dim, weight, y + r * dim, dim, eps, avx2);
  });
}

void AddRmsNorm(float* residual, const float* x, const float* weight, float* y, int64_t rows,
                int64_t dim, float eps, ThreadPool* pool) {
  const bool avx2 = ActiveIsa() >= CpuIsa::kAvx2;
  ForRows(pool, rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* res = residual + r * dim;
      const float* xr = x + r * dim;
      for (int64_t d = 0; d < dim; ++d) res[d] += xr[d];
      NormRow(res, weight, y + r * dim, dim, eps, avx2);
    }
  });
}

void HeadRmsNorm(float* x, int64_t stride, int64_t num_tokens, int64_t num_heads,
                 const float* weight, int64_t head_dim, float eps, ThreadPool* pool) {
  const bool avx2 = ActiveIsa() >= CpuIsa::kAvx2;
  ForRows(pool, num_tokens, RowGrain(num_heads * head_dim), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t h = 0; h < num_heads; ++h) {
        float* row = x + t * stride + h * head_dim;
        NormRow(row, weight, row, head_dim, eps, avx2);  // in place: ScaleRow is elementwise
      }
    }
  });
}

int64_t HadamardBlock(int64_t head_dim) {
  int64_t block = 1;
  while (block < 256 && head_dim % (2 * block) == 0) block *= 2;
  return block;
}

void RotateHeads(float* x, int64_t stride, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                 ThreadPool* pool) {
  const int64_t block = HadamardBlock(head_dim);
  const float norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(block)));
  ForRows(pool, num_tokens, RowGrain(num_heads * head_dim), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t h = 0; h < num_heads; ++h) {
        float* head = x + t * stride + h * head_dim;
        for (int64_t b = 0; b < head_dim; b += block) {
          float* v = head + b;
          for (int64_t half = 1; half < block; half *= 2) {
            for (int64_t i = 0; i < block; i += 2 * half) {
              for (int64_t j = i; j < i + half; ++j) {
                const float a = v[j], c = v[j + half];
                v[j] = a + c;
                v[j + half] = a - c;
              }
            }
          }
          for (int64_t i = 0; i < block; ++i) v[i] *= norm;
        }
      }
    }
  });
}

void ApplyRope(const RopeParams& p, ThreadPool* pool) {
  const int half = (p.rotary_dim > 0 ? p.rotary_dim : p.head_dim) / 2;
  ForRows(
      pool, p.num_tokens, RowGrain(static_cast<int64_t>(p.num_heads + p.num_kv_heads) * p.head_dim),
      [&](int64_t begin, int64_t end) {
        std::vector<float> cs(2 * static_cast<size_t>(half));
        float* cos = cs.data();
        float* sin = cs.data() + half;
        for (int64_t t = begin; t < end; ++t) {
          // fp32 angle, as transformers computes inv_freq @ positions.
          const float pos = static_cast<float>(p.positions[t]);
          for (int i = 0; i < half; ++i) {
            const float angle = pos * p.inv_freq[i];
            cos[i] = std::cos(angle) * p.attention_scaling;
            sin[i] = std::sin(angle) * p.attention_scaling;
          }
          for (int h = 0; h < p.num_heads; ++h) {
            RotateHalf(p.q + t * p.q_stride + static_cast<int64_t>(h) * p.head_dim, cos, sin, half);
          }
          for (int h = 0; h < p.num_kv_heads; ++h) {
            RotateHalf(p.k + t * p.k_stride + static_cast<int64_t>(h) * p.head_dim, cos, sin, half);
          }
        }
      });
}

void SiluMul(const float* gate_up, float* out, int64_t rows, int64_t inter, ThreadPool* pool) {
  const bool avx2 = ActiveIsa() >= CpuIsa::kAvx2;
  ForRows(pool, rows, RowGrain(inter), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gate_up + r * 2 * inter;
      if (avx2) {
        SiluMulRowAvx2(g, g + inter, out + r * inter, inter);
      } else {
        SiluMulRowScalar(g, g + inter, out + r * inter, inter);
      }
    }
  });
}

void GeluTanhMul(const float* gate_up, float* out, int64_t rows, int64_t inter, ThreadPool* pool) {
  // torch's GeluKernel (approximate tanh): kBeta = sqrt(2) * (2 / sqrt(pi)) * 0.5.
  const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  const float kappa = 0.044715f;
  ForRows(pool, rows, RowGrain(inter), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gate_up + r * 2 * inter;
      const float* u = g + inter;
      float* o = out + r * inter;
      for (int64_t i = 0; i < inter; ++i) {
        const float x = g[i];
        const float cube = x * x * x;
        const float inner = beta * (x + kappa * cube);
        o[i] = (0.5f * x * (1.0f + std::tanh(inner))) * u[i];
      }
    }
  });
}

void SoftCap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

void Scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void EmbeddingLookup(const float* table, int64_t dim, const int32_t* ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * dim, table + static_cast<int64_t>(ids[i]) * dim, sizeof(float) * dim);
  }
}

void EmbeddingLookup(const PackedMatrix& table, const int32_t* ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) table.ReadRow(ids[i], out + i * table.k);
}

}  // namespace kvserve::kernels
