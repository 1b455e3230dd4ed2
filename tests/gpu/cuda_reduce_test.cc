// tests/gpu/cuda_reduce_test.cc — the CUDA reduce/scale kernels against the host kernels, bit for bit.
//
// Every dtype x op (and scale factor) runs on random bit patterns plus injected special values (±0, ±inf, NaN,
// subnormals, extremes) at counts 0, 1, 7, 4099 and 1M+3, out-of-place, in-place (dst == a) and misaligned by one
// element (the scalar path). Results must equal zw::kernels::reduce / scale exactly; the only freedom is a NaN's
// sign and payload, which both contracts leave unspecified. Skips with "no CUDA device" where no GPU is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/reduce_cuda.h"
#include "kernels/reduce.h"

namespace zw::kernels::cuda {
namespace {

const size_t kCounts[] = {0, 1, 7, 4099, (size_t{1} << 20) + 3};

bool have_cuda_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

bool is_float(DataType dt) {
  return dt == DataType::kFloat32 || dt == DataType::kFloat16 || dt == DataType::kBFloat16 || dt == DataType::kFloat64;
}

bool is_nan(DataType dt, const uint8_t* p) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, dtype_size(dt));
  switch (dt) {
    case DataType::kFloat32:
      return (bits & 0x7fffffffu) > 0x7f800000u;
    case DataType::kFloat16:
      return (bits & 0x7fffu) > 0x7c00u;
    case DataType::kBFloat16:
      return (bits & 0x7fffu) > 0x7f80u;
    case DataType::kFloat64:
      return (bits & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default:
      return false;
  }
}

// Special bit patterns per float type, little-endian, stored at the start of element slots.
std::vector<uint64_t> specials(DataType dt) {
  switch (dt) {
    case DataType::kFloat32:
      return {0x0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
              0x1, 0x80000001, 0x7f7fffff, 0x00800000, 0x3f800000, 0xbf800000};
    case DataType::kFloat16:
      return {0x0, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x1, 0x8001, 0x7bff, 0x0400, 0x3c00, 0xbc00, 0x03ff};
    case DataType::kBFloat16:
      return {0x0, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x1, 0x8001, 0x7f7f, 0x0080, 0x3f80, 0xbf80, 0x007f};
    case DataType::kFloat64:
      return {0x0, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000000ull,
              0x1, 0x7fefffffffffffffull, 0x3ff0000000000000ull};
    default:
      return {0, 1, 0xff, 0x80, 0x7f};
  }
}

std::vector<uint8_t> random_input(DataType dt, size_t count, uint64_t seed) {
  const size_t es = dtype_size(dt);
  std::vector<uint8_t> v(count * es);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < v.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(v.data() + i, &r, std::min<size_t>(8, v.size() - i));
  }
  const std::vector<uint64_t> sp = specials(dt);
  for (size_t i = 0; i < count; i += 5) {
    const uint64_t s = sp[rng() % sp.size()];
    std::memcpy(v.data() + i * es, &s, es);
  }
  return v;
}

// Element index of the first difference (NaN == NaN), or -1.
int64_t first_mismatch(DataType dt, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  const size_t es = dtype_size(dt);
  for (size_t i = 0; i < want.size() / es; ++i) {
    const uint8_t* g = got.data() + i * es;
    const uint8_t* w = want.data() + i * es;
    if (std::memcmp(g, w, es) == 0) continue;
    if (is_float(dt) && is_nan(dt, g) && is_nan(dt, w)) continue;
    return static_cast<int64_t>(i);
  }
  return -1;
}

// Device buffers of `bytes` each plus 16 bytes of slack for the misaligned variant.
struct DeviceBuffers {
  explicit DeviceBuffers(size_t bytes) {
    for (auto& p : ptr) EXPECT_EQ(cudaMalloc(&p, bytes + 16), cudaSuccess);
  }
  ~DeviceBuffers() {
    for (auto* p : ptr) cudaFree(p);
  }
  uint8_t* at(int i, size_t offset) { return static_cast<uint8_t*>(ptr[i]) + offset; }
  void* ptr[3] = {};
};

enum class Placement { kOutOfPlace, kInPlace, kMisaligned };
const char* placement_name(Placement p) {
  return p == Placement::kOutOfPlace ? "out-of-place" : p == Placement::kInPlace ? "in-place" : "misaligned";
}

