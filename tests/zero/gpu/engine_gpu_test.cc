// tests/zero/gpu/engine_gpu_test.cc — the ZeRO-3 engine's device path against its host path, ranks as threads on one
// GPU (each with its own CudaContext and so its own compute stream; the engine adds its communication stream).
//
// The engine is driven directly, without a model: every micro step fetches the units forward (values only) and
// backward (with gradients), writes a deterministic gradient per (rank, micro step, unit, element) into the buffer
// fetch returned (host: memcpy; device: a copy queued on the compute stream, as the model's kernels would be), and
// releases the unit. Two optimizer steps of two micro steps each, then every unit is gathered (gather_unit).
// Buckets of 500 elements per rank: full buckets (reduce-scattered in place) and partial ones (compacted) both occur.
// With 2 ranks a sum has one rounding whatever the order, and the offloaded optimizer is the same CPU Adam on both
// paths, so the device engine must give the host engine's bits: the f32 gradient shard before each step and every
// gathered value after (bf16 and fp16, with and without offload_param). The GPU optimizer (tensor::FlatAdamW) is
// compared within one 16-bit rounding; it keeps no 16-bit copy of the shard (its gathers round the f32 master), so
// its parameter shard is 4 bytes an element where the host engine's is 6. Also: an inf gradient on one rank skips
// the step on both (the device overflow test) and halves the loss scale; the timeline's spans are device-timed.
// EngineDevice::pack matches the host's rounding at every alignment. Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/element.h"
#include "tensor/cuda_context.h"
#include "tensor/tensor.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/zero/engine/layout_util.h"
#include "tests/zero/engine/rank_threads.h"
#include "zero/engine/device.h"
#include "zero/engine/engine.h"

