// tests/tensor/cuda/linear_test.cc — linear_forward / linear_backward on a CUDA device (cuBLASLt, the bias-gradient
// column sums) against the CPU op (OpenBLAS, f32) on the same inputs, rounded to the device dtype first.
//
// Tolerances (‖got − want‖₂ / ‖want‖₂, see cuda_test_util.h):
//  - outputs in the value dtype (out, dinp): f32 1e-5 (cuBLAS and OpenBLAS differ by summation order only, ~1e-7
//    relative over k <= 2304 terms; 100× margin); bf16 5e-3 (rounding the result to 8 significant bits costs up to
//    2⁻⁹ ≈ 2e-3 per element, ~1.1e-3 RMS); f16 1e-3 (11 bits: 2⁻¹² ≈ 2.4e-4 per element, ~1.4e-4 RMS).
//  - f32 parameter gradients (dweight) from bf16/f16 inputs: 1e-4 — the products of 16-bit values are exact in f32,
//    so only the accumulation order (tensor-core f32 accumulation vs OpenBLAS) differs; 1e-5 for f32 inputs.
//  - dbias: 1e-5 for every dtype (f32 sums of the same rounded values, in another order).
// Outputs are poisoned (NaN) before each run; gradients are pre-filled with known values and checked to be added
// to (kAccumulate) or replaced (kOverwrite: pre-filled with NaN, which must not leak through).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::tensor::cuda_test {
namespace {

double param_grad_tol(DataType d) { return d == DataType::kFloat32 ? 1e-5 : 1e-4; }
constexpr double kBiasGradTol = 1e-5;

struct Dims {
  Shape inp;  // [..., C]
  int64_t oc;
  int64_t c() const { return inp.last(); }
  Shape out() const {
    Shape s = inp;
    s.dims[s.rank - 1] = oc;
    return s;
  }
  std::string name() const { return "inp " + inp.to_string() + " oc " + std::to_string(oc); }
};

const std::vector<Dims>& shapes() {
  static const std::vector<Dims> kShapes = {
      {Shape{7, 24}, 40},           // odd row count, small
      {Shape{2, 1024, 768}, 2304},  // GPT-2 small's qkv projection, N = 2048 rows
  };
  return kShapes;
}

class LinearTest : public CudaDtypeTest {};

TEST_P(LinearTest, ForwardMatchesCpuWithAndWithoutBias) {
  const DataType d = GetParam();
  for (const Dims& s : shapes()) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(s.name() + (with_bias ? " with bias" : " without bias"));
      std::vector<float> inp = random_values(s.inp.numel(), rng_, d);
      std::vector<float> w = random_values(s.oc * s.c(), rng_, d);
      std::vector<float> b = random_values(s.oc, rng_, d);
      OwnedTensor dev_inp = upload(inp, d, s.inp);
      OwnedTensor dev_w = upload(w, d, Shape{s.oc, s.c()});
      OwnedTensor dev_b = upload(b, d, Shape{s.oc});
      OwnedTensor dev_out = poisoned(d, s.out());
      Status st = linear_forward(dev_out, dev_inp, dev_w, with_bias ? dev_b.tensor() : Tensor());
      ASSERT_TRUE(st.ok()) << st.to_string();
      const std::vector<float> got = download(dev_out);

      std::vector<float> want(size_t(s.out().numel()));
      st = linear_forward(host_view(want, s.out()), host_view(inp, s.inp), host_view(w, Shape{s.oc, s.c()}),
                          with_bias ? host_view(b, Shape{s.oc}) : Tensor());
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_TRUE(close(got, want, out_tol(d)));
    }
  }
}

// One backward on device and host from the same inputs and pre-filled gradients; compares all three gradients.
void check_backward(DataType d, const Dims& s, GradInit init, std::mt19937_64& rng) {
  const Shape w_shape{s.oc, s.c()};
  std::vector<float> inp = random_values(s.inp.numel(), rng, d);
  std::vector<float> w = random_values(w_shape.numel(), rng, d);
  std::vector<float> dout = random_values(s.out().numel(), rng, d);
  // Known previous contents: random for kAccumulate (they must be added to), NaN for kOverwrite's dinp (it must
  // be replaced without being read).
  std::vector<float> dinp0 = init == GradInit::kOverwrite ? std::vector<float>(size_t(s.inp.numel()), NAN)
                                                          : random_values(s.inp.numel(), rng, d);
  std::vector<float> dw0 = random_values(w_shape.numel(), rng, DataType::kFloat32);
  std::vector<float> db0 = random_values(s.oc, rng, DataType::kFloat32);

  OwnedTensor dev_inp = upload(inp, d, s.inp), dev_w = upload(w, d, w_shape), dev_dout = upload(dout, d, s.out());
  OwnedTensor dev_dinp = upload(dinp0, d, s.inp);
  OwnedTensor dev_dw = upload(dw0, DataType::kFloat32, w_shape);
  OwnedTensor dev_db = upload(db0, DataType::kFloat32, Shape{s.oc});
  Status st = linear_backward(dev_dinp, dev_dw, dev_db, dev_dout, dev_inp, dev_w, init);
  ASSERT_TRUE(st.ok()) << st.to_string();

  std::vector<float> want_dinp = init == GradInit::kOverwrite ? std::vector<float>(dinp0.size(), 0.0f) : dinp0;
  std::vector<float> want_dw = dw0, want_db = db0;
  st = linear_backward(host_view(want_dinp, s.inp), host_view(want_dw, w_shape), host_view(want_db, Shape{s.oc}),
                       host_view(dout, s.out()), host_view(inp, s.inp), host_view(w, w_shape), init);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(close(download(dev_dinp), want_dinp, out_tol(d))) << "dinp";
  EXPECT_TRUE(close(download(dev_dw), want_dw, param_grad_tol(d))) << "dweight";
  EXPECT_TRUE(close(download(dev_db), want_db, kBiasGradTol)) << "dbias";
}

