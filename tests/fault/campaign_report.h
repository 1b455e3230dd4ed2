// tests/fault/campaign_report.h — a long campaign's summary line: printed as "campaign: LINE" and appended to the
// file $ZW_FAULT_REPORT when it is set (tests/fault/campaign.sh collects the lines into build/fault-campaign.txt).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace zw::fault {

inline void report_campaign(const std::string& line) {
  std::printf("campaign: %s\n", line.c_str());
  if (const char* path = std::getenv("ZW_FAULT_REPORT")) {
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "%s\n", line.c_str());
      std::fclose(f);
    }
  }
}

}  // namespace zw::fault
