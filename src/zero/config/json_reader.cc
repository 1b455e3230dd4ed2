// zero/config/json_reader.cc — JSON parsing with duplicate-key rejection, key suggestions, and the ParseLog that
// collects problems (reported in file order), notes and "auto" resolutions. ObjectReader is in object_reader.cc.
#include "zero/config/json_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace zw::zero::internal {
namespace {

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

// Pre-order index of every JSON path of `value` (the order a reader of the file meets them).
void number_paths(const Json& value, const std::string& path, std::map<std::string, size_t>* order) {
  if (!value.is_object()) return;
  for (const auto& [key, child] : value.items()) {
    const std::string p = path.empty() ? key : path + "." + key;
    order->emplace(p, order->size());
    number_paths(child, p, order);
  }
}

constexpr const char* kTrainerFilled[] = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "fp16.enabled",
    "bf16.enabled",
    "optimizer.params.lr",
    "optimizer.params.betas",
    "optimizer.params.eps",
    "optimizer.params.weight_decay",
    "scheduler.params.warmup_min_lr",
    "scheduler.params.warmup_max_lr",
    "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps",
};

// Tracks the keys of each open object while parsing so that a repeated key is caught (nlohmann keeps the last).
struct DuplicateFinder {
  struct Open {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Open> stack;
  std::string duplicate;  // "path.key" of the first repeated key

  bool on_event(nlohmann::json::parse_event_t event, const Json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) stack.emplace_back();
    if (event == E::object_end && !stack.empty()) stack.pop_back();
    if (event == E::key && !stack.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!stack.back().keys.insert(key).second && duplicate.empty()) {
        for (size_t i = 0; i + 1 < stack.size(); ++i) duplicate += stack[i].last_key + ".";
        duplicate += key;
      }
      stack.back().last_key = key;
    }
    return true;
  }
};

}  // namespace

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  // A plausible typo changes at most about a third of the word (at least 2 edits are always allowed).
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& c : candidates) {
    // The distance is at least the difference in length: such a candidate can never be within the limit, and
    // skipping it keeps a long unknown key from costing length x length per known key.
    if ((word.size() > c.size() ? word.size() - c.size() : c.size() - word.size()) > limit) continue;
    size_t d = edit_distance(word, c);
    if (d < best_distance) best_distance = d, best = c;
  }
  return best_distance <= limit ? best : std::string();
}

Result<Json> parse_json(std::string_view text) {
  DuplicateFinder finder;
  Json parsed;
  try {
    parsed = Json::parse(text.begin(), text.end(), [&finder](int, nlohmann::json::parse_event_t event, Json& value) {
      return finder.on_event(event, value);
    });
  } catch (const nlohmann::json::parse_error& e) {
    return invalid("malformed JSON: " + std::string(e.what()) + " (byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond a double's range (1e400) is out_of_range to nlohmann, not a parse error.
    return invalid("malformed JSON: " + std::string(e.what()));
  }
  if (!finder.duplicate.empty())
    return invalid("duplicate key \"" + finder.duplicate + "\": DeepSpeed rejects repeated keys; keep one");
  if (!parsed.is_object()) return invalid("a DeepSpeed config must be a JSON object, got " + describe_value(parsed));
  return parsed;
}

std::string describe_value(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return std::string(value.type_name()) + " " + text;
}

bool is_trainer_filled(std::string_view path) {
  for (const char* p : kTrainerFilled)
    if (path == p) return true;
  return false;
}

std::string format_value(const Json& value) {
  if (value.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", value.get<double>());
    return buf;
  }
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

ParseLog::ParseLog(const Json& root, const AutoFill* fill) : fill_(fill) { number_paths(root, "", &order_); }

void ParseLog::problem(const std::string& path, Code code, std::string message) {
  problems_.push_back({path, code, std::move(message)});
}

void ParseLog::note(const std::string& path, std::string message) { notes_.push_back({path, std::move(message)}); }

void ParseLog::resolved(const std::string& path, std::string value, std::string source) {
  autos_.push_back({path, std::move(value), std::move(source)});
}

const AutoSource* ParseLog::fill(const std::string& path) const {
  if (fill_ == nullptr) return nullptr;
  auto it = fill_->find(path);
  return it == fill_->end() ? nullptr : &it->second;
}

size_t ParseLog::position(const std::string& path) const {
  for (std::string p = path;;) {
    auto it = order_.find(p);
    if (it != order_.end()) return it->second;
    const size_t dot = p.rfind('.');
    if (dot == std::string::npos) return order_.size();  // not in the file: after everything that is
    p.resize(dot);
  }
}

Status ParseLog::status() const {
  if (problems_.empty()) return Status();
  std::vector<const Problem*> sorted;
  for (const Problem& p : problems_) sorted.push_back(&p);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](const Problem* a, const Problem* b) { return position(a->path) < position(b->path); });
  bool all_unsupported = true;
  for (const Problem* p : sorted) all_unsupported = all_unsupported && p->code == Code::kUnsupported;
  const Code code = all_unsupported ? Code::kUnsupported : Code::kInvalidArgument;
  if (sorted.size() == 1) return Status(sorted[0]->code, sorted[0]->message);
  std::string message = std::to_string(sorted.size()) + " problems in the DeepSpeed config, in file order:";
  for (size_t i = 0; i < sorted.size(); ++i) message += "\n  " + std::to_string(i + 1) + ". " + sorted[i]->message;
  return Status(code, message);
}

void ParseLog::export_to(ZeroConfig* config) {
  auto by_position = [&](const auto& a, const auto& b) { return position(a.path) < position(b.path); };
  std::stable_sort(notes_.begin(), notes_.end(), by_position);
  std::stable_sort(autos_.begin(), autos_.end(), by_position);
  config->notes = std::move(notes_);
  config->autos = std::move(autos_);
  config->explicit_keys = std::move(explicit_keys);
}

}  // namespace zw::zero::internal
