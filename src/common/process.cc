// common/process.cc — /proc/<pid>/stat parsing (process.h).
#include "common/process.h"

#include <charconv>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace zw {

bool read_proc_stat(int pid, char* state, uint64_t* start_time) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');  // the command name may itself contain spaces and parentheses
  if (paren == std::string::npos) return false;
  std::istringstream fields(text.substr(paren + 1));
  std::string field;
  // Field 3 is the state, field 22 the start time; the stream starts at field 3.
  for (int index = 3; fields >> field; ++index) {
    if (index == 3) *state = field.empty() ? '?' : field[0];
    if (index == 22) {
      const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), *start_time);
      return ec == std::errc() && end == field.data() + field.size();
    }
  }
  return false;
}

}  // namespace zw
