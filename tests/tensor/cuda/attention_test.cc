// tests/tensor/cuda/attention_test.cc — causal attention on CUDA against the CPU reference: zerowire's flash kernels
// (bf16/f16 at head size 64/128), its scalar kernels (f32, other head sizes, unaligned views) and cuDNN's fused
// flash attention (bf16/f16, AttentionKernels::kCudnn), forward (out and the saved log-sum-exp) and backward (dqkv,
// GradInit overwrite and accumulate), stats that one path saves and the other reads, bitwise determinism, and the
// absence of any T×T buffer (cuDNN's workspace is the context's scratch).
//
// Cases: zerowire's kernels: dtype f32/bf16/f16 × head size 8, 32 (scalar kernels), 64, 128 (flash for 16-bit
// dtypes); cuDNN: bf16/f16 × head size 32, 64, 128; each × T = 1, 17, 64, 200, 1024 (single row, partial tiles,
// exact tiles, several blocks with a ragged end, long) with B = 2 and NH = 2..4, but T = 1 only on zerowire's
// kernels: cuDNN 9 builds no backward for a sequence of one (AttentionOnCudnnOnlyRefusesWhatCudnnCannotRun). cuDNN does
// not add to dqkv: its GradInit::kAccumulate must fail on a cuDNN-only context and, on an auto one, run zerowire's
// backward on cuDNN's stats. Builds without cuDNN skip the cuDNN cases, saying so. Inputs are rounded to the dtype
// before both paths see them; outputs are poisoned (NaN) first, so an unwritten element fails. The backward gets the
// GPU forward's own out and stats, as in training. Tolerances (relative L2 norm, cuda_test_util.h):
//  - f32 (scalar kernels, f32 throughout): the CPU's math in another summation order (~1e-6): 1e-5 on out and
//    lse; 3e-5 on dqkv, whose dS = P ∘ (dP − D) subtracts D = rowsum(dO ∘ O) where the CPU subtracts
//    rowsum(P ∘ dP), equal in exact arithmetic but rounded differently before the cancellation.
//  - bf16: out and dqkv are rounded to 8 significant bits (up to 2⁻⁹ ≈ 2e-3 relative per element), and the flash
//    kernels also round P and dS to bf16 for the tensor-core products and take D from the rounded out (each
//    another ~2e-3 per term that partly averages out over the sums): 1e-2.
//  - f16: the same roundings at 11 bits (2⁻¹² ≈ 2.4e-4 each): 3e-3.
//  - lse is f32 on every path (scores and row sums accumulate in f32): 1e-5 for f32; 1e-4 for the 16-bit dtypes,
//    whose flash path works in the exp2 domain (scores times scale·log2 e: a few more f32 roundings on arguments
//    of magnitude up to ~10). The reference lse is computed here in f64 from q and k (the CPU op saves the
//    probabilities instead).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/knobs.h"
#include "tensor/cuda/cudnn/attention_cudnn.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::tensor::cuda_test {
namespace {

struct Tolerances {
  double out;   // out
  double lse;   // stats
  double grad;  // dqkv
};

Tolerances tolerances(DataType dtype) {
  switch (dtype) {
    case DataType::kBFloat16:
      return {1e-2, 1e-4, 1e-2};
    case DataType::kFloat16:
      return {3e-3, 1e-4, 3e-3};
    default:
      return {1e-5, 1e-5, 3e-5};
  }
}

// Host inputs of one case (rounded to the dtype) and the CPU's forward results for them.
struct Reference {
  int64_t B = 0, T = 0, C = 0;
  int NH = 0, hs = 0;
  std::vector<float> qkv, dout;  // inputs
  std::vector<float> out, att;   // CPU forward: out [B,T,C], probabilities [B,NH,T,T]
  std::vector<float> lse;        // f64 log-sum-exp of the scaled causal scores [B,NH,T]
  Shape qkv_shape() const { return Shape{B, T, 3 * C}; }
  Shape out_shape() const { return Shape{B, T, C}; }
};

// lse[b,h,i] = log Σ_{j<=i} exp(q_i·k_j / sqrt(hs)), in f64.
std::vector<float> reference_lse(const Reference& r) {
  std::vector<float> lse(size_t(r.B * r.NH * r.T));
  std::vector<double> s(size_t(r.T));
  const double scale = 1.0 / std::sqrt(double(r.hs));
  for (int64_t b = 0; b < r.B; ++b)
    for (int h = 0; h < r.NH; ++h)
      for (int64_t i = 0; i < r.T; ++i) {
        const float* q = r.qkv.data() + (b * r.T + i) * 3 * r.C + h * r.hs;
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const float* k = r.qkv.data() + (b * r.T + j) * 3 * r.C + r.C + h * r.hs;
          double dot = 0;
          for (int d = 0; d < r.hs; ++d) dot += double(q[d]) * double(k[d]);
          s[size_t(j)] = dot * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[size_t(j)] - mx);
        lse[size_t((b * r.NH + h) * r.T + i)] = float(mx + std::log(sum));
      }
  return lse;
}

