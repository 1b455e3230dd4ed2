// tests/fuzz/fuzz_ds_config.cc — the DeepSpeed JSON reader (src/zero/config: parse_zero_config with its strict
// JSON parse, the path-aware object reader, "auto" resolution, the batch rule, the policy checks) on any bytes a
// user's ds_config.json may hold, then describe() and the learning-rate schedule of what it accepted.
//
// An input is parsed without a trainer (even length) or with zw_train's "auto" values (odd length). Checked: a failure is
// kInvalidArgument or kUnsupported with a message; an accepted config describes itself, its batch triple is
// consistent (train = micro × accumulation × world), and its schedule gives a finite learning rate at every step
// probed (including past the end and at the resume point).
// Non-goals: file I/O (load_zero_config only adds the read), the engine's use of the settings.
#include <cmath>

#include "fuzz_check.h"
#include "zero/config/config.h"

using namespace zw;
using namespace zw::zero;

namespace {

constexpr int kWorld = 4;

const AutoFill& trainer() {
  static const AutoFill fill = {
      {"train_batch_size", {"32", "--batch"}},
      {"gradient_accumulation_steps", {"2", "--gradient-accumulation-steps"}},
      {"gradient_clipping", {"1.0", "--grad-clip"}},
      {"fp16.enabled", {"false", "--dtype bf16"}},
      {"bf16.enabled", {"true", "--dtype bf16"}},
      {"optimizer.params.lr", {"0.0003", "--lr"}},
      {"optimizer.params.betas", {"[0.9, 0.95]", "zw_train's AdamW betas"}},
      {"optimizer.params.eps", {"1e-08", "zw_train's AdamW eps"}},
      {"optimizer.params.weight_decay", {"0.1", "--weight-decay"}},
      {"scheduler.params.warmup_min_lr", {"0", "0"}},
      {"scheduler.params.warmup_max_lr", {"0.0003", "--lr"}},
      {"scheduler.params.warmup_num_steps", {"20", "--warmup-steps"}},
      {"scheduler.params.total_num_steps", {"500", "--steps"}},
      {"zero_optimization.reduce_bucket_size", {"16384", "d_model²"}},
      {"zero_optimization.stage3_prefetch_bucket_size", {"14745", "0.9 × d_model²"}},
      {"zero_optimization.stage3_param_persistence_threshold", {"1280", "10 × d_model"}},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save", {"true", "auto saves the model"}}};
  return fill;
}

void check(std::string_view text, const AutoFill* fill) {
  Result<ZeroConfig> c = parse_zero_config(text, kWorld, "the fuzz world size", fill);
  if (!c.ok()) {
    const Code code = c.status().code();
    FUZZ_CHECK(code == Code::kInvalidArgument || code == Code::kUnsupported, c.status().to_string());
    FUZZ_CHECK(!c.status().message().empty(), "an error without a message");
    return;
  }
  FUZZ_CHECK(!describe(*c).empty(), "empty description");
  const BatchConfig& b = c->batch;
  int64_t product = 0;
  const bool overflow = __builtin_mul_overflow(b.micro_batch_per_gpu, b.gradient_accumulation_steps, &product) ||
                        __builtin_mul_overflow(product, int64_t{kWorld}, &product);
  FUZZ_CHECK(!overflow && b.train_batch_size == product, describe(*c));
  const SchedulerConfig& s = c->scheduler;
  auto plus = [](int64_t a, int64_t d) {
    int64_t r = 0;
    return __builtin_add_overflow(a, d, &r) ? a : r;
  };
  for (int64_t step : {int64_t{0}, int64_t{1}, int64_t{7}, plus(s.warmup_num_steps, -1), s.warmup_num_steps,
                       s.total_num_steps, plus(s.total_num_steps, 1), plus(s.last_batch_iteration, 1),
                       int64_t{1} << 40}) {
    if (step < 0) continue;
    const double lr = scheduler_lr(s, c->optimizer.lr, step);
    FUZZ_CHECK(std::isfinite(lr), "lr at step " + std::to_string(step) + " is " + std::to_string(lr) + "\n" +
                                      describe(*c));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  // Without and with a trainer's "auto" values, by turns (a JSON text's meaning does not depend on its length
  // parity, so both kinds of parse see every kind of input).
  check(text, size % 2 == 0 ? nullptr : &trainer());
  return 0;
}
