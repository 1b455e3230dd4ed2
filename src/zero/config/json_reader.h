// zero/config/json_reader.h — strict, path-aware reading of one JSON object of a DeepSpeed config (internal).
//
// An ObjectReader wraps one object ("zero_optimization.offload_param") and is asked for each key the parser
// knows. Every read records the key as known, so finish() can report the keys nobody asked for, each with the
// nearest known key as a suggestion. Nothing stops at the first problem: every read that fails records a Problem
// (JSON path, code, message) in the shared ParseLog and leaves the default in place, so one parse reports every
// problem of a file; ParseLog::status() returns them in file order. Integer reads accept JSON doubles that are
// whole numbers (5e8) and reject fractions.
// "auto": a read of a key whose value is "auto" takes the trainer's value when the ParseLog has one for that path
// (AutoFill, the Hugging Face integration's role), otherwise DeepSpeed's default (the value already in *out), and
// records which in ParseLog::autos. Keys only a trainer can fill (the batch sizes, the optimizer's lr, ...) are a
// problem when no trainer fills them (is_trainer_filled).
// Non-goals: writing JSON, schemas, defaults (the config structs hold those).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "zero/config/config.h"
#include "zerowire/status.h"

namespace zw::zero::internal {

using Json = nlohmann::ordered_json;

// Levenshtein distance, used for "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);

// The closest candidate to `word`, or "" when none is close enough to be a plausible typo.
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

// Parses `text`, rejecting duplicate keys (as DeepSpeed does); errors carry the parser's line and column.
Result<Json> parse_json(std::string_view text);

// "string \"5e8\"" / "number 5.5" / "array [...]": a value's type and text for error messages.
std::string describe_value(const Json& value);
// A number as %.6g, a bool as true/false, anything else as JSON.
std::string format_value(const Json& value);

// True for the "auto" keys DeepSpeed leaves to its caller (the Hugging Face integration fills them from its
// arguments): the batch sizes, gradient_clipping, fp16/bf16.enabled, optimizer lr/betas/eps/weight_decay and the
// scheduler's warmup_min_lr/warmup_max_lr/warmup_num_steps/total_num_steps.
bool is_trainer_filled(std::string_view path);

// Everything one parse found: problems, notes, "auto" resolutions and the keys the file set.
class ParseLog {
 public:
  ParseLog(const Json& root, const AutoFill* fill);

  void problem(const std::string& path, Code code, std::string message);
  void note(const std::string& path, std::string message);
  void resolved(const std::string& path, std::string value, std::string source);
  // The trainer's value for an "auto" at `path`, or nullptr.
  const AutoSource* fill(const std::string& path) const;
  bool has_problems() const { return !problems_.empty(); }
  // OK, or every problem in file order: one alone is returned as is; several as one message, one line each.
  Status status() const;
  // Moves the notes, resolutions and explicit keys into `config`.
  void export_to(ZeroConfig* config);

  std::set<std::string> explicit_keys;  // JSON paths present in the file (read through a reader)

 private:
  struct Problem {
    std::string path;
    Code code;
    std::string message;
  };
  size_t position(const std::string& path) const;  // pre-order index of the path or its nearest ancestor

  std::map<std::string, size_t> order_;  // JSON path -> pre-order index in the file
  const AutoFill* fill_;
  std::vector<Problem> problems_;
  std::vector<ConfigNote> notes_;
  std::vector<AutoResolution> autos_;
};

// Reads the keys of one JSON object. Not thread-safe; lives for the duration of one parse.
class ObjectReader {
 public:
  // `path` is the object's JSON path ("" for the root).
  ObjectReader(const Json& object, std::string path, ParseLog* log);

  bool has(std::string_view key) const;
  std::string path_of(std::string_view key) const;
  ParseLog& log() { return *log_; }

  // Each read returns true when the file gives a valid value (or "auto" resolved to one) and writes it to *out;
  // otherwise *out keeps its default, and a bad value is recorded as a problem.
  bool read_bool(std::string_view key, bool* out);
  // A whole number >= `min`; `what` names the unit in problems ("a count", "a size in elements").
  bool read_int(std::string_view key, const char* what, int64_t min, int64_t* out);
  bool read_double(std::string_view key, double min, double* out);
  bool read_string(std::string_view key, std::string* out);
  // The raw value at `key` after "auto" resolution (nullptr when absent, or "auto" left at the default; then
  // `default_text` is what the resolution records).
  const Json* read_value(std::string_view key, const std::string& default_text);
  // The object at `key`, or nullptr when the key is absent, null or not an object (recorded as a problem).
  const Json* child(std::string_view key);

  // DeepSpeed accepts `alias` as another spelling of `key`: reads of `key` see the alias's value. A problem when
  // both spellings are present.
  void alias(std::string_view alias, std::string_view key);
  // `key` is a DeepSpeed option zerowire does not implement: a kUnsupported problem when present with a value
  // other than `harmless` (a null Json: any value). `instead` says what to write instead.
  void refuse(std::string_view key, const Json& harmless, std::string_view why, std::string_view instead);
  // `key` only tunes something zerowire does its own way: present with a value other than `same` (a null Json:
  // any value), it is accepted with one note saying what zerowire does instead.
  void accept(std::string_view key, const Json& same, std::string_view what_zerowire_does);
  // The file's value at `key` as written ("auto" included), recorded as known and explicit; nullptr when absent.
  const Json* read_raw(std::string_view key) { return find(key); }
  // Declares `key` as known without reading it (a caller reads it through read_value or by hand).
  void declare(std::string_view key) { known_.emplace_back(key); }
  // Records every key that no read or declaration mentioned, suggesting the nearest known key.
  void finish() const;

 private:
  const Json* find(std::string_view key);  // records `key` as known; follows aliases
  // The value to read at `key`: the file's, or the fill of an "auto" (nullptr: absent, or "auto" left at the
  // default `default_text`).
  const Json* resolve(std::string_view key, const std::string& default_text);

  const Json& object_;
  std::string path_;
  ParseLog* log_;
  std::vector<std::string> known_;                          // every key asked for or declared
  std::vector<std::pair<std::string, std::string>> alias_;  // (key, alias spelling present in the object)
  std::list<Json> filled_;                                  // the trainer's values of "auto" keys (stable addresses)
};

}  // namespace zw::zero::internal
