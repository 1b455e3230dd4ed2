// tests/fuzz/fuzz_check.h — what every fuzz target shares: FUZZ_CHECK, a property check that aborts (so libFuzzer
// records the input as a crash) with the condition and a message, and the input as a string_view.
// Non-goals: a test framework; the targets rely on ASan/UBSan for memory and undefined-behaviour errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#define FUZZ_CHECK(cond, msg)                                                                         \
  do {                                                                                                \
    if (!(cond)) {                                                                                    \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #cond,          \
                   std::string(msg).c_str());                                                         \
      std::abort();                                                                                   \
    }                                                                                                 \
  } while (0)

namespace zw::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace zw::fuzz
