// zero/engine/loss_scaler.h — fp16 loss scaling as DeepSpeed does it, and the inf/nan check that drives it.
//
// LossScaler follows deepspeed/runtime/fp16/loss_scaler.py: a static scale when Fp16Config::loss_scale > 0, else
// DynamicLossScaler with init_scale = 2^initial_scale_power, scale_window = loss_scale_window, min_scale =
// min_loss_scale, delayed_shift = hysteresis, consecutive_hysteresis, scale_factor 2 and raise_error_at_min_scale
// (DeepSpeed's default, true). update() is DynamicLossScaler.update_scale line for line:
//   overflow:  if hysteresis == 1 (or delayed_shift == 1): at min_scale -> error, else scale = max(scale/2, min);
//              else hysteresis -= 1;  last_overflow_iter = iter.
//   good step: if consecutive_hysteresis: hysteresis = delayed_shift;
//              stable = iter - last_overflow_iter - 1; if stable > 0 and stable % window == 0: double the scale
//              (and refill hysteresis when not consecutive_hysteresis).
//   iter += 1.
// The optimizer step is skipped whenever the global overflow flag is set, static scale included (DeepSpeed's
// ZeRO-3 checks overflow whatever the scaler). With fp16 disabled the scaler is static with scale 1.
//
// Overflow check: has_inf_or_nan scans one rank's gradient shard (fp32, or fp16 / bf16 as raw uint16 bits) with a
// branch-free blocked loop that the compiler vectorizes; global_overflow makes the decision of every rank with ONE
// all-reduce (max) of a world_size-long flag vector, so the log can name the ranks that overflowed.
// State (scale, iteration counters, hysteresis) round-trips through JSON for checkpoints.
// Threading: a LossScaler is a plain value; use it from one thread. Non-goals: per-parameter-group scalers,
// torch.cuda.amp's GradScaler growth/backoff factors other than 2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "zero/config/config.h"
#include "zerowire/communicator.h"
#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::zero {

// A view of gradients in host memory.
struct GradSpan {
  const void* data = nullptr;           // first element; may be null only when count == 0
  size_t count = 0;                     // elements
  DataType dtype = DataType::kFloat32;  // kFloat32, kFloat16 or kBFloat16 (16-bit types as raw bits)
};

// The dynamic part of the scaler: what a checkpoint must keep.
struct LossScalerState {
  double cur_scale = 1.0;           // the scale the next backward multiplies the loss by
  int64_t cur_iter = 0;             // update() calls so far
  int64_t last_overflow_iter = -1;  // cur_iter of the last overflow, -1 = none yet
  int64_t cur_hysteresis = 1;       // overflows still tolerated before the scale halves
};

class LossScaler {
 public:
  // Validates the config (positive window and hysteresis, finite positive scales, initial_scale_power in
  // [0, 1023]); a bad value is kInvalidArgument naming the fp16.* key.
  static Result<LossScaler> create(const Fp16Config& config);

  double scale() const { return state_.cur_scale; }
  bool dynamic() const { return dynamic_; }
  const LossScalerState& state() const { return state_; }

  // Records one step's global overflow decision (see the header comment). Returns whether the optimizer step
  // must be skipped (== overflow). Fails, as DeepSpeed raises, when a dynamic scale already at min_loss_scale
  // overflows with no hysteresis left: training cannot go on with that config.
  Result<bool> update(bool overflow);

  // {"dynamic":..., "cur_scale":..., "cur_iter":..., "last_overflow_iter":..., "cur_hysteresis":...}.
  std::string to_json() const;
  // Restores the state saved by to_json. The configuration (window, min scale, ...) stays the one this scaler
  // was created with. A static/dynamic mismatch or a malformed string is kInvalidArgument.
  Status restore_json(const std::string& json);

 private:
  LossScaler(const Fp16Config& config, bool dynamic);
  Fp16Config config_;      // as given (window, hysteresis, min scale)
  bool dynamic_ = false;   // false: static scale (fp16 loss_scale > 0, or fp16 off)
  LossScalerState state_;  // see LossScalerState
};

// True when any element is ±inf or NaN. 16-bit dtypes are raw bit patterns. Other dtypes are kInvalidArgument.
Result<bool> has_inf_or_nan(const GradSpan& grads);
bool has_inf_or_nan_f32(const float* data, size_t count);
bool has_inf_or_nan_f16(const uint16_t* bits, size_t count);
bool has_inf_or_nan_bf16(const uint16_t* bits, size_t count);

// Local check over all of this rank's shards, then the global decision with one all-reduce (max): true when any
// rank found inf/nan. Every rank must call it (it is a collective). Logs the overflowing ranks at INFO (ZERO).
Result<bool> global_overflow(Communicator& comm, std::span<const GradSpan> shards);

}  // namespace zw::zero
