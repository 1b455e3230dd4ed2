// tests/tensor/cuda/cuda_test_util.h — what the CUDA op tests share: a context per test, tensors uploaded from and
// downloaded to host f32 vectors in any dtype, inputs rounded to the dtype both paths see, and the comparison.
//
// The comparison is ‖got − want‖₂ / ‖want‖₂ (plus the worst element, for the message) against a tolerance that
// each test states and justifies by its dtype: f32 results differ from the CPU reference by summation order only
// (~1e-6 relative); bf16 outputs carry 8 significant bits, so rounding the result alone costs up to 2⁻⁹ ≈ 2e-3
// relative per element; f16 carries 11 bits (≈ 5e-4).
// The tests live in this namespace (zw::tensor::cuda_test, as Gloo's tests share gloo::test with base_test.h), so
// they use these helpers unqualified. Per-dtype suites derive from CudaDtypeTest and are instantiated over kDtypes.
// Main (main.cc) exits 77 (ctest: skipped) when no CUDA device is visible.
// Non-goals: performance measurement.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/element.h"
#include "tensor/cuda_context.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace zw::tensor::cuda_test {

// The dtypes the CUDA ops compute in, in the order the per-dtype suites run them.
inline constexpr DataType kDtypes[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16};

// The tolerance a test states for each dtype.
inline double by_dtype(DataType d, double f32, double bf16, double f16) {
  return d == DataType::kFloat32 ? f32 : d == DataType::kBFloat16 ? bf16 : f16;
}

// The output tolerance of most ops: f32 results differ from the CPU by summation order and expf only (1e-5); a
// 16-bit output adds one rounding to the dtype (bf16 5e-3, f16 1e-3; see above).
inline double out_tol(DataType d) { return by_dtype(d, 1e-5, 5e-3, 1e-3); }

// x rounded to what `dtype` can hold (round to nearest-even), back in f32.
inline float round_to(DataType dtype, float x) {
  switch (dtype) {
    case DataType::kBFloat16:
      return kernels::bf16_to_f32(kernels::f32_to_bf16(x));
    case DataType::kFloat16:
      return kernels::f16_to_f32(kernels::f32_to_f16(x));
    default:
      return x;
  }
}

// n values uniform in [lo, hi), already rounded to `dtype`.
inline std::vector<float> random_values(size_t n, std::mt19937_64& rng, DataType dtype, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(dtype, dist(rng));
  return v;
}

// A device tensor of `dtype` holding `values` (converted with round to nearest-even).
inline OwnedTensor upload(const std::vector<float>& values, DataType dtype, Shape shape, int device = 0) {
  EXPECT_EQ(int64_t(values.size()), shape.numel());
  auto host = OwnedTensor::zeros(dtype, shape);
  EXPECT_TRUE(host.ok());
  Tensor f32 = Tensor::host(const_cast<float*>(values.data()), shape);
  EXPECT_TRUE(convert(f32, *host).ok());
  auto dev = OwnedTensor::zeros(dtype, shape, MemKind::kCudaDevice, device);
  EXPECT_TRUE(dev.ok()) << dev.status().to_string();
  EXPECT_TRUE(copy(*dev, *host).ok());
  return std::move(dev).value();
}

inline OwnedTensor upload_ids(const std::vector<int32_t>& ids, Shape shape, int device = 0) {
  auto dev = OwnedTensor::zeros(DataType::kInt32, shape, MemKind::kCudaDevice, device);
  EXPECT_TRUE(dev.ok()) << dev.status().to_string();
  EXPECT_TRUE(copy(*dev, Tensor::host(const_cast<int32_t*>(ids.data()), shape)).ok());
  return std::move(dev).value();
}

