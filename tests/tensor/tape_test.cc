// tests/tensor/tape_test.cc — the tape replays a composite graph correctly (finite differences through a small
// tied-embedding network in f64), stays allocation-free across steps, and recomputes what the model does not keep
// (layernorm and GELU outputs) to the same bits as the plain ops.
#include "tensor/tape.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "tests/tensor/gradcheck.h"

namespace zw::tensor {
namespace {

using testing::check_gradients;
using testing::random_tensor;
using testing::zeros64;

// A miniature GPT-like graph: every op kind, a tied embedding (wte used twice) and a residual stream (x used
// twice), so the test fails if the tape drops a contribution or replays in the wrong order.
struct MiniNet {
  static constexpr int64_t B = 2, T = 4, C = 6, V = 5, NH = 2;
  std::mt19937_64 rng{7};
  int32_t ids[B * T] = {0, 1, 4, 2, 3, 3, 0, 1};
  int32_t tgt[B * T] = {1, 4, 2, 0, 3, 0, 1, 2};
  OwnedTensor wte = random_tensor(Shape{V, C}, rng), wpe = random_tensor(Shape{T, C}, rng);
  OwnedTensor lw = random_tensor(Shape{C}, rng, 0.5, 1.5), lb = random_tensor(Shape{C}, rng);
  OwnedTensor qw = random_tensor(Shape{3 * C, C}, rng), qb = random_tensor(Shape{3 * C}, rng);
  OwnedTensor dwte = zeros64(Shape{V, C}), dwpe = zeros64(Shape{T, C}), dlw = zeros64(Shape{C});
  OwnedTensor dlb = zeros64(Shape{C}), dqw = zeros64(Shape{3 * C, C}), dqb = zeros64(Shape{3 * C});
  // activations and their gradients
  OwnedTensor x = zeros64(Shape{B, T, C}), dx = zeros64(Shape{B, T, C});
  OwnedTensor ln = zeros64(Shape{B, T, C}), dln = zeros64(Shape{B, T, C});
  OwnedTensor mean = zeros64(Shape{B * T}), rstd = zeros64(Shape{B * T});
  OwnedTensor qkv = zeros64(Shape{B, T, 3 * C}), dqkv = zeros64(Shape{B, T, 3 * C});
  OwnedTensor y = zeros64(Shape{B, T, C}), dy = zeros64(Shape{B, T, C});
  OwnedTensor att = zeros64(attention_stats_shape(MemKind::kHost, B, T, NH));
  OwnedTensor scratch = zeros64(attention_scratch_shape(MemKind::kHost, B, T, NH));
  OwnedTensor g = zeros64(Shape{B, T, C}), dg = zeros64(Shape{B, T, C});
  OwnedTensor res = zeros64(Shape{B, T, C}), dres = zeros64(Shape{B, T, C});
  OwnedTensor logits = zeros64(Shape{B, T, V}), dlogits = zeros64(Shape{B, T, V});
  OwnedTensor probs = zeros64(Shape{B, T, V}), losses = zeros64(Shape{B, T});
  Tape tape{16};

