// zero/engine/loss_scaler.cc — DeepSpeed's loss scaler, the inf/nan scan and the one-all-reduce overflow decision.
// Non-goals: scaling gradients itself (the optimizer fuses 1/scale into AdamParams::grad_scale).
#include "zero/engine/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/log.h"
#include "zero/checkpoint/checkpoint_index.h"

namespace zw::zero {
namespace {

Status bad_fp16(const std::string& key, const std::string& what) {
  return Status(Code::kInvalidArgument, "fp16." + key + " " + what + "; fix it in the DeepSpeed config");
}

Status validate(const Fp16Config& c) {
  if (!c.enabled) return Status();
  if (!(c.loss_scale >= 0.0) || !std::isfinite(c.loss_scale))
    return bad_fp16("loss_scale",
                    "is " + std::to_string(c.loss_scale) + ", must be 0 (dynamic) or a positive finite scale");
  if (c.loss_scale > 0.0) return Status();
  if (c.initial_scale_power < 0 || c.initial_scale_power > 1023)
    return bad_fp16("initial_scale_power", "is " + std::to_string(c.initial_scale_power) + ", must be in [0, 1023]");
  if (c.loss_scale_window <= 0)
    return bad_fp16("loss_scale_window", "is " + std::to_string(c.loss_scale_window) + ", must be > 0");
  if (c.hysteresis <= 0) return bad_fp16("hysteresis", "is " + std::to_string(c.hysteresis) + ", must be > 0");
  if (!(c.min_loss_scale > 0.0) || !std::isfinite(c.min_loss_scale))
    return bad_fp16("min_loss_scale", "is " + std::to_string(c.min_loss_scale) + ", must be positive and finite");
  return Status();
}

// Blocks of this many elements are scanned without a branch; the loop exits at the first bad block.
constexpr size_t kBlock = 1024;

// True when any element x has (x & mask) == mask, i.e. an all-ones exponent: inf or NaN.
template <typename T>
bool any_exponent_all_ones(const T* bits, size_t count, T mask) {
  size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    T bad = 0;
    for (size_t j = 0; j < kBlock; ++j) bad |= static_cast<T>((bits[i + j] & mask) == mask);
    if (bad) return true;
  }
  T bad = 0;
  for (; i < count; ++i) bad |= static_cast<T>((bits[i] & mask) == mask);
  return bad != 0;
}

}  // namespace

LossScaler::LossScaler(const Fp16Config& config, bool dynamic) : config_(config), dynamic_(dynamic) {
  if (!config.enabled) {
    state_.cur_scale = 1.0;
  } else if (!dynamic) {
    state_.cur_scale = config.loss_scale;
  } else {
    state_.cur_scale = std::ldexp(1.0, static_cast<int>(config.initial_scale_power));
    state_.cur_hysteresis = config.hysteresis;
  }
}

Result<LossScaler> LossScaler::create(const Fp16Config& config) {
  ZW_TRY(validate(config));
  return LossScaler(config, config.enabled && config.loss_scale == 0.0);
}

Result<bool> LossScaler::update(bool overflow) {
  if (!dynamic_) return overflow;
  const int64_t delayed_shift = config_.hysteresis;
  LossScalerState& s = state_;
  if (overflow) {
    if (delayed_shift == 1 || s.cur_hysteresis == 1) {
      if (s.cur_scale == config_.min_loss_scale) {
        return Status(Code::kInvalidArgument,
                      "fp16 gradients overflow at iteration " + std::to_string(s.cur_iter) +
                          " although the loss scale is already at fp16.min_loss_scale (" +
                          std::to_string(config_.min_loss_scale) +
                          "); training diverged: lower the learning rate, check the data for inf/nan, use bf16, or "
                          "lower fp16.min_loss_scale");
      }
      const double next = std::max(s.cur_scale / 2.0, config_.min_loss_scale);
      ZW_INFO(kZero, "fp16 overflow, skipping step: loss scale %g -> %g", s.cur_scale, next);
      s.cur_scale = next;
    } else {
      ZW_INFO(kZero, "fp16 overflow, skipping step: loss scale %g kept, hysteresis %lld -> %lld", s.cur_scale,
              static_cast<long long>(s.cur_hysteresis), static_cast<long long>(s.cur_hysteresis - 1));
      s.cur_hysteresis -= 1;
    }
    s.last_overflow_iter = s.cur_iter;
  } else {
    if (config_.consecutive_hysteresis) s.cur_hysteresis = delayed_shift;
    const int64_t stable_interval = (s.cur_iter - s.last_overflow_iter) - 1;
    if (stable_interval > 0 && stable_interval % config_.loss_scale_window == 0) {
      if (!config_.consecutive_hysteresis) s.cur_hysteresis = delayed_shift;
      s.cur_scale *= 2.0;
      ZW_TRACE(kZero, "no overflow for %lld steps: loss scale -> %g", static_cast<long long>(stable_interval),
               s.cur_scale);
    }
  }
  s.cur_iter += 1;
  return overflow;
}

