// nccl/nccl_env.h — NCCL's environment variables read as zerowire's knobs under libzwnccl (env.cc says which and how).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace zw::nccl {

struct NcclEnv {
  std::map<std::string, std::string> values;  // ZW_* knob -> the value an NCCL_* variable gives it
  struct Note {
    bool warn;         // a value that was not applied (else INFO)
    std::string text;  // "NCCL_DEBUG=INFO read as ZW_DEBUG=INFO", ...
  };
  std::vector<Note> notes;  // in the order of nccl_vars, then the variables not read
};

// Translates NCCL_* variables (name, value) into knob values; a knob whose ZW_* variable zw_lookup finds set keeps it.
NcclEnv translate_nccl_env(const std::vector<std::pair<std::string, std::string>>& nccl_vars,
                           const std::function<const char*(const char*)>& zw_lookup);

// Logs the process's translation once (the first ncclGetUniqueId or ncclCommInit*).
void report_nccl_env();

}  // namespace zw::nccl