  double forward() {
    tape.clear();
    const Tensor tokens = Tensor::host(ids, Shape{B, T}), targets = Tensor::host(tgt, Shape{B, T});
    EXPECT_TRUE(record::embedding(tape, {x, dx}, tokens, {wte, dwte}, {wpe, dwpe}).ok());
    EXPECT_TRUE(record::layernorm(tape, {ln, dln}, mean, rstd, {x, dx}, {lw, dlw}, {lb, dlb}).ok());
    EXPECT_TRUE(record::linear(tape, {qkv, dqkv}, {ln, dln}, {qw, dqw}, {qb, dqb}).ok());
    EXPECT_TRUE(record::attention(tape, {y, dy}, att, scratch, {qkv, dqkv}, NH).ok());
    EXPECT_TRUE(record::gelu(tape, {g, dg}, {y, dy}).ok());
    EXPECT_TRUE(record::residual(tape, {res, dres}, {x, dx}, {g, dg}).ok());
    EXPECT_TRUE(record::linear(tape, {logits, dlogits}, {res, dres}, {wte, dwte}, Var{}).ok());
    double loss = 0;
    EXPECT_TRUE(record::cross_entropy(tape, losses, probs, {logits, dlogits}, targets, &loss).ok());
    return loss;
  }
  void backward() {
    for (const Tensor& t :
         {dx.tensor(), dln.tensor(), dqkv.tensor(), dy.tensor(), dg.tensor(), dres.tensor(), dlogits.tensor()})
      EXPECT_TRUE(fill(t, 0.0).ok());
    const Status s = tape.backward();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
};

TEST(Tape, CompositeGraphMatchesFiniteDifferences) {
  MiniNet net;
  check_gradients(
      {{"wte", net.wte, net.dwte},
       {"wpe", net.wpe, net.dwpe},
       {"ln.w", net.lw, net.dlw},
       {"ln.b", net.lb, net.dlb},
       {"qkv.w", net.qw, net.dqw},
       {"qkv.b", net.qb, net.dqb}},
      [&] { return net.forward(); }, [&] { net.backward(); });
  EXPECT_EQ(net.tape.size(), 8u);
}

TEST(Tape, ReplayKeepsCapacityAndRecordsInOrder) {
  MiniNet net;
  const size_t capacity = net.tape.capacity();
  for (int step = 0; step < 3; ++step) {
    net.forward();
    net.backward();
  }
  EXPECT_EQ(net.tape.capacity(), capacity);
  ASSERT_EQ(net.tape.size(), 8u);
  EXPECT_EQ(net.tape.entry(0).kind, OpKind::kEmbedding);
  EXPECT_EQ(net.tape.entry(3).kind, OpKind::kAttention);
  EXPECT_EQ(net.tape.entry(7).kind, OpKind::kCrossEntropy);
}

TEST(Tape, MissingOutputGradientIsAnError) {
  MiniNet net;
  net.forward();
  Tape tape;
  ASSERT_TRUE(record::gelu(tape, Var{net.g, Tensor{}}, Var{net.y, net.dy}).ok());
  const Status s = tape.backward();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("gelu"), std::string::npos) << s.to_string();
}

// A transformer block's MLP and second layernorm recorded twice: with the plain ops, and as the model records them
// (layernorm and residual_layernorm with recompute, the fused linear_gelu / gelu_linear pair). The recomputed values'
// buffers are poisoned with NaN after forward, as the next block would overwrite them; backward must recompute them
// and give the plain ops' gradients bit for bit (the CPU pair runs the same arithmetic).
struct MlpNet {
  static constexpr int64_t N = 6, C = 8, H = 32;
  std::mt19937_64 rng{11};
  OwnedTensor x = random_tensor(Shape{N, C}, rng), lw = random_tensor(Shape{C}, rng, 0.5, 1.5);
  OwnedTensor lb = random_tensor(Shape{C}, rng), w1 = random_tensor(Shape{H, C}, rng), b1 = random_tensor(Shape{H}, rng);
  OwnedTensor w2 = random_tensor(Shape{C, H}, rng), b2 = random_tensor(Shape{C}, rng);
  OwnedTensor w3 = random_tensor(Shape{C, C}, rng), dz = random_tensor(Shape{N, C}, rng);

  struct Run {
    OwnedTensor dx = zeros64(Shape{N, C}), dlw = zeros64(Shape{C}), dlb = zeros64(Shape{C});
    OwnedTensor dw1 = zeros64(Shape{H, C}), db1 = zeros64(Shape{H}), dw2 = zeros64(Shape{C, H});
    OwnedTensor db2 = zeros64(Shape{C}), dw3 = zeros64(Shape{C, C});
    OwnedTensor ln = zeros64(Shape{N, C}), dln = zeros64(Shape{N, C}), mean = zeros64(Shape{N}), rstd = zeros64(Shape{N});
    OwnedTensor h = zeros64(Shape{N, H}), dh = zeros64(Shape{N, H}), g = zeros64(Shape{N, H}), dg = zeros64(Shape{N, H});
    OwnedTensor y = zeros64(Shape{N, C}), dy = zeros64(Shape{N, C}), res = zeros64(Shape{N, C});
    OwnedTensor dres = zeros64(Shape{N, C}), mean2 = zeros64(Shape{N}), rstd2 = zeros64(Shape{N});
    OwnedTensor z = zeros64(Shape{N, C}), dzz = zeros64(Shape{N, C}), ln2 = zeros64(Shape{N, C});
    OwnedTensor dln2 = zeros64(Shape{N, C});
    Tape tape{8};
  };

