// tests/tensor/cuda/context_test.cc — the CUDA context and device memory: buffers, copies both ways, the
// device-memory counter, and the errors for a missing context and for tensors on two devices.
#include <gtest/gtest.h>

#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::tensor::cuda_test {
namespace {

TEST_F(CudaOpTest, BuffersAreZeroedAndCountedAndCopiesRoundTrip) {
  const size_t before = cuda_bytes_in_use();
  {
    auto buf = Buffer::allocate_device(1 << 20, 0);
    ASSERT_TRUE(buf.ok()) << buf.status().to_string();
    EXPECT_EQ(cuda_bytes_in_use(), before + (1 << 20));
    EXPECT_GE(cuda_bytes_peak(), before + (1 << 20));
    auto t = Tensor::view(buf->ref(), 0, DataType::kFloat32, Shape{1 << 18});
    ASSERT_TRUE(t.ok());
    std::vector<float> zeros = download(*t);
    for (float x : zeros) ASSERT_EQ(x, 0.0f);
    std::vector<float> v = random_values(1 << 18, rng_, DataType::kFloat32);
    ASSERT_TRUE(copy(*t, Tensor::host(v.data(), Shape{1 << 18})).ok());
    EXPECT_EQ(download(*t), v);
  }
  EXPECT_EQ(cuda_bytes_in_use(), before);
}

TEST(CudaContextErrors, DeviceOpWithoutAContextSaysWhatToDo) {
  auto ctx = CudaContext::create();
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  OwnedTensor a, out;
  {
    CudaScope scope(**ctx);
    a = poisoned(DataType::kBFloat16, Shape{16});
    out = poisoned(DataType::kBFloat16, Shape{16});
  }
  const Status s = gelu_forward(out, a);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("no CUDA context is current"), std::string::npos) << s.to_string();
}

TEST_F(CudaOpTest, HostTensorWhereDeviceMemoryIsExpectedIsNamed) {
  OwnedTensor inp = upload(std::vector<float>(32, 1.0f), DataType::kBFloat16, Shape{4, 8});
  auto host_out = OwnedTensor::zeros(DataType::kBFloat16, Shape{4, 8});
  ASSERT_TRUE(host_out.ok());
  const Status s = gelu_forward(*host_out, inp);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("out is bfloat16"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("one device"), std::string::npos) << s.to_string();
}

TEST_F(CudaOpTest, ContextMustBeOnTheTensorsDevice) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices, " << cuda_device_count() << " visible";
  OwnedTensor a = poisoned(DataType::kFloat32, Shape{8}, 1);
  OwnedTensor out = poisoned(DataType::kFloat32, Shape{8}, 1);
  const Status s = gelu_forward(out, a);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("current context is for device 0"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace zw::tensor::cuda_test