Reference make_reference(std::mt19937_64& rng, DataType dtype, int64_t B, int64_t T, int NH, int hs) {
  Reference r;
  r.B = B;
  r.T = T;
  r.NH = NH;
  r.hs = hs;
  r.C = int64_t(NH) * hs;
  // q, k in [-2, 2): scaled scores spread over a few units, so the softmax is far from uniform.
  r.qkv = random_values(size_t(B * T * 3 * r.C), rng, dtype, -2.0f, 2.0f);
  r.dout = random_values(size_t(B * T * r.C), rng, dtype);
  r.out.assign(size_t(B * T * r.C), 0.f);
  r.att.assign(size_t(B * NH * T * T), 0.f);
  const Status s = attention_forward(host_view(r.out, r.out_shape()), host_view(r.att, Shape{B, NH, T, T}),
                                     host_view(r.qkv, r.qkv_shape()), NH);
  EXPECT_TRUE(s.ok()) << s.to_string();
  r.lse = reference_lse(r);
  return r;
}

// The CPU's dqkv for `init` starting from `prior`.
std::vector<float> cpu_backward(Reference& r, const std::vector<float>& prior, GradInit init) {
  std::vector<float> dqkv = prior, scratch(size_t(r.T * r.T));
  const Status s =
      attention_backward(host_view(dqkv, r.qkv_shape()), host_view(scratch, Shape{r.T, r.T}),
                         host_view(r.dout, r.out_shape()), host_view(r.out, r.out_shape()),
                         host_view(r.qkv, r.qkv_shape()), host_view(r.att, Shape{r.B, r.NH, r.T, r.T}), r.NH, init);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return dqkv;
}

// Writes host values (converted to t's dtype) into an existing device tensor.
void store(const Tensor& t, const std::vector<float>& values) {
  auto host = OwnedTensor::zeros(t.dtype, t.shape);
  ASSERT_TRUE(host.ok());
  ASSERT_TRUE(convert(Tensor::host(const_cast<float*>(values.data()), t.shape), *host).ok());
  ASSERT_TRUE(copy(t, *host).ok());
}

// The device tensors of one case (owned elsewhere: buffers or views).
struct DeviceSet {
  Tensor qkv, dout, out, stats, dqkv, scratch;
};

// Device buffers of r's shapes in `dtype` (stats and scratch f32), poisoned with NaN on the current context's stream.
struct PoisonedSet {
  explicit PoisonedSet(const Reference& r, DataType dtype)
      : qkv(poisoned(dtype, r.qkv_shape())),
        dout(poisoned(dtype, r.out_shape())),
        out(poisoned(dtype, r.out_shape())),
        dqkv(poisoned(dtype, r.qkv_shape())),
        stats(poisoned(DataType::kFloat32, attention_stats_shape(MemKind::kCudaDevice, r.B, r.T, r.NH))),
        scratch(poisoned(DataType::kFloat32, attention_scratch_shape(MemKind::kCudaDevice, r.B, r.T, r.NH))) {}
  DeviceSet view() const { return DeviceSet{qkv, dout, out, stats, dqkv, scratch}; }
  OwnedTensor qkv, dout, out, dqkv, stats, scratch;
};

