// zero/config/json_reader.h — strict, path-aware reading of one JSON object of a DeepSpeed config (internal).
//
// An ObjectReader wraps one object ("zero_optimization.offload_param") and is asked for each key the parser
// knows. Every typed read records the key as known, so finish() can reject the keys nobody asked for with the
// nearest known key as a suggestion. Errors carry the full JSON path. Integer reads accept JSON doubles that
// are whole numbers (5e8) and reject fractions; "auto" anywhere is an error naming the key.
// Non-goals: writing JSON, schemas, defaults (the config structs hold those).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "zerowire/status.h"

namespace zw::zero::internal {

using Json = nlohmann::ordered_json;

// Levenshtein distance, used for "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);

// The closest candidate to `word`, or "" when none is close enough to be a plausible typo.
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

// Parses `text`, rejecting duplicate keys (as DeepSpeed does); errors carry the parser's line and column.
Result<Json> parse_json(std::string_view text);

// Reads the keys of one JSON object. Not thread-safe; lives for the duration of one parse.
class ObjectReader {
 public:
  // `path` is the object's JSON path ("" for the root); read keys are added to `explicit_keys` by full path.
  ObjectReader(const Json& object, std::string path, std::set<std::string>* explicit_keys);

  bool has(std::string_view key) const;
  std::string path_of(std::string_view key) const;

  Status read_bool(std::string_view key, bool* out);
  // A whole number >= `min`; `what` names the unit in errors ("a count", "a size in elements").
  Status read_int(std::string_view key, const char* what, int64_t min, int64_t* out);
  Status read_double(std::string_view key, double min, double* out);
  Status read_string(std::string_view key, std::string* out);
  // The raw value at `key` (nullptr when absent), for shapes the typed reads do not cover.
  const Json* read_raw(std::string_view key) { return find(key); }
  // The object at `key`, or nullptr when the key is absent or null; an error when it is not an object.
  Result<const Json*> child(std::string_view key);

  // DeepSpeed accepts `alias` as another spelling of `key`: reads of `key` see the alias's value. An error
  // when both spellings are present.
  Status alias(std::string_view alias, std::string_view key);
  // `key` is a DeepSpeed option zerowire does not implement: an error (kUnsupported) when present with a value
  // other than `harmless` (pass a null Json to reject any value). `why` ends the message.
  Status not_implemented(std::string_view key, const Json& harmless, std::string_view why);
  // Rejects the first key that no read or declaration mentioned, suggesting the nearest known key.
  Status finish() const;

 private:
  const Json* find(std::string_view key);  // records `key` as known; follows aliases
  Status auto_error(std::string_view key) const;

  const Json& object_;
  std::string path_;
  std::set<std::string>* explicit_keys_;
  std::vector<std::string> known_;                          // every key asked for or declared
  std::vector<std::pair<std::string, std::string>> alias_;  // (key, alias spelling present in the object)
};

// "string \"5e8\"" / "number 5.5" / "array [...]": a value's type and text for error messages.
std::string describe_value(const Json& value);

}  // namespace zw::zero::internal
