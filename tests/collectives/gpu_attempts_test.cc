// The numbering of attempts at creating a communicator's device-memory engine (CommImpl::gpu_engine,
// refuse_before_gpu_engine): every device-memory call made while no engine exists is one attempt, whether it creates
// the engine, fails to, or is refused first; none after the engine exists. Ranks rely on counting alike: each attempt
// sets up under store keys of its own, where a refusal is published (refusal.h). No GPU needed: the engine is a fake.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "collectives/comm_impl.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw::test {
namespace {

using internal::GpuEngine;

struct FakeEngine final : GpuEngine {
  int device() const override { return 0; }
  bool premultiplies() const override { return false; }
  Result<Work> run(const internal::OpDesc&, const CollectiveOptions&) override {
    return Status(Code::kUnsupported, "the fake engine runs nothing");
  }
  void abort(const Status&) override {}
};

TEST(GpuEngineAttempts, EveryCallBeforeTheEngineIsOneAttemptAndNoneAfter) {
  CommConfig config;
  config.transport = "shm";
  auto comm = Communicator::create(make_memory_store(), 0, 1, config);
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  internal::CommImpl& impl = comm.value()->impl();
  std::vector<uint64_t> made, published;
  auto fails = [&](uint64_t attempt) -> Result<std::unique_ptr<GpuEngine>> {
    made.push_back(attempt);
    return Status(Code::kInternal, "set-up failed");
  };
  auto works = [&](uint64_t attempt) -> Result<std::unique_ptr<GpuEngine>> {
    made.push_back(attempt);
    return std::unique_ptr<GpuEngine>(new FakeEngine());
  };
  auto publish = [&](uint64_t attempt) { published.push_back(attempt); };

  EXPECT_FALSE(impl.gpu_engine(fails).ok());  // attempt 0: the set-up fails
  EXPECT_EQ(impl.gpu_engine_if_created(), nullptr);
  EXPECT_TRUE(impl.refuse_before_gpu_engine(publish));  // attempt 1: refused before any set-up
  auto engine = impl.gpu_engine(works);                 // attempt 2: created
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  EXPECT_EQ(impl.gpu_engine_if_created(), engine.value());
  auto again = impl.gpu_engine(works);  // the engine is there: no attempt
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value(), engine.value());
  EXPECT_FALSE(impl.refuse_before_gpu_engine(publish));  // from here on the engine announces refusals
  EXPECT_EQ(made, (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(published, (std::vector<uint64_t>{1}));
}

}  // namespace
}  // namespace zw::test
