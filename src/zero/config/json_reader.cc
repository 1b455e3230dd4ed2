// zero/config/json_reader.cc — ObjectReader, JSON parsing with duplicate-key rejection, and key suggestions.
#include "zero/config/json_reader.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace zw::zero::internal {
namespace {

// Largest double that converts to int64 without overflow (2^63 itself does not fit).
constexpr double kInt64Limit = 9223372036854775808.0;

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

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
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) best_distance = d, best = c;
  }
  // A plausible typo changes at most about a third of the word (at least 2 edits are always allowed).
  size_t limit = std::max<size_t>(2, word.size() / 3);
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

ObjectReader::ObjectReader(const Json& object, std::string path, std::set<std::string>* explicit_keys)
    : object_(object), path_(std::move(path)), explicit_keys_(explicit_keys) {}

bool ObjectReader::has(std::string_view key) const { return object_.contains(std::string(key)); }

std::string ObjectReader::path_of(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

const Json* ObjectReader::find(std::string_view key) {
  known_.emplace_back(key);
  std::string spelled(key);
  for (const auto& [canonical, alias] : alias_)
    if (canonical == key) spelled = alias;
  auto it = object_.find(spelled);
  if (it == object_.end()) return nullptr;
  explicit_keys_->insert(path_of(key));
  return &*it;
}

Status ObjectReader::auto_error(std::string_view key) const {
  return invalid(path_of(key) +
                 " is \"auto\": \"auto\" is a placeholder that DeepSpeed's Hugging Face "
                 "integration fills in, and zerowire has no caller that fills it; write the value (or remove the "
                 "key to get DeepSpeed's default)");
}

Status ObjectReader::read_bool(std::string_view key, bool* out) {
  const Json* v = find(key);
  if (!v) return Status();
  if (v->is_string() && *v == "auto") return auto_error(key);
  if (!v->is_boolean()) return invalid(path_of(key) + " must be true or false, got " + describe_value(*v));
  *out = v->get<bool>();
  return Status();
}

Status ObjectReader::read_int(std::string_view key, const char* what, int64_t min, int64_t* out) {
  const Json* v = find(key);
  if (!v) return Status();
  if (v->is_string() && *v == "auto") return auto_error(key);
  std::string name = path_of(key);
  if (!v->is_number()) return invalid(name + " must be a number (" + what + "), got " + describe_value(*v));
  int64_t value = 0;
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return invalid(name + " = " + v->dump() + " is out of range for " + what);
  } else if (v->is_number_integer()) {
    value = v->get<int64_t>();
  } else {
    double d = v->get<double>();
    if (!std::isfinite(d) || std::fabs(d) >= kInt64Limit)
      return invalid(name + " = " + v->dump() + " is out of range for " + what);
    if (d != std::trunc(d))
      return invalid(name + " must be a whole number (" + what + "), got " + v->dump() +
                     "; zerowire does not round it");
    value = static_cast<int64_t>(d);
  }
  if (value < min)
    return invalid(name + " must be >= " + std::to_string(min) + " (" + what + "), got " + std::to_string(value));
  *out = value;
  return Status();
}

Status ObjectReader::read_double(std::string_view key, double min, double* out) {
  const Json* v = find(key);
  if (!v) return Status();
  if (v->is_string() && *v == "auto") return auto_error(key);
  if (!v->is_number()) return invalid(path_of(key) + " must be a number, got " + describe_value(*v));
  double d = v->get<double>();
  if (d < min) return invalid(path_of(key) + " must be >= " + Json(min).dump() + ", got " + v->dump());
  *out = d;
  return Status();
}

Status ObjectReader::read_string(std::string_view key, std::string* out) {
  const Json* v = find(key);
  if (!v || v->is_null()) return Status();  // DeepSpeed's string options are Optional: null = unset
  if (v->is_string() && *v == "auto") return auto_error(key);
  if (!v->is_string()) return invalid(path_of(key) + " must be a string, got " + describe_value(*v));
  *out = v->get<std::string>();
  return Status();
}

Result<const Json*> ObjectReader::child(std::string_view key) {
  const Json* v = find(key);
  if (!v || v->is_null()) return static_cast<const Json*>(nullptr);
  if (v->is_string() && *v == "auto") return auto_error(key);
  if (!v->is_object()) return invalid(path_of(key) + " must be a JSON object, got " + describe_value(*v));
  return v;
}

Status ObjectReader::alias(std::string_view alias, std::string_view key) {
  known_.emplace_back(alias);
  if (!has(alias)) return Status();
  if (has(key))
    return invalid(path_of(key) + " is given twice, also as " + path_of(alias) +
                   " (DeepSpeed's other spelling); keep one");
  alias_.emplace_back(std::string(key), std::string(alias));
  return Status();
}

Status ObjectReader::not_implemented(std::string_view key, const Json& harmless, std::string_view why) {
  const Json* v = find(key);
  if (!v || (!harmless.is_null() && *v == harmless)) return Status();
  return Status(Code::kUnsupported, path_of(key) + " = " + v->dump() +
                                        " is a known DeepSpeed option that zerowire does not implement yet" +
                                        (why.empty() ? "" : "; ") + std::string(why));
}

Status ObjectReader::finish() const {
  for (const auto& [key, value] : object_.items()) {
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    std::string suggestion = nearest(key, known_);
    std::string where = path_.empty() ? "at the top level" : "in " + path_;
    if (!suggestion.empty())
      return invalid("unknown key " + path_of(key) + ": did you mean \"" + suggestion + "\" (" + path_of(suggestion) +
                     ")?");
    return invalid("unknown key " + path_of(key) + "; valid keys " + where + ": " + join(known_));
  }
  return Status();
}

}  // namespace zw::zero::internal