// Forward, then backward in both GradInit modes, on the device (the current context's kernels), each output
// poisoned first, compared with r. On a cuDNN-only context kAccumulate must fail (cuDNN overwrites dqkv) and is then
// run on `fallback` (an auto context: zerowire's backward on cuDNN's stats).
void check_against_cpu(Reference& r, const DeviceSet& t, std::mt19937_64& rng, CudaContext* fallback = nullptr) {
  const DataType dtype = t.qkv.dtype;
  const Tolerances tol = tolerances(dtype);
  store(t.qkv, r.qkv);
  store(t.dout, r.dout);
  ASSERT_TRUE(fill(t.out, NAN).ok());
  ASSERT_TRUE(fill(t.stats, NAN).ok());
  Status s = attention_forward(t.out, t.stats, t.qkv, r.NH);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(close(download(t.out), r.out, tol.out)) << "out";
  EXPECT_TRUE(close(download(t.stats), r.lse, tol.lse)) << "stats (log-sum-exp)";
  for (GradInit init : {GradInit::kOverwrite, GradInit::kAccumulate}) {
    SCOPED_TRACE(init == GradInit::kOverwrite ? "GradInit::kOverwrite" : "GradInit::kAccumulate");
    const size_t n = size_t(r.B * r.T * 3 * r.C);
    const std::vector<float> prior =
        init == GradInit::kAccumulate ? random_values(n, rng, dtype) : std::vector<float>(n, 0.f);
    const std::vector<float> want = cpu_backward(r, prior, init);
    if (init == GradInit::kAccumulate) {
      store(t.dqkv, prior);
    } else {
      ASSERT_TRUE(fill(t.dqkv, NAN).ok());
    }
    ASSERT_TRUE(fill(t.scratch, NAN).ok());
    std::unique_ptr<CudaScope> on_fallback;
    if (init == GradInit::kAccumulate && current_cuda_context()->attention() == AttentionKernels::kCudnn) {
      s = attention_backward(t.dqkv, t.scratch, t.dout, t.out, t.qkv, t.stats, r.NH, init);
      EXPECT_EQ(s.code(), Code::kUnsupported) << s.to_string();
      EXPECT_NE(s.message().find("overwrites dqkv"), std::string::npos) << s.to_string();
      ASSERT_NE(fallback, nullptr);
      ASSERT_TRUE(current_cuda_context()->synchronize().ok());
      on_fallback = std::make_unique<CudaScope>(*fallback);
    }
    s = attention_backward(t.dqkv, t.scratch, t.dout, t.out, t.qkv, t.stats, r.NH, init);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(close(download(t.dqkv), want, tol.grad)) << "dqkv";
  }
}

// A context on device 0 running attention on `kernels`.
std::unique_ptr<CudaContext> context_for(AttentionKernels kernels) {
  CudaContextOptions o;
  o.attention = kernels;
  auto ctx = CudaContext::create(o);
  EXPECT_TRUE(ctx.ok()) << ctx.status().to_string();
  return ctx.ok() ? std::move(ctx).value() : nullptr;
}

const char* kernels_name(AttentionKernels k) { return k == AttentionKernels::kCudnn ? "cudnn" : "zw"; }

struct Case {
  AttentionKernels kernels;
  DataType dtype;
  int hs;
  int64_t T;
};

int heads_for(int hs) { return hs == 8 ? 4 : hs == 128 ? 2 : 3; }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(kernels_name(info.param.kernels)) + "_" + dtype_name(info.param.dtype) + "_hs" +
         std::to_string(info.param.hs) + "_T" + std::to_string(info.param.T);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const int64_t lengths[] = {1, 17, 64, 200, 1024};
  for (DataType dtype : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16})
    for (int hs : {8, 32, 64, 128})
      for (int64_t T : lengths) cases.push_back({AttentionKernels::kZerowire, dtype, hs, T});
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat16})
    for (int hs : {32, 64, 128})
      for (int64_t T : lengths)
        if (T > 1) cases.push_back({AttentionKernels::kCudnn, dtype, hs, T});  // T = 1: see below
  return cases;
}

#define ZW_SKIP_WITHOUT_CUDNN() \
  if (!cuda::dnn::built()) GTEST_SKIP() << "cuDNN attention not built: " << cuda::dnn::describe()

class AttentionTest : public CudaOpTest, public ::testing::WithParamInterface<Case> {};

