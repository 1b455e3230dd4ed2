// tensor/ops_vec.cc — f32 inner loops that the compiler vectorizes: GELU, layernorm rows, attention softmax rows.
//
// Each kernel is built three times (x86-64 baseline SSE2, AVX2+FMA, AVX-512) through GCC's target_clones, and the
// loader picks the widest one the CPU has, so the binary still runs on any x86-64. The loops call no libm
// function: exp is computed by vexp() below (range reduction to r in [-ln2/2, ln2/2], a degree-7 polynomial,
// scaling by 2^n through the exponent bits), accurate to about 2 ulp for x in [-87, 88] (clamped outside).
// Reductions keep 16 partial sums, so their order differs from a plain left-to-right loop by float rounding only.
// Define ZW_VEC_NO_CLONES to build only for the compiler's target (testing the fallback).
// Non-goals: f64 (the gradient checks use the plain loops), hand-written intrinsics.
#include <bit>
#include <cmath>
#include <cstdint>

#include "tensor/ops_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(ZW_VEC_NO_CLONES)
#define ZW_VEC_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ZW_VEC_CLONES
#endif

namespace zw::tensor::detail {
namespace {

constexpr int kLanes = 16;  // partial sums per reduction: one AVX-512 register of floats

[[gnu::always_inline]] inline float vexp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // ln 2 split in two for exactness
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

}  // namespace

// gelu(x) = x·(1 + tanh(u))/2 = x / (1 + exp(-2u)), u = sqrt(2/pi)·(x + 0.044715·x³); no cancellation near 0.
ZW_VEC_CLONES void gelu_forward_f32(float* __restrict y, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float u = kGeluScale * (x[i] + kGeluCubic * x[i] * x[i] * x[i]);
    y[i] = x[i] / (1.0f + vexp(-2.0f * u));
  }
}

// With s = 1/(1 + e), e = exp(-2u): gelu' = s + 2x·s(1-s)·u' = s·(1 + 2x·(e·s)·u').
ZW_VEC_CLONES void gelu_backward_f32(float* __restrict dx, const float* __restrict dy, const float* __restrict x,
                                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float u = kGeluScale * (x[i] + kGeluCubic * x[i] * x[i] * x[i]);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x[i] * x[i]);
    const float e = vexp(-2.0f * u);
    const float s = 1.0f / (1.0f + e);
    const float es = e * s;  // = 1 - s, in [0, 1]; forming it first keeps x·e from overflowing for x << 0
    dx[i] += dy[i] * (s * (1.0f + 2.0f * x[i] * es * du));
  }
}

// gelu_backward_f32's arithmetic with dy = d, written over d (dx += dy·f into a zeroed dx rounds dy·f once, as here).
ZW_VEC_CLONES void gelu_backward_in_place_f32(float* __restrict d, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float u = kGeluScale * (x[i] + kGeluCubic * x[i] * x[i] * x[i]);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x[i] * x[i]);
    const float e = vexp(-2.0f * u);
    const float s = 1.0f / (1.0f + e);
    const float es = e * s;
    d[i] = d[i] * (s * (1.0f + 2.0f * x[i] * es * du));
  }
}

ZW_VEC_CLONES void softmax_row_f32(float* __restrict row, int64_t n) {
  float mx[kLanes];
  for (int j = 0; j < kLanes; ++j) mx[j] = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) mx[j] = row[i + j] > mx[j] ? row[i + j] : mx[j];
  float m = -INFINITY;
  for (int j = 0; j < kLanes; ++j) m = mx[j] > m ? mx[j] : m;
  for (; i < n; ++i) m = row[i] > m ? row[i] : m;
  for (int64_t k = 0; k < n; ++k) row[k] = vexp(row[k] - m);
  const float inv = 1.0f / sum_f32(row, n);
  for (int64_t k = 0; k < n; ++k) row[k] *= inv;
}

ZW_VEC_CLONES float sum_f32(const float* __restrict x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  float s = 0;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  for (; i < n; ++i) s += x[i];
  return s;
}

// Two passes (mean, then the centred variance) as the reference loop; stats receives {mean, rstd}.
ZW_VEC_CLONES void layernorm_forward_row_f32(float* __restrict y, float* __restrict stats, const float* __restrict x,
                                             const float* __restrict w, const float* __restrict b, int64_t C,
                                             float eps) {
  const float m = sum_f32(x, C) / float(C);
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= C; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += (x[i + j] - m) * (x[i + j] - m);
  float var = 0;
  for (int j = 0; j < kLanes; ++j) var += acc[j];
  for (; i < C; ++i) var += (x[i] - m) * (x[i] - m);
  const float s = 1.0f / std::sqrt(var / float(C) + eps);
  for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * w[c] + b[c];
  stats[0] = m;
  stats[1] = s;
}

// dx += s·(g - mean(g) - xhat·mean(g·xhat)), g = dy·w, xhat = (x - m)·s; dw += dy·xhat; db += dy (each optional).
ZW_VEC_CLONES void layernorm_backward_row_f32(float* __restrict dx, float* __restrict dw, float* __restrict db,
                                              const float* __restrict dy, const float* __restrict x,
                                              const float* __restrict w, float m, float s, int64_t C) {
  float ga[kLanes] = {}, gxa[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= C; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float g = dy[i + j] * w[i + j];
      ga[j] += g;
      gxa[j] += g * ((x[i + j] - m) * s);
    }
  float g_mean = 0, gx_mean = 0;
  for (int j = 0; j < kLanes; ++j) g_mean += ga[j], gx_mean += gxa[j];
  for (; i < C; ++i) {
    const float g = dy[i] * w[i];
    g_mean += g;
    gx_mean += g * ((x[i] - m) * s);
  }
  g_mean /= float(C);
  gx_mean /= float(C);
  if (dw != nullptr)
    for (int64_t c = 0; c < C; ++c) dw[c] += dy[c] * ((x[c] - m) * s);
  if (db != nullptr)
    for (int64_t c = 0; c < C; ++c) db[c] += dy[c];
  if (dx != nullptr)
    for (int64_t c = 0; c < C; ++c) dx[c] += s * (dy[c] * w[c] - g_mean - ((x[c] - m) * s) * gx_mean);
}

// d[u] = p[u]·(d[u] - Σ_w p[w]·d[w])·scale for u < n.
ZW_VEC_CLONES void softmax_backward_row_f32(float* __restrict d, const float* __restrict p, int64_t n, float scale) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += p[i + j] * d[i + j];
  float dot = 0;
  for (int j = 0; j < kLanes; ++j) dot += acc[j];
  for (; i < n; ++i) dot += p[i] * d[i];
  for (int64_t k = 0; k < n; ++k) d[k] = p[k] * (d[k] - dot) * scale;
}

}  // namespace zw::tensor::detail