std::string LossScaler::to_json() const {
  nlohmann::json j = {{"dynamic", dynamic_},
                      {"cur_scale", state_.cur_scale},
                      {"cur_iter", state_.cur_iter},
                      {"last_overflow_iter", state_.last_overflow_iter},
                      {"cur_hysteresis", state_.cur_hysteresis}};
  return j.dump();
}

Status LossScaler::restore_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const char* keys[] = {"dynamic", "cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis"};
  if (!j.is_object()) return Status(Code::kInvalidArgument, "loss scaler state is not a JSON object: " + text);
  for (const char* k : keys)
    if (!j.contains(k))
      return Status(Code::kInvalidArgument, std::string("loss scaler state lacks \"") + k + "\": " + text);
  try {
    if (j["dynamic"].get<bool>() != dynamic_) {
      return Status(Code::kInvalidArgument, std::string("checkpoint holds a ") + (dynamic_ ? "static" : "dynamic") +
                                                " loss scaler but the config asks for a " +
                                                (dynamic_ ? "dynamic" : "static") +
                                                " one; set fp16.loss_scale as when the checkpoint was written");
    }
    LossScalerState s;
    s.cur_scale = j["cur_scale"].get<double>();
    s.cur_iter = j["cur_iter"].get<int64_t>();
    s.last_overflow_iter = j["last_overflow_iter"].get<int64_t>();
    s.cur_hysteresis = j["cur_hysteresis"].get<int64_t>();
    if (!(s.cur_scale > 0.0) || !std::isfinite(s.cur_scale))
      return Status(Code::kInvalidArgument, "loss scaler state has a non-positive scale: " + text);
    state_ = s;
  } catch (const nlohmann::json::exception& e) {
    return Status(Code::kInvalidArgument,
                  std::string("loss scaler state has a field of the wrong type (") + e.what() + "): " + text);
  }
  return Status();
}

bool has_inf_or_nan_f32(const float* data, size_t count) {
  return any_exponent_all_ones(reinterpret_cast<const uint32_t*>(data), count, uint32_t{0x7f800000u});
}
bool has_inf_or_nan_f16(const uint16_t* bits, size_t count) {
  return any_exponent_all_ones(bits, count, uint16_t{0x7c00u});
}
bool has_inf_or_nan_bf16(const uint16_t* bits, size_t count) {
  return any_exponent_all_ones(bits, count, uint16_t{0x7f80u});
}

Result<bool> has_inf_or_nan(const GradSpan& g) {
  if (g.data == nullptr && g.count != 0)
    return Status(Code::kInvalidArgument, "gradient span of " + std::to_string(g.count) + " elements has no data");
  switch (g.dtype) {
    case DataType::kFloat32:
      return has_inf_or_nan_f32(static_cast<const float*>(g.data), g.count);
    case DataType::kFloat16:
      return has_inf_or_nan_f16(static_cast<const uint16_t*>(g.data), g.count);
    case DataType::kBFloat16:
      return has_inf_or_nan_bf16(static_cast<const uint16_t*>(g.data), g.count);
    default:
      return Status(Code::kInvalidArgument, std::string("overflow check over gradients of dtype ") +
                                                dtype_name(g.dtype) + ": only float, half and bfloat16 are supported");
  }
}

Result<bool> global_overflow(Communicator& comm, std::span<const GradSpan> shards) {
  bool local = false;
  for (const GradSpan& g : shards) {
    ZW_ASSIGN_OR_RETURN(bool bad, has_inf_or_nan(g));
    if (bad) {
      local = true;
      break;
    }
  }
  std::vector<int32_t> flags(comm.size(), 0);
  flags[comm.rank()] = local ? 1 : 0;
  ZW_TRY(agree_flags(comm, flags));
  const std::string who = flagged_ranks(flags);  // "rank(s) 1,3"
  if (!who.empty()) ZW_INFO(kZero, "inf/nan gradients on %s", who.c_str());
  return !who.empty();
}

}  // namespace zw::zero