TEST_P(AttentionTest, MatchesCpuReference) {
  const Case c = GetParam();
  if (c.kernels == AttentionKernels::kCudnn) ZW_SKIP_WITHOUT_CUDNN();
  const std::unique_ptr<CudaContext> ctx = context_for(c.kernels), fallback = context_for(AttentionKernels::kAuto);
  ASSERT_TRUE(ctx && fallback);
  const CudaScope scope(*ctx);
  const int64_t B = 2;
  const int NH = heads_for(c.hs);
  Reference r = make_reference(rng_, c.dtype, B, c.T, NH, c.hs);
  const PoisonedSet t(r, c.dtype);
  check_against_cpu(r, t.view(), rng_, fallback.get());
  ASSERT_TRUE(ctx->synchronize().ok());
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionTest, ::testing::ValuesIn(all_cases()), case_name);

// A view 2 bytes into its buffer is not 16-byte aligned: bf16 at head size 64 must then take the scalar kernels
// (the flash kernels' cp.async would fault) and still agree with the CPU.
TEST_F(CudaOpTest, AttentionOnUnalignedViewsMatchesCpuReference) {
  const int64_t B = 2, T = 80;
  const int NH = 2, hs = 64;
  Reference r = make_reference(rng_, DataType::kBFloat16, B, T, NH, hs);
  std::vector<Buffer> buffers;
  auto view = [&](DataType dtype, Shape shape, size_t offset) {
    auto buf = Buffer::allocate_device(size_t(shape.numel()) * dtype_size(dtype) + 16, 0);
    EXPECT_TRUE(buf.ok()) << buf.status().to_string();
    if (!buf.ok()) return Tensor{};
    auto t = Tensor::view(buf->ref(), offset, dtype, shape);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    buffers.push_back(std::move(buf).value());
    return t.ok() ? t.value() : Tensor{};
  };
  const DeviceSet t{view(DataType::kBFloat16, r.qkv_shape(), 2),
                    view(DataType::kBFloat16, r.out_shape(), 2),
                    view(DataType::kBFloat16, r.out_shape(), 2),
                    view(DataType::kFloat32, attention_stats_shape(MemKind::kCudaDevice, B, T, NH), 0),
                    view(DataType::kBFloat16, r.qkv_shape(), 2),
                    view(DataType::kFloat32, attention_scratch_shape(MemKind::kCudaDevice, B, T, NH), 0)};
  check_against_cpu(r, t, rng_);
}

// The kernels to run a whole-op test on: zerowire's, and cuDNN's when built.
std::vector<AttentionKernels> kernels_built() {
  if (cuda::dnn::built()) return {AttentionKernels::kZerowire, AttentionKernels::kCudnn};
  ADD_FAILURE() << "cuDNN attention not built (" << cuda::dnn::describe() << "): only zerowire's kernels tested";
  return {AttentionKernels::kZerowire};
}

// Two runs on the same inputs give the same bits: no atomics, fixed reduction orders (flash and scalar kernels;
// cuDNN's deterministic backward).
TEST_F(CudaOpTest, AttentionIsBitwiseDeterministic) {
  struct Run {
    AttentionKernels kernels;
    DataType dtype;
    int hs;
  };
  std::vector<Run> cases = {{AttentionKernels::kZerowire, DataType::kBFloat16, 64},
                            {AttentionKernels::kZerowire, DataType::kFloat16, 128},
                            {AttentionKernels::kZerowire, DataType::kFloat32, 32}};
  if (cuda::dnn::built())
    for (int hs : {64, 128}) cases.push_back({AttentionKernels::kCudnn, DataType::kBFloat16, hs});
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(kernels_name(c.kernels)) + " " + dtype_name(c.dtype) + " hs " + std::to_string(c.hs));
    const std::unique_ptr<CudaContext> ctx = context_for(c.kernels);
    ASSERT_TRUE(ctx);
    const CudaScope scope(*ctx);
    const int64_t B = 2, T = 200;
    const int NH = 3;
    const int64_t C = NH * c.hs;
    const OwnedTensor qkv =
        upload(random_values(size_t(B * T * 3 * C), rng_, c.dtype, -2.f, 2.f), c.dtype, Shape{B, T, 3 * C});
    const OwnedTensor dout = upload(random_values(size_t(B * T * C), rng_, c.dtype), c.dtype, Shape{B, T, C});
    const Shape stats_shape = attention_stats_shape(MemKind::kCudaDevice, B, T, NH);
    std::vector<float> outs[2], lses[2], grads[2];
    for (int run = 0; run < 2; ++run) {
      const OwnedTensor out = poisoned(c.dtype, Shape{B, T, C});
      const OwnedTensor stats = poisoned(DataType::kFloat32, stats_shape);
      const OwnedTensor scratch = poisoned(DataType::kFloat32, stats_shape);
      const OwnedTensor dqkv = poisoned(c.dtype, Shape{B, T, 3 * C});
      ASSERT_TRUE(attention_forward(out, stats, qkv, NH).ok());
      ASSERT_TRUE(attention_backward(dqkv, scratch, dout, out, qkv, stats, NH, GradInit::kOverwrite).ok());
      outs[run] = download(out);
      lses[run] = download(stats);
      grads[run] = download(dqkv);
    }
    EXPECT_TRUE(same_bits(outs[0], outs[1])) << "out";
    EXPECT_TRUE(same_bits(lses[0], lses[1])) << "stats";
    EXPECT_TRUE(same_bits(grads[0], grads[1])) << "dqkv";
    ASSERT_TRUE(ctx->synchronize().ok());
  }
}

