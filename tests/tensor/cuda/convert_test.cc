// tests/tensor/cuda/convert_test.cc — convert and fill on a CUDA device against the host's convert and fill
// (kernels/element.h), bit for bit: every pair of f32/bf16/f16, counts 0, 1, odd and large, aligned and unaligned
// views, special values (±0, ±inf, subnormals, overflow to inf, rounding ties) and random bit patterns. NaN only
// has to stay NaN (its payload may differ, as tensor.h allows).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::tensor::cuda_test {
namespace {

// The raw bits of element i of a host tensor of f32, bf16 or f16.
uint32_t raw(const Tensor& t, int64_t i) {
  if (t.dtype == DataType::kFloat32) {
    uint32_t u;
    std::memcpy(&u, t.data<float>() + i, sizeof(u));
    return u;
  }
  return t.data<uint16_t>()[i];
}

bool is_nan_bits(DataType d, uint32_t u) {
  switch (d) {
    case DataType::kFloat32:
      return (u & 0x7fffffffu) > 0x7f800000u;
    case DataType::kBFloat16:
      return (u & 0x7fffu) > 0x7f80u;
    default:
      return (u & 0x7fffu) > 0x7c00u;
  }
}

// A device tensor's bytes, copied to a host tensor of the same dtype.
OwnedTensor to_host(const Tensor& dev) {
  auto host = OwnedTensor::zeros(dev.dtype, dev.shape);
  EXPECT_TRUE(host.ok());
  const Status st = copy(*host, dev);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return std::move(host).value();
}

OwnedTensor to_device(const Tensor& host) {
  auto dev = OwnedTensor::zeros(host.dtype, host.shape, MemKind::kCudaDevice, 0);
  EXPECT_TRUE(dev.ok()) << dev.status().to_string();
  const Status st = copy(*dev, host);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return std::move(dev).value();
}

::testing::AssertionResult same_elements(const Tensor& got, const Tensor& want) {
  if (got.numel() != want.numel() || got.dtype != want.dtype) return ::testing::AssertionFailure() << "shapes differ";
  for (int64_t i = 0; i < got.numel(); ++i) {
    const uint32_t g = raw(got, i), w = raw(want, i);
    if (is_nan_bits(want.dtype, w) ? !is_nan_bits(got.dtype, g) : g != w)
      return ::testing::AssertionFailure() << "element " << i << ": got bits 0x" << std::hex << g << ", want 0x" << w;
  }
  return ::testing::AssertionSuccess();
}

// f32 values that exercise the rounding rules of every target: specials, f32 and f16 subnormals, f16 overflow
// and its boundary, exact ties for bf16 (bit 15 set, lower bits zero) and f16, then random values of all scales.
std::vector<float> interesting_values(size_t n, std::mt19937_64& rng) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, NAN, -NAN};
  v.insert(v.end(), {1e-40f, -1e-42f, 6e-8f, 2.98e-8f, 5.96e-8f, 1e-5f});              // subnormals of f32 and f16
  v.insert(v.end(), {65504.0f, 65519.0f, 65520.0f, -70000.0f, 3e38f, 3.4028235e38f});  // f16 overflow boundary
  v.insert(v.end(), {1.00390625f, 1.01171875f, 1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-23f});  // ties and past
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-140, 120);
  while (v.size() < n) v.push_back(std::ldexp(mant(rng), expo(rng)) * (v.size() % 2 ? -1.0f : 1.0f));
  v.resize(n);
  return v;
}

// The host tensor of dtype d holding `values` (host conversion).
OwnedTensor host_tensor(const std::vector<float>& values, DataType d) {
  const Shape shape{int64_t(values.size())};
  auto t = OwnedTensor::zeros(d, shape);
  EXPECT_TRUE(t.ok());
  EXPECT_TRUE(convert(Tensor::host(const_cast<float*>(values.data()), shape), *t).ok());
  return std::move(t).value();
}

