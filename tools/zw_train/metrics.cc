// zw_train/metrics.cc — metrics.jsonl writer and progress formatting.
//
// Non-goals: see metrics.h.
#include "zw_train/metrics.h"

#include <cerrno>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace zw::train {
namespace {

void write_line(std::FILE* f, const nlohmann::json& j) {
  if (f == nullptr) return;
  const std::string line = j.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), f);
  std::fflush(f);
}

}  // namespace

MetricsLog::~MetricsLog() {
  if (f_ != nullptr) std::fclose(f_);
}

Status MetricsLog::open(const std::string& path, int64_t keep_through_step) {
  std::vector<std::string> kept;
  if (keep_through_step >= 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number() && j["step"].get<int64_t>() <= keep_through_step)
        kept.push_back(line);
    }
  }
  f_ = std::fopen(path.c_str(), "w");
  if (f_ == nullptr) return system_error("cannot open metrics file " + path, errno);
  for (const std::string& line : kept) std::fprintf(f_, "%s\n", line.c_str());
  std::fflush(f_);
  return Status();
}

void MetricsLog::step(const StepRecord& r) {
  write_line(f_, {{"step", r.step},
                  {"loss", r.loss},
                  {"lr", r.lr},
                  {"grad_norm", r.grad_norm},
                  {"tokens_per_s", r.tokens_per_s},
                  {"mfu", r.mfu},
                  {"elapsed", r.elapsed_s}});
}

void MetricsLog::val(int64_t step, double val_loss, double elapsed_s) {
  write_line(f_, {{"step", step}, {"val_loss", val_loss}, {"elapsed", elapsed_s}});
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const long total = std::lround(s);
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  else if (total < 3600)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", total / 60, total % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", total / 3600, (total % 3600) / 60);
  return buf;
}

std::string progress_line(const StepRecord& r, int64_t total_steps, double eta_s) {
  char mfu[32] = "";
  if (r.mfu > 0) std::snprintf(mfu, sizeof mfu, " | MFU %.1f%%", r.mfu);
  char buf[288];
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s%s | elapsed %s | eta %s",
                static_cast<long long>(r.step), static_cast<long long>(total_steps), r.loss, r.lr, r.grad_norm,
                r.tokens_per_s, mfu, format_duration(r.elapsed_s).c_str(), format_duration(eta_s).c_str());
  return buf;
}

}  // namespace zw::train
