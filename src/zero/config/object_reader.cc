// zero/config/object_reader.cc — ObjectReader: typed reads of one JSON object that record problems instead of
// stopping, "auto" resolution, aliases, refused and accepted-with-a-note keys, and unknown-key suggestions.
#include <algorithm>
#include <cmath>
#include <utility>

#include "zero/config/json_reader.h"

namespace zw::zero::internal {
namespace {

// Largest double that converts to int64 without overflow (2^63 itself does not fit).
constexpr double kInt64Limit = 9223372036854775808.0;

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

std::string format_double(double v) { return format_value(Json(v)); }

}  // namespace

ObjectReader::ObjectReader(const Json& object, std::string path, ParseLog* log)
    : object_(object), path_(std::move(path)), log_(log) {}

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
  log_->explicit_keys.insert(path_of(key));
  return &*it;
}

const Json* ObjectReader::resolve(std::string_view key, const std::string& default_text) {
  const Json* v = find(key);
  if (v == nullptr || !(v->is_string() && *v == "auto")) return v;
  const std::string path = path_of(key);
  log_->explicit_keys.erase(path);  // describe() shows the resolution, not "set by the file"
  if (const AutoSource* fill = log_->fill(path)) {
    const Json& filled = filled_.emplace_back(Json::parse(fill->json, nullptr, false));
    log_->resolved(path, format_value(filled), fill->source);
    return &filled;
  }
  if (is_trainer_filled(path)) {
    log_->problem(path, Code::kInvalidArgument,
                  path +
                      " is \"auto\", which the trainer fills from its own arguments (as the Hugging Face "
                      "integration does), but this caller gives no value for it; write the value");
    return nullptr;
  }
  log_->resolved(path, default_text, "DeepSpeed's default");
  return nullptr;
}

const Json* ObjectReader::read_value(std::string_view key, const std::string& default_text) {
  return resolve(key, default_text);
}

bool ObjectReader::read_bool(std::string_view key, bool* out) {
  const Json* v = resolve(key, *out ? "true" : "false");
  if (!v) return false;
  if (!v->is_boolean()) {
    log_->problem(path_of(key), Code::kInvalidArgument,
                  path_of(key) + " must be true or false, got " + describe_value(*v) + "; write true or false");
    return false;
  }
  *out = v->get<bool>();
  return true;
}

bool ObjectReader::read_int(std::string_view key, const char* what, int64_t min, int64_t* out) {
  const Json* v = resolve(key, std::to_string(*out));
  if (!v) return false;
  const std::string name = path_of(key);
  auto bad = [&](const std::string& message) {
    log_->problem(name, Code::kInvalidArgument, message);
    return false;
  };
  if (!v->is_number()) return bad(name + " must be a number (" + what + "), got " + describe_value(*v));
  int64_t value = 0;
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return bad(name + " = " + v->dump() + " is out of range for " + what);
  } else if (v->is_number_integer()) {
    value = v->get<int64_t>();
  } else {
    const double d = v->get<double>();
    if (!std::isfinite(d) || std::fabs(d) >= kInt64Limit)
      return bad(name + " = " + v->dump() + " is out of range for " + what);
    if (d != std::trunc(d))
      return bad(name + " must be a whole number (" + what + "), got " + v->dump() + "; zerowire does not round it");
    value = static_cast<int64_t>(d);
  }
  if (value < min)
    return bad(name + " must be >= " + std::to_string(min) + " (" + what + "), got " + std::to_string(value));
  *out = value;
  return true;
}

bool ObjectReader::read_double(std::string_view key, double min, double* out) {
  const Json* v = resolve(key, format_double(*out));
  if (!v) return false;
  if (!v->is_number()) {
    log_->problem(path_of(key), Code::kInvalidArgument, path_of(key) + " must be a number, got " + describe_value(*v));
    return false;
  }
  const double d = v->get<double>();
  if (d < min) {
    log_->problem(path_of(key), Code::kInvalidArgument,
                  path_of(key) + " must be >= " + format_double(min) + ", got " + v->dump());
    return false;
  }
  *out = d;
  return true;
}

bool ObjectReader::read_string(std::string_view key, std::string* out) {
  const Json* v = resolve(key, out->empty() ? "null" : *out);
  if (!v || v->is_null()) return false;  // DeepSpeed's string options are Optional: null = unset
  if (!v->is_string()) {
    log_->problem(path_of(key), Code::kInvalidArgument, path_of(key) + " must be a string, got " + describe_value(*v));
    return false;
  }
  *out = v->get<std::string>();
  return true;
}

const Json* ObjectReader::child(std::string_view key) {
  const Json* v = find(key);
  if (!v || v->is_null()) return nullptr;
  if (!v->is_object()) {
    log_->problem(path_of(key), Code::kInvalidArgument,
                  path_of(key) + " must be a JSON object, got " + describe_value(*v) +
                      "; write an object such as {\"enabled\": true} or remove the key");
    return nullptr;
  }
  return v;
}

void ObjectReader::alias(std::string_view alias, std::string_view key) {
  known_.emplace_back(alias);
  if (!has(alias)) return;
  if (has(key)) {
    log_->problem(
        path_of(alias), Code::kInvalidArgument,
        path_of(key) + " is given twice, also as " + path_of(alias) + " (DeepSpeed's other spelling); keep one");
    return;
  }
  alias_.emplace_back(std::string(key), std::string(alias));
}

void ObjectReader::refuse(std::string_view key, const Json& harmless, std::string_view why, std::string_view instead) {
  const Json* v = find(key);
  if (!v || (!harmless.is_null() && *v == harmless)) return;
  log_->problem(path_of(key), Code::kUnsupported,
                path_of(key) + " = " + v->dump() + ": " + std::string(why) + "; " + std::string(instead));
}

void ObjectReader::accept(std::string_view key, const Json& same, std::string_view what_zerowire_does) {
  const Json* v = find(key);
  if (!v || (!same.is_null() && *v == same)) return;
  log_->note(path_of(key), path_of(key) + " = " + v->dump() + " accepted: " + std::string(what_zerowire_does));
}

void ObjectReader::finish() const {
  for (const auto& [key, value] : object_.items()) {
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    const std::string suggestion = nearest(key, known_);
    const std::string where = path_.empty() ? "at the top level" : "in " + path_;
    if (!suggestion.empty())
      log_->problem(
          path_of(key), Code::kInvalidArgument,
          "unknown key " + path_of(key) + ": did you mean \"" + suggestion + "\" (" + path_of(suggestion) + ")?");
    else
      log_->problem(path_of(key), Code::kInvalidArgument,
                    "unknown key " + path_of(key) + "; valid keys " + where + ": " + join(known_));
  }
}

}  // namespace zw::zero::internal