// Flash attention keeps memory O(T): on CUDA the saved stats and the backward scratch are [B,NH,T] by the op's
// contract (attention_stats_shape / attention_scratch_shape), so no T×T buffer can be passed in, and the ops
// allocate nothing themselves (the device-memory counter and its peak stay put across forward and backward at
// T = 1024, where one T×T f32 matrix per (b, h) would be 4 MiB), on zerowire's kernels and on cuDNN's (whose
// workspace is the context's scratch).
TEST_F(CudaOpTest, AttentionNeedsNoSequenceSquaredMemory) {
  for (AttentionKernels kernels : kernels_built()) {
    SCOPED_TRACE(kernels_name(kernels));
    const std::unique_ptr<CudaContext> ctx = context_for(kernels);
    ASSERT_TRUE(ctx);
    const CudaScope scope(*ctx);
    const int64_t B = 2, T = 1024;
    const int NH = 2, hs = 64;
    const int64_t C = NH * hs;
    const Shape stats_shape = attention_stats_shape(MemKind::kCudaDevice, B, T, NH);
    EXPECT_EQ(stats_shape, (Shape{B, NH, T}));
    EXPECT_EQ(attention_scratch_shape(MemKind::kCudaDevice, B, T, NH), (Shape{B, NH, T}));
    const DataType dtype = DataType::kBFloat16;
    const OwnedTensor qkv = upload(random_values(size_t(B * T * 3 * C), rng_, dtype), dtype, Shape{B, T, 3 * C});
    const OwnedTensor dout = upload(random_values(size_t(B * T * C), rng_, dtype), dtype, Shape{B, T, C});
    const OwnedTensor out = poisoned(dtype, Shape{B, T, C});
    const OwnedTensor dqkv = poisoned(dtype, Shape{B, T, 3 * C});
    const OwnedTensor stats = poisoned(DataType::kFloat32, stats_shape);
    const OwnedTensor scratch = poisoned(DataType::kFloat32, stats_shape);
    ASSERT_TRUE(ctx->synchronize().ok());
    const size_t before = cuda_bytes_in_use();
    cuda_reset_peak();
    ASSERT_TRUE(attention_forward(out, stats, qkv, NH).ok());
    ASSERT_TRUE(attention_backward(dqkv, scratch, dout, out, qkv, stats, NH, GradInit::kOverwrite).ok());
    ASSERT_TRUE(ctx->synchronize().ok());
    EXPECT_EQ(cuda_bytes_in_use(), before);
    EXPECT_EQ(cuda_bytes_peak(), before);
  }
}

