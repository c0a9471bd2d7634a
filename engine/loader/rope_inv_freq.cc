// ComputeRopeInvFreq: transformers' rope init functions
// (_compute_default/_linear_scaling/_llama3/_longrope_parameters), replayed operation by
// operation in fp32. Notes on how torch evaluates each Python expression:
//   base ** t        pow(float(base), t) per element (here: correctly rounded)
//   1.0 / t, c / t   Tensor.__rtruediv__ = t.reciprocal() * c  (two roundings)
//   t / c, t * c     the Python scalar c is first rounded to fp32
// -ffp-contract=off (top-level CMakeLists) keeps the compiler from fusing.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "engine/loader/model_config.h"

namespace kvserve::engine {
namespace {

// float(base) ** (float(2i) / float(dim)), rounded once from double: the
// double result is within 1 ulp (double) of the true value, so this is the
// correctly rounded fp32 power in all but astronomically rare ties.
float PowF32(float base, float exponent) {
  return static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
}

// base ** (torch.arange(0, dim, 2, dtype=int64).float() / dim), fp32.
std::vector<float> BasePowers(double theta, int64_t dim) {
  std::vector<float> powers(static_cast<size_t>(dim / 2));
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    powers[i] = PowF32(base, exponent);
  }
  return powers;
}

}  // namespace

std::vector<float> ComputeLocalRopeInvFreq(const ModelConfig& config) {
  if (config.local_rope_theta <= 0.0) return {};
  std::vector<float> inv_freq = BasePowers(config.local_rope_theta, config.RotaryDim());
  for (float& f : inv_freq) f = 1.0f / f;
  return inv_freq;
}

float RopeAttentionScaling(const ModelConfig& config) {
  return config.rope_scaling.type == RopeScaling::Type::kLongRope
             ? static_cast<float>(config.rope_scaling.attention_factor)
             : 1.0f;
}

std::vector<float> ComputeRopeInvFreq(const ModelConfig& config, int64_t max_model_len) {
  const RopeScaling& s = config.rope_scaling;
  std::vector<float> inv_freq = BasePowers(config.rope_theta, config.RotaryDim());
  if (s.type == RopeScaling::Type::kLongRope) {
    // 1.0 / (ext_factors * base ** t): ext_factors is an fp32 tensor.
    const int64_t served = max_model_len > 0 ? max_model_len : config.max_position_embeddings;
    const std::vector<double>& ext =
        served > s.original_max_position_embeddings ? s.long_factor : s.short_factor;
    for (size_t i = 0; i < inv_freq.size(); ++i) {
      inv_freq[i] = 1.0f / (static_cast<float>(ext[i]) * inv_freq[i]);
    }
    return inv_freq;
  }
  for (float& f : inv_freq) f = 1.0f / f;

  switch (s.type) {
    case RopeScaling::Type::kNone:
    case RopeScaling::Type::kLongRope:
      break;
    case RopeScaling::Type::kLinear: {
      const float factor = static_cast<float>(s.factor);
      for (float& f : inv_freq) f /= factor;
      break;
    }
    case RopeScaling::Type::kLlama3: {
      // Wavelengths shorter than old_context_len / high_freq_factor keep their
      // frequency, longer than old_context_len / low_freq_factor are divided by
      // factor, and the band between is interpolated by smooth_factor.
      const double old_context_len = static_cast<double>(s.original_max_position_embeddings);
      const float factor = static_cast<float>(s.factor);
      const float low_freq_factor = static_cast<float>(s.low_freq_factor);
      const float low_freq_wavelen = static_cast<float>(old_context_len / s.low_freq_factor);
      const float high_freq_wavelen = static_cast<float>(old_context_len / s.high_freq_factor);
      const float smooth_denominator = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
      const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
      const float old_context_len_f = static_cast<float>(old_context_len);
      for (float& f : inv_freq) {
        const float wavelen = (1.0f / f) * two_pi;
        const float inv_freq_llama = wavelen > low_freq_wavelen ? f / factor : f;
        const float smooth_factor =
            ((1.0f / wavelen) * old_context_len_f - low_freq_factor) / smooth_denominator;
        const float smoothed =
            (1.0f - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
        const bool is_medium_freq = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
        f = is_medium_freq ? smoothed : inv_freq_llama;
      }
      break;
    }
  }
  return inv_freq;
}

}  // namespace kvserve::engine
