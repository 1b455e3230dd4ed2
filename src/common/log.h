// Logging with levels and subsystems: ZW_DEBUG=WARN|INFO|TRACE, ZW_DEBUG_SUBSYS=INIT,BOOT,SHM,...
//
// Every line is prefixed "host:pid:tid [rank] SUBSYS" so that interleaved output of many ranks can be sorted
// out. Messages are lowercase and carry the errno text where one exists; log where an error is first
// detected, not at each level it passes through (the Status breadcrumbs do that). Thread-safe: one write(2)
// per line. Non-goals: log files, rotation, structured output.
#pragma once

#include <cstdint>

namespace zw::log {

enum class Level : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

enum class Subsys : uint32_t {
  kInit = 1u << 0,
  kBoot = 1u << 1,
  kShm = 1u << 2,
  kTcp = 1u << 3,
  kVerbs = 1u << 4,
  kCuda = 1u << 5,
  kColl = 1u << 6,
  kZero = 1u << 7,
  kOpt = 1u << 8,
  kTool = 1u << 9,
};

// Whether a message of this level and subsystem would be printed (cheap; call before formatting).
bool enabled(Level level, Subsys subsys);

void write(Level level, Subsys subsys, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// The rank shown in the prefix for messages from the calling thread (ranks-as-threads tests set one per
// thread); -1 falls back to the process-wide rank.
void set_thread_rank(int rank);
void set_process_rank(int rank);

}  // namespace zw::log

#define ZW_LOG(level, subsys, ...)                                                            \
  do {                                                                                        \
    if (::zw::log::enabled(::zw::log::Level::level, ::zw::log::Subsys::subsys))               \
      ::zw::log::write(::zw::log::Level::level, ::zw::log::Subsys::subsys, __VA_ARGS__);      \
  } while (0)

#define ZW_WARN(subsys, ...) ZW_LOG(kWarn, subsys, __VA_ARGS__)
#define ZW_INFO(subsys, ...) ZW_LOG(kInfo, subsys, __VA_ARGS__)
#define ZW_TRACE(subsys, ...) ZW_LOG(kTrace, subsys, __VA_ARGS__)
