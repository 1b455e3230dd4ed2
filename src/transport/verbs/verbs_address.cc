// The verbs address text form.
#include "transport/verbs/verbs_address.h"

#include <charconv>
#include <cstdio>
#include <map>
#include <sstream>

namespace zw::transport::verbs {
namespace {

constexpr char kPrefix[] = "verbs:";
constexpr char kExpected[] = "verbs:rank=R;host=H;dev=D:P;lid=L;gid=HEX32;eth=0|1;mtu=M;psn=N;credit=HEX/RKEY;qpn=Q,...";

Status malformed(const std::string& text, const std::string& why) {
  return Status(Code::kInvalidArgument,
                "malformed verbs address '" + text + "': " + why + " (expected " + kExpected + ")");
}

template <typename T>
bool parse_number(const std::string& text, T* out, int base = 10) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, base);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

bool parse_gid(const std::string& hex, std::array<uint8_t, 16>* gid) {
  if (hex.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i)
    if (!parse_number(hex.substr(2 * i, 2), &(*gid)[i], 16)) return false;
  return true;
}

bool parse_qpns(const std::string& list, std::vector<uint32_t>* out) {
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    uint32_t q = 0;
    if (!parse_number(item, &q)) return false;
    out->push_back(q);
  }
  return !out->empty();
}

}  // namespace

std::string VerbsAddress::to_string() const {
  char gid_hex[33] = {};
  for (size_t i = 0; i < 16; ++i) std::snprintf(gid_hex + 2 * i, 3, "%02x", gid[i]);
  char credit[64];
  std::snprintf(credit, sizeof credit, "%llx/%u", static_cast<unsigned long long>(credit_addr), credit_rkey);
  std::string out = kPrefix;  // appended piecewise: GCC 12 misreports `"literal" + std::string&&` (-Wrestrict)
  out += "rank=" + std::to_string(rank);
  out += ";host=" + host;
  out += ";dev=" + device;
  out += ";lid=" + std::to_string(lid);
  out += std::string(";gid=") + gid_hex;
  out += std::string(";eth=") + (ethernet ? "1" : "0");
  out += ";mtu=" + std::to_string(mtu);
  out += ";psn=" + std::to_string(psn);
  out += std::string(";credit=") + credit;
  out += ";qpn=";
  for (size_t i = 0; i < qpn.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(qpn[i]);
  }
  if (qps != 1) out += ";qps=" + std::to_string(qps);
  if (!live.empty()) out += ";live=" + live;
  if (!cm.empty()) out += ";cm=" + cm;
  return out;
}

Result<VerbsAddress> VerbsAddress::parse(const std::string& text) {
  if (text.rfind(kPrefix, 0) != 0) return malformed(text, "it does not start with 'verbs:'");
  std::map<std::string, std::string> fields;
  std::istringstream in(text.substr(sizeof kPrefix - 1));
  std::string item;
  while (std::getline(in, item, ';')) {
    size_t eq = item.find('=');
    if (eq == std::string::npos) return malformed(text, "field '" + item + "' has no '='");
    fields[item.substr(0, eq)] = item.substr(eq + 1);
  }
  for (const char* key : {"rank", "host", "dev", "lid", "gid", "eth", "mtu", "psn", "credit", "qpn"})
    if (fields.count(key) == 0) return malformed(text, std::string("field '") + key + "' is missing");
  VerbsAddress a;
  a.host = fields["host"];
  a.device = fields["dev"];
  if (!parse_number(fields["rank"], &a.rank) || a.rank < 0) return malformed(text, "bad rank");
  if (!parse_number(fields["lid"], &a.lid)) return malformed(text, "bad lid");
  if (!parse_gid(fields["gid"], &a.gid)) return malformed(text, "bad gid (32 hex digits)");
  if (fields["eth"] != "0" && fields["eth"] != "1") return malformed(text, "bad eth flag");
  a.ethernet = fields["eth"] == "1";
  if (!parse_number(fields["mtu"], &a.mtu) || a.mtu < 1 || a.mtu > 5) return malformed(text, "bad mtu");
  if (!parse_number(fields["psn"], &a.psn) || a.psn > 0xffffff) return malformed(text, "bad psn");
  const std::string& credit = fields["credit"];
  size_t slash = credit.find('/');
  if (slash == std::string::npos || !parse_number(credit.substr(0, slash), &a.credit_addr, 16) ||
      !parse_number(credit.substr(slash + 1), &a.credit_rkey))
    return malformed(text, "bad credit field");
  if (fields.count("qps") && (!parse_number(fields["qps"], &a.qps) || a.qps < 1 || a.qps > 64))
    return malformed(text, "bad qps (1..64)");
  if (!parse_qpns(fields["qpn"], &a.qpn) || a.qpn.size() % static_cast<size_t>(a.qps) != 0 ||
      a.qpn.size() / static_cast<size_t>(a.qps) <= static_cast<size_t>(a.rank))
    return malformed(text, "bad qpn list");
  a.live = fields.count("live") ? fields["live"] : "";
  a.cm = fields.count("cm") ? fields["cm"] : "";
  return a;
}

}  // namespace zw::transport::verbs