// The stats one path saves are what the other's backward reads (natural-log log-sum-exp of the scaled causal
// scores): zerowire's forward then cuDNN's backward, and cuDNN's forward then zerowire's backward, each against the
// CPU (contexts share nothing but the tensors: the first is synchronized before the second runs).
TEST_F(CudaOpTest, AttentionStatsAgreeAcrossKernels) {
  ZW_SKIP_WITHOUT_CUDNN();
  const int64_t B = 2, T = 200;
  const int NH = 3, hs = 64;
  const DataType dtype = DataType::kBFloat16;
  const Tolerances tol = tolerances(dtype);
  Reference r = make_reference(rng_, dtype, B, T, NH, hs);
  const std::vector<float> want =
      cpu_backward(r, std::vector<float>(size_t(B * T * 3 * r.C), 0.f), GradInit::kOverwrite);
  const std::unique_ptr<CudaContext> zw = context_for(AttentionKernels::kZerowire),
                                     dnn = context_for(AttentionKernels::kCudnn);
  ASSERT_TRUE(zw && dnn);
  for (const bool cudnn_first : {false, true}) {
    SCOPED_TRACE(cudnn_first ? "cuDNN forward, zerowire backward" : "zerowire forward, cuDNN backward");
    CudaContext& fwd = cudnn_first ? *dnn : *zw;
    CudaContext& bwd = cudnn_first ? *zw : *dnn;
    const PoisonedSet owned(r, dtype);
    const DeviceSet t = owned.view();
    ASSERT_TRUE(ctx_->synchronize().ok());  // the poison is written on the fixture's stream
    {
      const CudaScope scope(fwd);
      store(t.qkv, r.qkv);
      store(t.dout, r.dout);
      const Status s = attention_forward(t.out, t.stats, t.qkv, NH);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_TRUE(close(download(t.stats), r.lse, tol.lse)) << "stats";
      ASSERT_TRUE(fwd.synchronize().ok());
    }
    const CudaScope scope(bwd);
    const Status s = attention_backward(t.dqkv, t.scratch, t.dout, t.out, t.qkv, t.stats, NH, GradInit::kOverwrite);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(close(download(t.dqkv), want, tol.grad)) << "dqkv";
    ASSERT_TRUE(bwd.synchronize().ok());
  }
}

