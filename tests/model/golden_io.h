// tests/model/golden_io.h — reader of the golden reference files written by make_golden.py.
//
// Format (little-endian, no padding): <stem>.txt is a text header, <stem>.bin the concatenated raw data.
//   # comment lines
//   config <key> <value> ...            numbers (model and batch shape)
//   adamw <key> <value> ...             numbers (optimizer hyperparameters)
//   tensor <name> <f32|i32> <rank> <d0> ... <d(rank-1)>   one line per tensor, data in file order in .bin
// Non-goals: writing (the Python script writes), other dtypes, validation beyond sizes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "zerowire/status.h"

namespace zw::model::testing {

struct GoldenTensor {
  std::vector<int64_t> shape;  // extents
  std::vector<float> f32;      // data when the dtype is f32
  std::vector<int32_t> i32;    // data when the dtype is i32
};

struct Golden {
  std::map<std::string, double> config;  // "config" line
  std::map<std::string, double> adamw;   // "adamw" line
  std::map<std::string, GoldenTensor> tensors;
  // nullptr when absent.
  const GoldenTensor* find(const std::string& name) const;
};

Result<Golden> load_golden(const std::string& dir, const std::string& stem);

}  // namespace zw::model::testing