TEST_P(LinearTest, BackwardAccumulatesIntoPrefilledGradients) {
  for (const Dims& s : shapes()) {
    SCOPED_TRACE(s.name());
    check_backward(GetParam(), s, GradInit::kAccumulate, rng_);
  }
}

TEST_P(LinearTest, BackwardOverwriteReplacesDinpAndStillAccumulatesParams) {
  for (const Dims& s : shapes()) {
    SCOPED_TRACE(s.name());
    check_backward(GetParam(), s, GradInit::kOverwrite, rng_);
  }
}

// Odd extents everywhere (leading dims not multiples of 8) and inputs viewed at an odd element offset, so the
// operands are only 2- or 4-byte aligned: cuBLASLt must be asked for algorithms that accept that.
TEST_P(LinearTest, OddShapesAndUnalignedViews) {
  const DataType d = GetParam();
  const int64_t n = 5, c = 13, oc = 9;
  std::vector<float> inp = random_values(n * c + 1, rng_, d);
  std::vector<float> w = random_values(oc * c + 1, rng_, d);
  std::vector<float> b = random_values(oc, rng_, d);
  std::vector<float> dout = random_values(n * oc + 1, rng_, d);
  OwnedTensor dev_inp_buf = upload(inp, d, Shape{int64_t(inp.size())});
  OwnedTensor dev_w_buf = upload(w, d, Shape{int64_t(w.size())});
  OwnedTensor dev_dout_buf = upload(dout, d, Shape{int64_t(dout.size())});
  OwnedTensor dev_b = upload(b, d, Shape{oc});
  auto view = [&](const Tensor& buf, int64_t count, Shape shape) {
    auto t = buf.narrow(1, count);  // one element in: 2-byte (16-bit) or 4-byte (f32) alignment
    EXPECT_TRUE(t.ok());
    auto r = t->reshape(shape);
    EXPECT_TRUE(r.ok());
    return *r;
  };
  const Tensor x = view(dev_inp_buf, n * c, Shape{n, c});
  const Tensor wt = view(dev_w_buf, oc * c, Shape{oc, c});
  const Tensor dy = view(dev_dout_buf, n * oc, Shape{n, oc});
  std::vector<float> hx(inp.begin() + 1, inp.end()), hw(w.begin() + 1, w.end()), hdy(dout.begin() + 1, dout.end());

  OwnedTensor out = poisoned(d, Shape{n, oc});
  Status st = linear_forward(out, x, wt, dev_b);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<float> want(size_t(n * oc));
  ASSERT_TRUE(linear_forward(host_view(want, Shape{n, oc}), host_view(hx, Shape{n, c}), host_view(hw, Shape{oc, c}),
                             host_view(b, Shape{oc}))
                  .ok());
  EXPECT_TRUE(close(download(out), want, out_tol(d))) << "out";

  OwnedTensor dinp = poisoned(d, Shape{n, c});
  OwnedTensor dw = upload(std::vector<float>(size_t(oc * c), 0.0f), DataType::kFloat32, Shape{oc, c});
  OwnedTensor db = upload(std::vector<float>(size_t(oc), 0.0f), DataType::kFloat32, Shape{oc});
  st = linear_backward(dinp, dw, db, dy, x, wt, GradInit::kOverwrite);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<float> want_dinp(size_t(n * c)), want_dw(size_t(oc * c), 0.0f), want_db(size_t(oc), 0.0f);
  ASSERT_TRUE(linear_backward(host_view(want_dinp, Shape{n, c}), host_view(want_dw, Shape{oc, c}),
                              host_view(want_db, Shape{oc}), host_view(hdy, Shape{n, oc}), host_view(hx, Shape{n, c}),
                              host_view(hw, Shape{oc, c}), GradInit::kOverwrite)
                  .ok());
  EXPECT_TRUE(close(download(dinp), want_dinp, out_tol(d))) << "dinp";
  EXPECT_TRUE(close(download(dw), want_dw, param_grad_tol(d))) << "dweight";
  EXPECT_TRUE(close(download(db), want_db, kBiasGradTol)) << "dbias";
}