void check_reduce(DataType dt, ReduceOp op, size_t count, Placement pl) {
  const size_t es = dtype_size(dt), bytes = count * es;
  const auto a = random_input(dt, count, 1000 + count), b = random_input(dt, count, 2000 + count);
  std::vector<uint8_t> want(bytes), got(bytes);
  zw::kernels::reduce(dt, op, want.data(), a.data(), b.data(), count);
  DeviceBuffers buf(bytes);
  const size_t off = pl == Placement::kMisaligned ? es : 0;
  uint8_t *da = buf.at(0, off), *db = buf.at(1, off), *dd = pl == Placement::kInPlace ? da : buf.at(2, off);
  ASSERT_EQ(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  Status st = launch_reduce(dt, op, count ? dd : nullptr, count ? da : nullptr, count ? db : nullptr, count, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), dd, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  const int64_t bad = first_mismatch(dt, got, want);
  EXPECT_EQ(bad, -1) << dtype_name(dt) << " " << reduce_op_name(op) << " count " << count << " " << placement_name(pl)
                     << ": first difference at element " << bad;
}

class CudaReduceTest : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaReduceTest, MatchesHostBitForBit) {
  const auto [dt, op] = GetParam();
  for (size_t count : kCounts)
    for (Placement pl : {Placement::kOutOfPlace, Placement::kInPlace, Placement::kMisaligned})
      check_reduce(dt, op, count, pl);
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<DataType, ReduceOp>>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_" + reduce_op_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, CudaReduceTest,
                         ::testing::Combine(::testing::Values(DataType::kFloat32, DataType::kFloat16,
                                                              DataType::kBFloat16, DataType::kFloat64, DataType::kInt32,
                                                              DataType::kInt64, DataType::kUInt8),
                                            ::testing::Values(ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                                              ReduceOp::kMax, ReduceOp::kAvg)),
                         param_name);

void check_scale(DataType dt, size_t count, double factor, Placement pl) {
  const size_t es = dtype_size(dt), bytes = count * es;
  const auto src = random_input(dt, count, 3000 + count);
  std::vector<uint8_t> want(bytes), got(bytes);
  zw::kernels::scale(dt, want.data(), src.data(), count, factor);
  DeviceBuffers buf(bytes);
  const size_t off = pl == Placement::kMisaligned ? es : 0;
  uint8_t *ds = buf.at(0, off), *dd = pl == Placement::kInPlace ? ds : buf.at(1, off);
  ASSERT_EQ(cudaMemcpy(ds, src.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  Status st = launch_scale(dt, count ? dd : nullptr, count ? ds : nullptr, count, factor, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), dd, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  const int64_t bad = first_mismatch(dt, got, want);
  EXPECT_EQ(bad, -1) << dtype_name(dt) << " scale " << factor << " count " << count << " " << placement_name(pl)
                     << ": first difference at element " << bad;
}

class CudaScaleTest : public ::testing::TestWithParam<DataType> {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaScaleTest, MatchesHostBitForBit) {
  const DataType dt = GetParam();
  const bool fp = is_float(dt);
  for (double factor : {1.0, 0.5, 1.0 / 3.0, 3.0, 1e-3, 0.125})
    for (size_t count : kCounts)
      for (Placement pl : {Placement::kOutOfPlace, Placement::kInPlace, Placement::kMisaligned})
        if (fp || factor == 1.0) check_scale(dt, count, factor, pl);
}

TEST_P(CudaScaleTest, IntegerFactorOtherThanOneIsUnsupported) {
  const DataType dt = GetParam();
  if (is_float(dt)) GTEST_SKIP() << "floating type";
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  EXPECT_EQ(launch_scale(dt, p, p, 4, 2.0, nullptr).code(), Code::kUnsupported);
  cudaFree(p);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaScaleTest,
                         ::testing::Values(DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                                           DataType::kFloat64, DataType::kInt32, DataType::kInt64, DataType::kUInt8),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(dtype_name(info.param));
                         });

TEST(CudaReduceApi, ZeroCountLaunchesNothingAndNullWithCountFails) {
  EXPECT_TRUE(launch_reduce(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0, nullptr).ok());
  EXPECT_EQ(launch_reduce(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr, nullptr, 4, nullptr).code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace zw::kernels::cuda
