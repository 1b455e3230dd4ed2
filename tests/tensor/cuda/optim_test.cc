// tests/tensor/cuda/optim_test.cc — the optimizer's device kernels against their host references: reduce_sum
// (against a double sum; determinism), grad_factor (bit-exact) and FlatAdamW (bit-exact against the host
// FlatAdamW over several steps, with decay and no-decay segments, chunking, padding and params16 copy-out; a
// non-finite factor changes nothing).
//
// Tolerance of reduce_sum: the device accumulates in f64 and rounds once to f32, so it must agree with the host's
// f64 sum within f32 rounding: |got − want| <= 1e-6·|want| + 1e-12·Σ|x| (the second term covers f64 order effects
// under cancellation, far below f32 resolution). AdamW and grad_factor must match bit for bit (optim.cu is built
// without FMA contraction, with IEEE division and square root, as adamw.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tensor/adamw.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::tensor::cuda_test {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// First index where the bits differ (or -1), for messages.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (bits_of(a[i]) != bits_of(b[i])) return int64_t(i);
  return a.size() == b.size() ? -1 : int64_t(std::min(a.size(), b.size()));
}

// ---- reduce_sum ----

float device_sum(const Tensor& x, bool squares) {
  OwnedTensor out = poisoned(DataType::kFloat32, Shape{1});
  const Status st = reduce_sum(out, x, squares);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return download(out)[0];
}

void check_sum(const Tensor& x, const std::vector<float>& host, bool squares) {
  double want = 0, magnitude = 0;
  for (float v : host) {
    want += squares ? double(v) * double(v) : double(v);
    magnitude += squares ? double(v) * double(v) : std::fabs(double(v));
  }
  const float got = device_sum(x, squares);
  EXPECT_LE(std::fabs(double(got) - want), 1e-6 * std::fabs(want) + 1e-12 * magnitude)
      << "got " << got << " want " << want;
  const float again = device_sum(x, squares);
  EXPECT_EQ(bits_of(got), bits_of(again)) << "a second run gave other bits: " << got << " vs " << again;
}

TEST_F(CudaOpTest, ReduceSumMatchesADoubleSumAndIsDeterministic) {
  for (DataType d : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}, int64_t{3'000'017}}) {
      for (bool squares : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(d)) + " n=" + std::to_string(n) + (squares ? " squares" : " plain"));
        const std::vector<float> x = random_values(size_t(n), rng_, d);
        OwnedTensor dev = upload(x, d, Shape{n});
        check_sum(dev, x, squares);
        if (n > 1) {  // one element in: the unaligned (scalar) path
          auto view = dev.tensor().narrow(1, n - 1);
          ASSERT_TRUE(view.ok());
          check_sum(*view, std::vector<float>(x.begin() + 1, x.end()), squares);
        }
      }
    }
  }
}

TEST_F(CudaOpTest, ReduceSumOfZeroElementsIsZero) {
  OwnedTensor empty = upload({}, DataType::kFloat32, Shape{0});
  EXPECT_EQ(bits_of(device_sum(empty, false)), bits_of(0.0f));
  EXPECT_EQ(bits_of(device_sum(empty, true)), bits_of(0.0f));
}

// More than 2³¹ elements (64-bit indexing): a constant bf16 tensor, whose sum is exact in f64.
TEST_F(CudaOpTest, ReduceSumIndexesBeyond2To31Elements) {
  const int64_t n = (int64_t{1} << 31) + 1001;
  auto big = OwnedTensor::zeros(DataType::kBFloat16, Shape{n}, MemKind::kCudaDevice, 0);
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  ASSERT_TRUE(fill(*big, 1.0).ok());
  EXPECT_EQ(device_sum(*big, false), static_cast<float>(double(n)));
  ASSERT_TRUE(fill(*big, 0.5).ok());
  EXPECT_EQ(device_sum(*big, true), static_cast<float>(0.25 * double(n)));
  EXPECT_EQ(device_sum(*big, false), static_cast<float>(0.5 * double(n)));
}