namespace zw::zero::testing {
namespace {

ZeroConfig parse(const std::string& json, int world) {
  auto c = parse_zero_config(json, world, "test");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? c.value() : ZeroConfig{};
}

std::string config_json(const std::string& precision, const std::string& zero_extra, int world) {
  return "{\"train_batch_size\": " + std::to_string(2 * world) +
         ", \"gradient_accumulation_steps\": 2, \"zero_optimization\": {\"stage\": 3, "
         "\"stage3_param_persistence_threshold\": 100, \"stage3_max_live_parameters\": 3000, "
         "\"reduce_bucket_size\": 1000" +
         zero_extra + "}, \"" + precision + "\": {\"enabled\": true}}";
}

struct Outcome {
  std::vector<std::vector<float>> grad_shards;  // before each step
  std::vector<std::vector<float>> units;        // gathered after the last step
  std::vector<StepResult> steps;
  std::vector<Span> spans;
  EngineMemory memory;
};

float grad_value(int rank, int micro, int unit, int64_t i, int step) {
  return 0.01f * std::sin(0.37f * float(i) + 1.3f * float(unit) + 0.7f * float(rank) + 0.11f * float(micro) +
                          0.05f * float(step));
}

// One rank's run; `cuda` null: the host engine. `inf_rank`: that rank writes an inf into its first step's gradient.
Outcome run_engine(Communicator& comm, const ZeroConfig& cfg, const tensor::ModelLayout& layout,
                   tensor::CudaContext* cuda, int inf_rank = -1, bool timeline = false) {
  Outcome out;
  const int U = int(layout.units.size());
  EngineOptions eo;
  eo.cuda = cuda;
  eo.timeline = timeline;
  eo.optimizer_threads = 2;
  for (int u = 0; u < U; ++u) eo.declared_order.push_back(u);
  for (int u = U - 1; u >= 0; --u) eo.declared_order.push_back(u);
  auto created = Engine::create(comm, cfg, layout, eo);
  EXPECT_TRUE(created.ok()) << created.status().to_string();
  if (!created.ok()) return out;
  Engine& e = *created.value();
  EXPECT_EQ(e.on_device(), cuda != nullptr);
  Status s = e.init_shards([&](int u, int64_t begin, int64_t count, float* dst) {
    for (int64_t i = 0; i < count; ++i) dst[i] = 0.02f * std::cos(0.13f * float(begin + i) + float(u));
    return Status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<std::vector<float>> keep;  // host sources of queued copies stay alive until the step
  for (int step = 0; step < 2; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      EXPECT_TRUE(e.begin_micro_step().ok());
      for (int u = 0; u < U; ++u) {
        auto v = e.fetch(u, false);
        if (!v.ok()) {
          ADD_FAILURE() << v.status().to_string();
          return out;
        }
        EXPECT_TRUE(e.release(u, false).ok());
      }
      for (int u = U - 1; u >= 0; --u) {
        auto v = e.fetch(u, true);
        if (!v.ok()) {
          ADD_FAILURE() << v.status().to_string();
          return out;
        }
        const int64_t n = layout.units[size_t(u)].numel;
        keep.emplace_back(size_t(n));
        std::vector<float>& g = keep.back();
        for (int64_t i = 0; i < n; ++i) g[size_t(i)] = grad_value(comm.rank(), micro, u, i, step);
        if (step == 0 && comm.rank() == inf_rank && u == 0) g[0] = INFINITY;
        if (cuda != nullptr) {
          const Status c = tensor::copy(tensor::Tensor{v.value().grads.slice(0, size_t(n) * 4), DataType::kFloat32,
                                                       tensor::Shape{n}},
                                        tensor::Tensor::host(g.data(), tensor::Shape{n}));
          EXPECT_TRUE(c.ok()) << c.to_string();
        } else {
          std::memcpy(v.value().grads.data(), g.data(), size_t(n) * 4);
        }
        EXPECT_TRUE(e.release(u, true).ok());
      }
      s = e.end_micro_step();
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    const MemRef gs = e.grad_shard_ref();
    std::vector<float> shard(gs.bytes / 4);
    if (cuda != nullptr) {
      EXPECT_TRUE(tensor::copy(tensor::Tensor::host(shard.data(), tensor::Shape{int64_t(shard.size())}),
                               tensor::Tensor{gs, DataType::kFloat32, tensor::Shape{int64_t(shard.size())}})
                      .ok());
      EXPECT_TRUE(cuda->synchronize().ok());
    } else {
      std::memcpy(shard.data(), gs.data(), gs.bytes);
    }
    out.grad_shards.push_back(std::move(shard));
    auto r = e.step(1e-3);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) out.steps.push_back(r.value());
    keep.clear();
  }
  for (int u = 0; u < U; ++u) {
    out.units.emplace_back(size_t(layout.units[size_t(u)].numel));
    s = e.gather_unit(u, out.units.back().data());
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  if (e.timeline() != nullptr) out.spans = e.timeline()->spans();
  out.memory = e.memory();
  return out;
}

// Both paths on `world` ranks: outcomes per rank, host then device.
void run_both(int world, const std::string& json, std::vector<Outcome>* host, std::vector<Outcome>* dev,
              int inf_rank = -1) {
  const tensor::ModelLayout layout = numbered_units({700, 37, 1500, 900});
  const ZeroConfig cfg = parse(json, world);
  host->assign(size_t(world), Outcome{});
  dev->assign(size_t(world), Outcome{});
  run_ranks(world, [&](int r, Communicator& comm) {
    (*host)[size_t(r)] = run_engine(comm, cfg, layout, nullptr, inf_rank);
  });
  run_ranks(world, [&](int r, Communicator& comm) {
    auto ctx = tensor::CudaContext::create();
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    const tensor::CudaScope scope(*ctx.value());
    (*dev)[size_t(r)] = run_engine(comm, cfg, layout, ctx.value().get(), inf_rank);
  });
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

struct Case {
  const char* precision;  // "bf16" or "fp16"
  const char* placement;  // extra zero_optimization keys
  bool exact;             // the offloaded CPU Adam on both paths: same bits
};

class DeviceEngine : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceEngine, MatchesTheHostEngine) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  std::vector<Outcome> host, dev;
  run_both(2, config_json(c.precision, c.placement, 2), &host, &dev);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(dev[size_t(r)].grad_shards.size(), 2u);
    for (int s = 0; s < 2; ++s)
      EXPECT_TRUE(same_bits(host[size_t(r)].grad_shards[size_t(s)], dev[size_t(r)].grad_shards[size_t(s)]))
          << "rank " << r << ", gradient shard before step " << s + 1;
    ASSERT_EQ(dev[size_t(r)].units.size(), host[size_t(r)].units.size());
    for (size_t u = 0; u < host[size_t(r)].units.size(); ++u) {
      const std::vector<float>& a = host[size_t(r)].units[u];
      const std::vector<float>& b = dev[size_t(r)].units[u];
      if (c.exact) {
        EXPECT_TRUE(same_bits(a, b)) << "rank " << r << ", unit " << u;
      } else {
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_LE(std::fabs(a[i] - b[i]), 1e-2f * std::fabs(a[i]) + 1e-6f) << "rank " << r << " unit " << u << ", " << i;
      }
    }
    const size_t host_params = host[size_t(r)].memory.param_shard_bytes;  // f32 master + 16-bit copy
    EXPECT_EQ(dev[size_t(r)].memory.param_shard_bytes, c.exact ? host_params : host_params / 6 * 4)
        << "rank " << r << ": the GPU optimizer's gathers round the master, no 16-bit shard is kept";
    for (int s = 0; s < 2; ++s) {
      EXPECT_FALSE(dev[size_t(r)].steps[size_t(s)].skipped);
      EXPECT_NEAR(dev[size_t(r)].steps[size_t(s)].grad_norm, host[size_t(r)].steps[size_t(s)].grad_norm,
                  1e-5 * host[size_t(r)].steps[size_t(s)].grad_norm);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Placements, DeviceEngine,
    ::testing::Values(Case{"bf16", ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}", true},
                      Case{"fp16", ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}", true},
                      Case{"bf16",
                           ", \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}",
                           true},
                      Case{"bf16", "", false}, Case{"fp16", "", false}));

TEST(DeviceEngineOverflow, AnInfOnOneRankSkipsTheStepEverywhere) {
  SKIP_WITHOUT_GPU();
  std::vector<Outcome> host, dev;
  run_both(2, config_json("fp16", "", 2), &host, &dev, /*inf_rank=*/1);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(dev[size_t(r)].steps.size(), 2u);
    EXPECT_TRUE(dev[size_t(r)].steps[0].skipped) << "rank " << r;
    EXPECT_FALSE(dev[size_t(r)].steps[1].skipped) << "rank " << r;
    EXPECT_EQ(dev[size_t(r)].steps[1].optimizer_steps, 1);
    EXPECT_EQ(dev[size_t(r)].steps[0].loss_scale, host[size_t(r)].steps[0].loss_scale);
    EXPECT_EQ(dev[size_t(r)].steps[1].loss_scale, host[size_t(r)].steps[1].loss_scale);
  }
}

TEST(DeviceEngineTimeline, SpansComeFromStreamEvents) {
  SKIP_WITHOUT_GPU();
  const tensor::ModelLayout layout = numbered_units({700, 37, 1500, 900});
  const ZeroConfig cfg = parse(config_json("bf16", "", 2), 2);
  std::vector<Outcome> out(2);
  run_ranks(2, [&](int r, Communicator& comm) {
    auto ctx = tensor::CudaContext::create();
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    const tensor::CudaScope scope(*ctx.value());
    out[size_t(r)] = run_engine(comm, cfg, layout, ctx.value().get(), -1, /*timeline=*/true);
  });
  for (int r = 0; r < 2; ++r) {
    int gathers = 0, reduces = 0, computes = 0;
    for (const Span& s : out[size_t(r)].spans) {
      // every span is resolved, those of the final gather_unit passes too (end_eval resolves an evaluation pass)
      EXPECT_NE(s.end_ns, 0) << "rank " << r << " span of unit " << s.unit << " never resolved";
      EXPECT_TRUE(s.device_timed) << "rank " << r << " span of unit " << s.unit;
      EXPECT_GE(s.end_ns, s.start_ns);
      gathers += s.kind == SpanKind::kAllGather;
      reduces += s.kind == SpanKind::kReduceScatter;
      computes += s.kind == SpanKind::kForward || s.kind == SpanKind::kBackward;
    }
    EXPECT_GT(gathers, 0) << "rank " << r;
    EXPECT_GT(reduces, 0) << "rank " << r;
    // steps × micro steps × (forward + backward) × units, then one forward per unit: gather_unit's evaluation passes
    EXPECT_EQ(computes, 2 * 2 * 2 * 4 + 4) << "rank " << r;
    const OverlapFigures f = overlap(out[size_t(r)].spans);
    EXPECT_GE(f.all_gather.fraction, 0.0);
    EXPECT_LE(f.all_gather.fraction, 1.0);
  }
}

// EngineDevice::pack against the host's rounding rule (kernels/element.h), bit for bit: four elements a thread where
// pointers and strides allow it, one a thread for the tail and for misaligned pointers or strides; a subnormal and a
// value beyond f16's range among the inputs (no NaN: CUDA's arithmetic returns its canonical NaN, not the payload).
TEST(DevicePack, MatchesTheHostRoundingAtEveryAlignment) {
  SKIP_WITHOUT_GPU();
  auto dev = EngineDevice::create(0, nullptr);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  EngineDevice& d = *dev.value();
  constexpr int64_t kMax = 4096;
  float* src = nullptr;
  void* dst = nullptr;
  ASSERT_EQ(cudaMalloc(&src, kMax * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dst, kMax * 4), cudaSuccess);
  std::vector<float> host(kMax);
  for (int64_t i = 0; i < kMax; ++i)
    host[size_t(i)] = 1e3f * std::sin(0.731f * float(i)) * std::exp(-0.01f * float(i % 97));
  host[5] = 1e-41f;  // subnormal
  host[6] = 2e5f;    // beyond f16's range once scaled
  ASSERT_EQ(cudaMemcpy(src, host.data(), kMax * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const float scale = 0.37f;
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat16, DataType::kFloat32}) {
    const size_t es = dtype_size(dtype);
    for (int64_t src_off : {0, 1, 4}) {
      for (int64_t dst_off : {0, 2, 4}) {
        for (int parts : {1, 3}) {
          for (int64_t n : {1, 3, 4, 5, 64, 1027}) {
            for (int64_t stride_pad : {0, 1}) {
              const int64_t stride = (n + 3) / 4 * 4 + stride_pad;  // a multiple of 4 without the pad
              const int64_t src_stride = stride, dst_stride = stride;
              ASSERT_LE(src_off + parts * src_stride, kMax);
              ASSERT_EQ(cudaMemset(dst, 0xAB, kMax * 4), cudaSuccess);
              auto* out = static_cast<std::byte*>(dst) + size_t(dst_off) * es;
              ASSERT_TRUE(d.pack(src + src_off, src_stride, parts, n, scale, dtype, out, dst_stride, nullptr).ok());
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
              std::vector<std::byte> got(kMax * 4);
              ASSERT_EQ(cudaMemcpy(got.data(), dst, kMax * 4, cudaMemcpyDeviceToHost), cudaSuccess);
              for (int q = 0; q < parts; ++q)
                for (int64_t i = 0; i < n; ++i) {
                  const float x = host[size_t(src_off + q * src_stride + i)] * scale;
                  const size_t at = size_t(dst_off + q * dst_stride + i) * es;
                  uint32_t want = 0, have = 0;
                  if (dtype == DataType::kFloat32) {
                    std::memcpy(&want, &x, 4);
                  } else {
                    want = dtype == DataType::kBFloat16 ? kernels::f32_to_bf16(x) : kernels::f32_to_f16(x);
                  }
                  std::memcpy(&have, got.data() + at, es);
                  ASSERT_EQ(have, want) << dtype_name(dtype) << " src+" << src_off << " dst+" << dst_off << " parts "
                                        << parts << " n " << n << " stride pad " << stride_pad << ": part " << q
                                        << ", element " << i;
                }
              // nothing written between the parts or past the last
              const size_t end = size_t(dst_off + (parts - 1) * dst_stride + n) * es;
              for (size_t b = size_t(dst_off) * es; b < size_t(kMax) * 4; ++b) {
                const int64_t e = int64_t(b / es) - dst_off;
                const bool inside = b < end && e >= 0 && e % dst_stride < n;
                if (!inside) {
                  ASSERT_EQ(got[b], std::byte{0xAB}) << dtype_name(dtype) << " byte " << b << " written";
                }
              }
            }
          }
        }
      }
    }
  }
  cudaFree(src);
  cudaFree(dst);
}

}  // namespace
}  // namespace zw::zero::testing