// A device tensor of `dtype` filled with a poison value (NaN for floats) so unwritten outputs show.
inline OwnedTensor poisoned(DataType dtype, Shape shape, int device = 0) {
  auto dev = OwnedTensor::zeros(dtype, shape, MemKind::kCudaDevice, device);
  EXPECT_TRUE(dev.ok()) << dev.status().to_string();
  EXPECT_TRUE(fill(*dev, NAN).ok());
  return std::move(dev).value();
}

// The tensor's values as f32 on the host (waits for the current stream).
inline std::vector<float> download(const Tensor& t) {
  auto host = OwnedTensor::zeros(t.dtype, t.shape);
  EXPECT_TRUE(host.ok());
  Status s = copy(*host, t);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<float> out(size_t(t.numel()));
  EXPECT_TRUE(convert(*host, Tensor::host(out.data(), t.shape)).ok());
  return out;
}

// A host f32 tensor viewing a vector (for the CPU reference).
inline Tensor host_view(std::vector<float>& v, Shape shape) { return Tensor::host(v.data(), shape); }

struct Diff {
  double rel = 0;         // ‖got − want‖ / ‖want‖ (absolute norm when want is all zero)
  double max_abs = 0;     // worst element
  size_t worst = 0;       // its index
  size_t non_finite = 0;  // NaN/inf in got (poison left unwritten, or overflow)
};

inline Diff diff(const std::vector<float>& got, const std::vector<float>& want) {
  Diff d;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++d.non_finite;
      continue;
    }
    const double e = double(got[i]) - double(want[i]);
    num += e * e;
    den += double(want[i]) * double(want[i]);
    if (std::fabs(e) > d.max_abs) {
      d.max_abs = std::fabs(e);
      d.worst = i;
    }
  }
  d.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return d;
}

// Whether got matches want within relative tolerance `rtol` (see the header comment), with no NaN/inf; use as
// EXPECT_TRUE(close(got, want, 3e-3)) << "what".
inline ::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  const Diff d = diff(got, want);
  if (d.non_finite != 0)
    return ::testing::AssertionFailure() << d.non_finite << " non-finite elements (unwritten output?)";
  if (!(d.rel <= rtol))
    return ::testing::AssertionFailure() << "relative error " << d.rel << " > " << rtol << "; worst element " << d.worst
                                         << " got " << got[d.worst] << " want " << want[d.worst];
  return ::testing::AssertionSuccess() << "relative error " << d.rel;
}

// Whether a and b hold the same bits (NaNs included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A CUDA context on device 0, current for the test's lifetime.
class CudaOpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = CudaContext::create();
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_ = std::move(ctx).value();
    scope_ = std::make_unique<CudaScope>(*ctx_);
  }
  void TearDown() override {
    if (ctx_) {
      const Status s = ctx_->synchronize();
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    scope_.reset();
    ctx_.reset();
  }
  std::unique_ptr<CudaContext> ctx_;
  std::unique_ptr<CudaScope> scope_;
  std::mt19937_64 rng_{20261201};
};

// A context whose scratch holds only `bytes` (for the ops' too-little-scratch errors); the caller makes it current.
inline std::unique_ptr<CudaContext> context_with_scratch(size_t bytes) {
  CudaContextOptions options;
  options.scratch_bytes = bytes;
  auto ctx = CudaContext::create(options);
  EXPECT_TRUE(ctx.ok()) << ctx.status().to_string();
  return ctx.ok() ? std::move(ctx).value() : nullptr;
}

// A CudaOpTest run once per dtype (GetParam()). A suite derives its own fixture from it and instantiates it with
//   INSTANTIATE_TEST_SUITE_P(Dtypes, Suite, ::testing::ValuesIn(kDtypes), dtype_param_name);
class CudaDtypeTest : public CudaOpTest, public ::testing::WithParamInterface<DataType> {};

// The test name suffix of a dtype parameter (dtype_name: "float", "bfloat16", "half").
inline std::string dtype_param_name(const ::testing::TestParamInfo<DataType>& info) { return dtype_name(info.param); }

}  // namespace zw::tensor::cuda_test