  void run(Run& r, bool fused) {
    const Var xv{x, r.dx}, lwv{lw, r.dlw}, lbv{lb, r.dlb}, w1v{w1, r.dw1}, b1v{b1, r.db1}, w2v{w2, r.dw2};
    const Var b2v{b2, r.db2}, w3v{w3, r.dw3}, ln{r.ln, r.dln}, h{r.h, r.dh}, y{r.y, r.dy};
    Tape& t = r.tape;
    ASSERT_TRUE(record::layernorm(t, ln, r.mean, r.rstd, xv, lwv, lbv, GradInit::kAccumulate, fused).ok());
    if (fused) {
      ASSERT_TRUE(record::linear_gelu(t, Var{r.g, {}}, h, ln, w1v, b1v, GradInit::kOverwrite, true).ok());
      ASSERT_TRUE(record::gelu_linear(t, y, r.g, h, w2v, b2v).ok());
    } else {
      ASSERT_TRUE(record::linear(t, h, ln, w1v, b1v, GradInit::kOverwrite).ok());
      ASSERT_TRUE(record::gelu(t, Var{r.g, r.dg}, h).ok());
      ASSERT_TRUE(record::linear(t, y, Var{r.g, r.dg}, w2v, b2v).ok());
    }
    // res = x + y; ln2 (into the same ln buffer when fused, as the model shares it) feeds one more linear.
    const Var ln2 = fused ? ln : Var{r.ln2, r.dln2};
    ASSERT_TRUE(record::residual_layernorm(t, Var{r.res, r.dres}, ln2, r.mean2, r.rstd2, xv, y, lwv, lbv, fused).ok());
    ASSERT_TRUE(record::linear(t, Var{r.z, r.dzz}, ln2, w3v, Var{}).ok());
    if (fused)  // what later blocks would do to the shared buffers
      for (const Tensor& shared : {r.ln.tensor(), r.g.tensor()})
        for (int64_t i = 0; i < shared.numel(); ++i) shared.data<double>()[i] = NAN;
    ASSERT_TRUE(copy(r.dzz, dz).ok());
    const Status s = t.backward();
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.mem.ptr, b.mem.ptr, a.bytes()) == 0;
}

TEST(Tape, RecomputedLayernormAndGeluPairGiveThePlainOpsGradients) {
  MlpNet net;
  MlpNet::Run plain, fused;
  net.run(plain, false);
  net.run(fused, true);
  EXPECT_TRUE(same_bits(plain.z, fused.z)) << "forward output";
  const std::pair<const char*, std::pair<const OwnedTensor*, const OwnedTensor*>> grads[] = {
      {"dx", {&plain.dx, &fused.dx}},   {"dln.w", {&plain.dlw, &fused.dlw}}, {"dln.b", {&plain.dlb, &fused.dlb}},
      {"dfc.w", {&plain.dw1, &fused.dw1}}, {"dfc.b", {&plain.db1, &fused.db1}}, {"dproj.w", {&plain.dw2, &fused.dw2}},
      {"dproj.b", {&plain.db2, &fused.db2}}, {"dout.w", {&plain.dw3, &fused.dw3}}};
  for (const auto& [name, pair] : grads) EXPECT_TRUE(same_bits(*pair.first, *pair.second)) << name;
  EXPECT_EQ(fused.tape.entry(1).kind, OpKind::kLinearGelu);
  EXPECT_EQ(fused.tape.entry(2).kind, OpKind::kGeluLinear);
}

// A recompute flag on an op that cannot replay its forward is an error naming it, not a silent stale value.
TEST(Tape, RecomputeOfAnOpWithoutReplayIsAnError) {
  MlpNet net;
  MlpNet::Run r;
  Tape tape;
  TapeEntry e{OpKind::kGelu, Var{r.g, r.dg}, {Var{r.h, r.dh}, {}, {}, {}}, {}, 0.0};
  e.recompute = true;
  tape.push(e);
  ASSERT_TRUE(record::linear(tape, Var{r.y, r.dy}, Var{r.g, r.dg}, Var{net.w2, r.dw2}, Var{}).ok());
  ASSERT_TRUE(copy(r.dy, net.dz).ok());
  const Status s = tape.backward();
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_NE(s.message().find("gelu cannot be recomputed"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace zw::tensor