// Device convert of src (viewed from element `offset` on) against the host's convert of the same elements.
void check_convert(const OwnedTensor& host_src, DataType dst_dtype, int64_t offset) {
  const int64_t n = host_src.tensor().numel() - offset;
  OwnedTensor dev_src = to_device(host_src);
  auto src_view = dev_src.tensor().narrow(offset, n);
  ASSERT_TRUE(src_view.ok());
  OwnedTensor dev_dst = poisoned(dst_dtype, Shape{n});
  Status st = convert(*src_view, dev_dst);
  ASSERT_TRUE(st.ok()) << st.to_string();
  auto host_view = host_src.tensor().narrow(offset, n);
  ASSERT_TRUE(host_view.ok());
  auto want = OwnedTensor::zeros(dst_dtype, Shape{n});
  ASSERT_TRUE(want.ok());
  ASSERT_TRUE(convert(*host_view, *want).ok());
  EXPECT_TRUE(same_elements(to_host(dev_dst), *want));
}

TEST_F(CudaOpTest, ConvertMatchesTheHostBitForBit) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1'000'003}}) {
    const std::vector<float> values = interesting_values(size_t(n) + 1, rng_);
    for (DataType s : kDtypes) {
      const OwnedTensor host_src = host_tensor(values, s);
      for (DataType d : kDtypes) {
        SCOPED_TRACE(std::string(dtype_name(s)) + " -> " + dtype_name(d) + " n=" + std::to_string(n));
        check_convert(host_src, d, 1);             // odd offset: scalar path
        if (n > 0) check_convert(host_src, d, 0);  // aligned: vector path
      }
    }
  }
}

// Random 32-bit patterns (every exponent, NaNs with payloads, subnormals) narrowed to bf16 and f16.
TEST_F(CudaOpTest, ConvertNarrowsRandomBitPatternsLikeTheHost) {
  const int64_t n = 1 << 20;
  auto src = OwnedTensor::zeros(DataType::kFloat32, Shape{n});
  ASSERT_TRUE(src.ok());
  std::uniform_int_distribution<uint32_t> bits;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = bits(rng_);
    std::memcpy(src->data<float>() + i, &u, sizeof(u));
  }
  for (DataType d : {DataType::kBFloat16, DataType::kFloat16}) {
    SCOPED_TRACE(dtype_name(d));
    check_convert(*src, d, 0);
  }
}

TEST_F(CudaOpTest, FillMatchesTheHostAndStaysInItsView) {
  const double values[] = {0.0, 1.5, -3.25, NAN, 1e10 /* inf in f16 */, 1e-40 /* f32 subnormal */, 0.1};
  for (DataType d : kDtypes) {
    for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{1'000'003}}) {
      for (double value : values) {
        SCOPED_TRACE(std::string(dtype_name(d)) + " n=" + std::to_string(n) + " value " + std::to_string(value));
        auto want = OwnedTensor::zeros(d, Shape{n});
        ASSERT_TRUE(want.ok());
        ASSERT_TRUE(fill(*want, value).ok());
        // The device tensor is a view one element into a poisoned buffer with one spare element at each end.
        OwnedTensor buf = poisoned(d, Shape{n + 2});
        auto view = buf.tensor().narrow(1, n);
        ASSERT_TRUE(view.ok());
        ASSERT_TRUE(fill(*view, value).ok());
        OwnedTensor got = to_host(buf);
        EXPECT_TRUE(is_nan_bits(d, raw(got, 0)) && is_nan_bits(d, raw(got, n + 1))) << "wrote outside the view";
        auto inner = got.tensor().narrow(1, n);
        ASSERT_TRUE(inner.ok());
        EXPECT_TRUE(same_elements(*inner, *want));
        // And the aligned whole buffer.
        ASSERT_TRUE(fill(buf, value).ok());
        auto want_all = OwnedTensor::zeros(d, Shape{n + 2});
        ASSERT_TRUE(want_all.ok());
        ASSERT_TRUE(fill(*want_all, value).ok());
        EXPECT_TRUE(same_elements(to_host(buf), *want_all));
      }
    }
  }
}

}  // namespace
}  // namespace zw::tensor::cuda_test
