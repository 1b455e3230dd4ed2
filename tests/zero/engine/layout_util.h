// tests/zero/engine/layout_util.h — hand-made model layouts for the engine tests: units of one weight-decayed
// parameter each ("<unit>.w"), so that unit sizes are exactly what a test chooses.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/param_layout.h"

namespace zw::zero::testing {

// Unit u is names[u] with one parameter of sizes[u] elements (the layout's own padding is 1: the partition manager
// pads for the world).
inline tensor::ModelLayout single_param_units(const std::vector<std::string>& names,
                                              const std::vector<int64_t>& sizes) {
  std::vector<tensor::UnitLayout> units(names.size());
  for (size_t u = 0; u < names.size(); ++u) {
    units[u].name = names[u];
    units[u].params = {tensor::ParamLayout{names[u] + ".w", tensor::Shape{sizes[u]}, 0, true}};
  }
  auto layout = tensor::make_layout(std::move(units), 1);
  EXPECT_TRUE(layout.ok()) << layout.status().to_string();
  return layout.ok() ? layout.value() : tensor::ModelLayout{};
}

// Units "u0", "u1", ... of the given sizes.
inline tensor::ModelLayout numbered_units(const std::vector<int64_t>& sizes) {
  std::vector<std::string> names;
  for (size_t u = 0; u < sizes.size(); ++u) names.push_back("u" + std::to_string(u));
  return single_param_units(names, sizes);
}

}  // namespace zw::zero::testing