// A context that allows faster algorithms (ZW_CUDA_DETERMINISTIC=0) runs cuDNN's non-deterministic backward (dQ
// summed with atomics), which must agree with the CPU as closely as the deterministic one; the default context is
// what the knob says.
TEST_F(CudaOpTest, AttentionBackwardAllowedFasterMatchesCpuReference) {
  ZW_SKIP_WITHOUT_CUDNN();
  EXPECT_EQ(ctx_->determinism(),
            knobs().cuda_deterministic == 0 ? Determinism::kAllowFaster : Determinism::kDeterministic);
  CudaContextOptions o;
  o.attention = AttentionKernels::kCudnn;
  o.determinism = Determinism::kAllowFaster;
  auto made = CudaContext::create(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const std::unique_ptr<CudaContext> faster = std::move(made).value(), fallback = context_for(AttentionKernels::kAuto);
  ASSERT_TRUE(fallback);
  EXPECT_EQ(faster->determinism(), Determinism::kAllowFaster);
  const CudaScope scope(*faster);
  for (int hs : {64, 128}) {
    SCOPED_TRACE("hs " + std::to_string(hs));
    Reference r = make_reference(rng_, DataType::kBFloat16, 2, 200, heads_for(hs), hs);
    const PoisonedSet t(r, DataType::kBFloat16);
    check_against_cpu(r, t.view(), rng_, fallback.get());
    ASSERT_TRUE(faster->synchronize().ok());
  }
}

// cuDNN's backward needs a workspace (its f32 dQ accumulator alone is B·NH·T·hs·4 bytes): on a context whose scratch
// is smaller, a cuDNN-only context fails naming the sizes, and attention_prepare grows the scratch so that the same
// calls then run (and agree with the CPU).
TEST_F(CudaOpTest, AttentionPrepareGrowsTheScratchForCudnn) {
  ZW_SKIP_WITHOUT_CUDNN();
  const int64_t B = 2, T = 256;
  const int NH = 2, hs = 64;
  const DataType dtype = DataType::kBFloat16;
  CudaContextOptions o;
  o.attention = AttentionKernels::kCudnn;
  o.scratch_bytes = 4096;
  auto made = CudaContext::create(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const std::unique_ptr<CudaContext> ctx = std::move(made).value(), fallback = context_for(AttentionKernels::kAuto);
  ASSERT_TRUE(fallback);
  const CudaScope scope(*ctx);
  Reference r = make_reference(rng_, dtype, B, T, NH, hs);
  const PoisonedSet owned(r, dtype);
  const DeviceSet t = owned.view();
  Status s = attention_backward(t.dqkv, t.scratch, t.dout, t.out, t.qkv, t.stats, NH, GradInit::kOverwrite);
  EXPECT_EQ(s.code(), Code::kUnsupported) << s.to_string();
  EXPECT_NE(s.message().find("more than the context's scratch (4096"), std::string::npos) << s.to_string();
  s = attention_prepare(MemKind::kCudaDevice, dtype, B, T, NH, r.C);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_GE(ctx->scratch().bytes, size_t(B * NH * T * hs) * sizeof(float));
  check_against_cpu(r, t, rng_, fallback.get());
  ASSERT_TRUE(ctx->synchronize().ok());
}

// A cuDNN-only context fails a call cuDNN does not take, saying why; auto runs it on zerowire's kernels: f32, and a
// backward over a sequence of one (cuDNN 9: "s_q = s_kv = 1 is not supported"), which an auto context runs on
// zerowire's backward from cuDNN's forward.
TEST_F(CudaOpTest, AttentionOnCudnnOnlyRefusesWhatCudnnCannotRun) {
  ZW_SKIP_WITHOUT_CUDNN();
  {
    const int64_t B = 2, T = 1;
    const int NH = 2, hs = 64;
    const DataType dtype = DataType::kBFloat16;
    Reference r = make_reference(rng_, dtype, B, T, NH, hs);
    const PoisonedSet owned(r, dtype);
    const DeviceSet t = owned.view();
    ASSERT_TRUE(ctx_->synchronize().ok());  // the poison is written on the fixture's stream
    const std::unique_ptr<CudaContext> dnn = context_for(AttentionKernels::kCudnn),
                                       automatic = context_for(AttentionKernels::kAuto);
    ASSERT_TRUE(dnn && automatic);
    {
      const CudaScope scope(*dnn);
      store(t.qkv, r.qkv);
      store(t.dout, r.dout);
      Status s = attention_forward(t.out, t.stats, t.qkv, NH);
      ASSERT_TRUE(s.ok()) << s.to_string();
      s = attention_backward(t.dqkv, t.scratch, t.dout, t.out, t.qkv, t.stats, NH, GradInit::kOverwrite);
      EXPECT_EQ(s.code(), Code::kUnsupported) << s.to_string();
      EXPECT_NE(s.message().find("cuDNN cannot build the backward"), std::string::npos) << s.to_string();
      ASSERT_TRUE(dnn->synchronize().ok());
    }
    const CudaScope scope(*automatic);
    const Status s = attention_backward(t.dqkv, t.scratch, t.dout, t.out, t.qkv, t.stats, NH, GradInit::kOverwrite);
    ASSERT_TRUE(s.ok()) << s.to_string();
    const std::vector<float> want =
        cpu_backward(r, std::vector<float>(size_t(B * T * 3 * r.C), 0.f), GradInit::kOverwrite);
    EXPECT_TRUE(close(download(t.dqkv), want, tolerances(dtype).grad)) << "dqkv";
    ASSERT_TRUE(automatic->synchronize().ok());
  }
  const int64_t B = 1, T = 16;
  const int NH = 2, hs = 32;
  const int64_t C = NH * hs;
  const OwnedTensor qkv =
      upload(random_values(size_t(B * T * 3 * C), rng_, DataType::kFloat32), DataType::kFloat32, Shape{B, T, 3 * C});
  const OwnedTensor out = poisoned(DataType::kFloat32, Shape{B, T, C});
  const OwnedTensor stats = poisoned(DataType::kFloat32, attention_stats_shape(MemKind::kCudaDevice, B, T, NH));
  ASSERT_TRUE(ctx_->synchronize().ok());
  {
    const std::unique_ptr<CudaContext> dnn = context_for(AttentionKernels::kCudnn);
    ASSERT_TRUE(dnn);
    const CudaScope scope(*dnn);
    const Status s = attention_forward(out, stats, qkv, NH);
    EXPECT_EQ(s.code(), Code::kUnsupported) << s.to_string();
    EXPECT_NE(s.message().find("takes bf16 and f16, not float"), std::string::npos) << s.to_string();
  }
  const std::unique_ptr<CudaContext> automatic = context_for(AttentionKernels::kAuto);
  ASSERT_TRUE(automatic);
  const CudaScope scope(*automatic);
  const Status s = attention_forward(out, stats, qkv, NH);
  EXPECT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(automatic->synchronize().ok());
}

}  // namespace
}  // namespace zw::tensor::cuda_test