// Undefined gradients are skipped: only dweight is asked for, and nothing else is touched.
TEST_P(LinearTest, BackwardSkipsUndefinedGradients) {
  const DataType d = GetParam();
  const Dims s{Shape{7, 24}, 40};
  std::vector<float> inp = random_values(s.inp.numel(), rng_, d), w = random_values(s.oc * s.c(), rng_, d);
  std::vector<float> dout = random_values(s.out().numel(), rng_, d);
  OwnedTensor dev_inp = upload(inp, d, s.inp), dev_w = upload(w, d, Shape{s.oc, s.c()});
  OwnedTensor dev_dout = upload(dout, d, s.out());
  OwnedTensor dev_dw = upload(std::vector<float>(size_t(s.oc * s.c()), 0.5f), DataType::kFloat32, Shape{s.oc, s.c()});
  Status st = linear_backward(Tensor(), dev_dw, Tensor(), dev_dout, dev_inp, dev_w, GradInit::kOverwrite);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<float> want(size_t(s.oc * s.c()), 0.5f);
  ASSERT_TRUE(linear_backward(Tensor(), host_view(want, Shape{s.oc, s.c()}), Tensor(), host_view(dout, s.out()),
                              host_view(inp, s.inp), host_view(w, Shape{s.oc, s.c()}))
                  .ok());
  EXPECT_TRUE(close(download(dev_dw), want, param_grad_tol(d)));
}

// The same call twice gives the same bits (fixed algorithm per plan, no atomics in the bias gradient).
TEST_P(LinearTest, ForwardAndBackwardAreDeterministic) {
  const DataType d = GetParam();
  const Dims& s = shapes()[1];
  const Shape w_shape{s.oc, s.c()};
  OwnedTensor inp = upload(random_values(s.inp.numel(), rng_, d), d, s.inp);
  OwnedTensor w = upload(random_values(w_shape.numel(), rng_, d), d, w_shape);
  OwnedTensor b = upload(random_values(s.oc, rng_, d), d, Shape{s.oc});
  OwnedTensor dout = upload(random_values(s.out().numel(), rng_, d), d, s.out());
  std::vector<std::vector<float>> runs[2];
  for (auto& run : runs) {
    OwnedTensor out = poisoned(d, s.out()), dinp = poisoned(d, s.inp);
    OwnedTensor dw = upload(std::vector<float>(size_t(w_shape.numel()), 0.25f), DataType::kFloat32, w_shape);
    OwnedTensor db = upload(std::vector<float>(size_t(s.oc), 0.25f), DataType::kFloat32, Shape{s.oc});
    ASSERT_TRUE(linear_forward(out, inp, w, b).ok());
    ASSERT_TRUE(linear_backward(dinp, dw, db, dout, inp, w, GradInit::kOverwrite).ok());
    run = {download(out), download(dinp), download(dw), download(db)};
  }
  const char* names[] = {"out", "dinp", "dweight", "dbias"};
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(same_bits(runs[0][i], runs[1][i])) << names[i] << " differs between runs";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearTest, ::testing::ValuesIn(kDtypes), dtype_param_name);

// The bias gradient's partial sums live in the context scratch; too little scratch is a clear error, not a crash.
TEST_F(CudaOpTest, LinearBiasGradientNamesTheScratchItNeeds) {
  const std::unique_ptr<CudaContext> small = context_with_scratch(16);
  ASSERT_TRUE(small);
  CudaScope scope(*small);
  const int64_t n = 4096, c = 8, oc = 1024;
  OwnedTensor inp = upload(std::vector<float>(size_t(n * c), 1.0f), DataType::kFloat32, Shape{n, c});
  OwnedTensor w = upload(std::vector<float>(size_t(oc * c), 1.0f), DataType::kFloat32, Shape{oc, c});
  OwnedTensor dout = upload(std::vector<float>(size_t(n * oc), 1.0f), DataType::kFloat32, Shape{n, oc});
  OwnedTensor db = upload(std::vector<float>(size_t(oc), 0.0f), DataType::kFloat32, Shape{oc});
  const Status st = linear_backward(Tensor(), Tensor(), db, dout, inp, w);
  EXPECT_EQ(st.code(), Code::kOutOfMemory) << st.to_string();
  EXPECT_NE(st.message().find("bytes of context scratch"), std::string::npos) << st.to_string();
  EXPECT_TRUE(small->synchronize().ok());
}

}  // namespace
}  // namespace zw::tensor::cuda_test