TEST_F(CudaOpTest, ReduceSumNamesTheScratchItNeeds) {
  const std::unique_ptr<CudaContext> small = context_with_scratch(16);
  ASSERT_TRUE(small);
  CudaScope scope(*small);
  OwnedTensor x = upload(std::vector<float>(1 << 20, 1.0f), DataType::kFloat32, Shape{1 << 20});
  OwnedTensor out = poisoned(DataType::kFloat32, Shape{1});
  const Status st = reduce_sum(out, x, false);
  EXPECT_EQ(st.code(), Code::kOutOfMemory) << st.to_string();
  EXPECT_NE(st.message().find("bytes of context scratch"), std::string::npos) << st.to_string();
  EXPECT_TRUE(small->synchronize().ok());
}

// ---- grad_factor ----

TEST_F(CudaOpTest, GradFactorMatchesTheHostBitForBit) {
  struct Case {
    float sumsq;
    double max_norm, inv_loss_scale;
  };
  const Case cases[] = {
      {4.0f, 1.0, 1.0},              // norm 2 > 1: clipped
      {0.25f, 1.0, 1.0},             // norm 0.5: not clipped
      {1.0e7f, 1.0, 1.0 / 1024},     // loss-scaled, norm 3.09 after unscaling: clipped
      {3.7e3f, 0.0, 0.5},            // max_norm 0: no clipping
      {123.456f, 2.5, 1.0 / 65536},  // scaled, under the limit
      {INFINITY, 1.0, 1.0},          // overflow: NaN
      {NAN, 1.0, 1.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("sumsq " + std::to_string(c.sumsq) + " max_norm " + std::to_string(c.max_norm));
    float host_sumsq = c.sumsq, host_factor = 0;
    ASSERT_TRUE(grad_factor(Tensor::host(&host_factor, Shape{1}), Tensor::host(&host_sumsq, Shape{1}), c.max_norm,
                            c.inv_loss_scale)
                    .ok());
    OwnedTensor sumsq = upload({c.sumsq}, DataType::kFloat32, Shape{1});
    OwnedTensor factor = poisoned(DataType::kFloat32, Shape{1});
    const Status st = grad_factor(factor, sumsq, c.max_norm, c.inv_loss_scale);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const float got = download(factor)[0];
    if (std::isnan(host_factor))
      EXPECT_TRUE(std::isnan(got)) << got;
    else
      EXPECT_EQ(bits_of(got), bits_of(host_factor)) << got << " vs " << host_factor;
  }
}

// ---- AdamW ----

// Segments with gaps (padding), a segment over several chunks and one of exactly a chunk, decay and no decay.
const std::vector<DecaySegment>& segments() {
  static const std::vector<DecaySegment> kSegments = {
      {0, 1000, true}, {1000, 37, false}, {1040, 20000, true}, {21040, 5, false}, {21045, 8192, true},
  };
  return kSegments;
}
constexpr int64_t kNumel = 21045 + 8192 + 3;  // 3 padding elements at the end, 3 after the second segment

// Gradients with a few tiny values (subnormal squares) and a few large ones.
std::vector<float> gradients(std::mt19937_64& rng) {
  std::vector<float> g = random_values(size_t(kNumel), rng, DataType::kFloat32);
  for (size_t i = 0; i < g.size(); i += 97) g[i] = 1e-20f;
  for (size_t i = 5; i < g.size(); i += 1013) g[i] = 3.0e4f;
  return g;
}

std::vector<float> host_values(const Tensor& t) {  // a host tensor's values as f32
  std::vector<float> out(size_t(t.numel()));
  EXPECT_TRUE(convert(t, Tensor::host(out.data(), t.shape)).ok());
  return out;
}

struct AdamWPair {
  FlatAdamW host, dev;
  std::vector<float> host_params;
  OwnedTensor dev_params, host16, dev16;
};

// Fresh optimizers on both devices with the same initial parameters; params16 of `dtype16` (or none: kFloat32).
AdamWPair make_pair(DataType dtype16, std::mt19937_64& rng) {
  AdamWPair p;
  auto host = FlatAdamW::create(segments(), kNumel, MemKind::kHost);
  auto dev = FlatAdamW::create(segments(), kNumel, MemKind::kCudaDevice, 0);
  EXPECT_TRUE(host.ok() && dev.ok()) << host.status().to_string() << dev.status().to_string();
  p.host = std::move(host).value();
  p.dev = std::move(dev).value();
  p.host_params = random_values(size_t(kNumel), rng, DataType::kFloat32);
  p.dev_params = upload(p.host_params, DataType::kFloat32, Shape{kNumel});
  if (dtype16 != DataType::kFloat32) {
    p.host16 = std::move(OwnedTensor::zeros(dtype16, Shape{kNumel})).value();
    p.dev16 = upload(std::vector<float>(size_t(kNumel), 0.0f), dtype16, Shape{kNumel});
  }
  return p;
}

// One step on both; `factor` is the gradient factor both read.
void step_both(AdamWPair& p, const AdamWConfig& config, int64_t step, const std::vector<float>& grads, float factor) {
  std::vector<float> g = grads;
  float host_factor = factor;
  Status st = p.host.step(config, step, Tensor::host(p.host_params.data(), Shape{kNumel}),
                          Tensor::host(g.data(), Shape{kNumel}), p.host16, Tensor::host(&host_factor, Shape{1}));
  ASSERT_TRUE(st.ok()) << st.to_string();
  OwnedTensor dev_grads = upload(grads, DataType::kFloat32, Shape{kNumel});
  OwnedTensor dev_factor = upload({factor}, DataType::kFloat32, Shape{1});
  st = p.dev.step(config, step, p.dev_params, dev_grads, p.dev16, dev_factor);
  ASSERT_TRUE(st.ok()) << st.to_string();
}

void expect_same_state(const AdamWPair& p, const std::string& when) {
  const std::vector<std::pair<std::vector<float>, std::vector<float>>> pairs = {
      {download(p.dev_params), p.host_params},
      {download(p.dev.m()), host_values(p.host.m())},
      {download(p.dev.v()), host_values(p.host.v())},
  };
  const char* names[] = {"params", "m", "v"};
  for (size_t i = 0; i < pairs.size(); ++i)
    EXPECT_TRUE(same_bits(pairs[i].first, pairs[i].second))
        << when << ": " << names[i] << " differs first at " << first_difference(pairs[i].first, pairs[i].second);
  if (p.dev16.tensor().defined()) {
    const std::vector<float> got = download(p.dev16), want = host_values(p.host16);
    EXPECT_TRUE(same_bits(got, want)) << when << ": params16 differs first at " << first_difference(got, want);
  }
}

TEST_F(CudaOpTest, AdamWIsBitIdenticalToTheHost) {
  for (DataType d16 : {DataType::kBFloat16, DataType::kFloat16, DataType::kFloat32 /* no params16 */}) {
    SCOPED_TRACE(std::string("params16 ") + (d16 == DataType::kFloat32 ? "none" : dtype_name(d16)));
    AdamWPair p = make_pair(d16, rng_);
    AdamWConfig config;
    config.beta2 = 0.95f;
    config.weight_decay = 0.1f;
    for (int64_t step = 1; step <= 5; ++step) {
      config.lr = 6e-4f * float(step) / 5.0f;  // a warmup schedule
      const float factor = step == 3 ? 1.0f : 0.37f;
      step_both(p, config, step, gradients(rng_), factor);
      expect_same_state(p, "after step " + std::to_string(step));
    }
  }
}

TEST_F(CudaOpTest, AdamWWithANonFiniteFactorChangesNothing) {
  AdamWPair p = make_pair(DataType::kBFloat16, rng_);
  AdamWConfig config;
  step_both(p, config, 1, gradients(rng_), 0.5f);
  const std::vector<float> params = download(p.dev_params), m = download(p.dev.m()), v = download(p.dev.v()),
                           p16 = download(p.dev16);
  for (float bad : {NAN, INFINITY}) {
    OwnedTensor grads = upload(gradients(rng_), DataType::kFloat32, Shape{kNumel});
    OwnedTensor factor = upload({bad}, DataType::kFloat32, Shape{1});
    const Status st = p.dev.step(config, 2, p.dev_params, grads, p.dev16, factor);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(same_bits(download(p.dev_params), params)) << "params changed with factor " << bad;
    EXPECT_TRUE(same_bits(download(p.dev.m()), m)) << "m changed with factor " << bad;
    EXPECT_TRUE(same_bits(download(p.dev.v()), v)) << "v changed with factor " << bad;
    EXPECT_TRUE(same_bits(download(p.dev16), p16)) << "params16 changed with factor " << bad;
  }
}

}  // namespace
}  // namespace zw::tensor::cuda_test
