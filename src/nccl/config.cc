// nccl/config.cc — ncclConfig_t read by its size/magic/version prefix, ncclGetVersion, and NCCL's data types and
// reductions as zerowire's.
//
// A config from an older NCCL is shorter: a field is read only when the caller's struct (config->size bytes)
// contains it, so older programs keep working. A config claiming a newer NCCL than this library's 2.28.9 is refused
// (ncclInvalidArgument): its later fields may ask for something this library would silently ignore.
// Types: every NCCL type moves (as bytes where zerowire has no such type); reductions need a type zerowire reduces:
// int32/int64/uint8/half/float/double/bfloat16 with any reduction, uint32/uint64 with sum and prod (two's complement
// makes them the signed sums), not int8 or the fp8 types (ncclInvalidUsage, named).
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <utility>

#include "nccl/nccl_internal.h"

namespace zw::nccl {
namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;
constexpr unsigned kFirstConfigVersion = 21400;  // NCCL 2.14 introduced ncclConfig_t

template <typename T>
bool has_field(const ncclConfig_t* c, size_t offset) {
  return c->size >= offset + sizeof(T);
}

}  // namespace

ncclResult_t read_config(const ncclConfig_t* c, CommOptions* out) {
  *out = CommOptions{};
  if (c == nullptr) return ncclSuccess;
  if (c->magic != kConfigMagic) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "ncclConfig_t has magic 0x%x, not 0x%x: initialize it with NCCL_CONFIG_INITIALIZER", c->magic,
                  kConfigMagic);
    return fail(nullptr, ncclInvalidArgument, text);
  }
  if (c->version < kFirstConfigVersion || c->version > NCCL_VERSION_CODE || c->size < offsetof(ncclConfig_t, cgaClusterSize))
    return fail(nullptr, ncclInvalidArgument,
                "ncclConfig_t claims NCCL version " + std::to_string(c->version) + " and " + std::to_string(c->size) +
                    " bytes; this library implements NCCL " + std::to_string(NCCL_VERSION_CODE) + " (struct of " +
                    std::to_string(sizeof(ncclConfig_t)) + " bytes) and reads configs from 2.14 up to it: build "
                    "against its nccl.h");
  if (has_field<int>(c, offsetof(ncclConfig_t, blocking)) && c->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (c->blocking != 0 && c->blocking != 1)
      return fail(nullptr, ncclInvalidArgument,
                  "ncclConfig_t::blocking is " + std::to_string(c->blocking) + ": it must be 0 or 1");
    out->blocking = c->blocking == 1;
  }
  if (has_field<const char*>(c, offsetof(ncclConfig_t, commName)) && c->commName != nullptr) out->name = c->commName;
  if (has_field<int>(c, offsetof(ncclConfig_t, maxCTAs)) && c->maxCTAs != NCCL_CONFIG_UNDEF_INT) {
    if (c->maxCTAs < 1)
      return fail(nullptr, ncclInvalidArgument,
                  "ncclConfig_t::maxCTAs is " + std::to_string(c->maxCTAs) + ": it must be at least 1");
    out->max_ctas = c->maxCTAs;
  }
  // Hints that shape NCCL's own kernels, network plugins or sharing between communicators: accepted, named in the log.
  auto note = [&](const char* field, const std::string& value) {
    out->ignored += (out->ignored.empty() ? "" : ", ") + std::string(field) + "=" + value;
  };
  static constexpr std::pair<const char*, size_t> kIntHints[] = {
      {"cgaClusterSize", offsetof(ncclConfig_t, cgaClusterSize)},
      {"minCTAs", offsetof(ncclConfig_t, minCTAs)},
      {"splitShare", offsetof(ncclConfig_t, splitShare)},
      {"trafficClass", offsetof(ncclConfig_t, trafficClass)},
      {"collnetEnable", offsetof(ncclConfig_t, collnetEnable)},
      {"CTAPolicy", offsetof(ncclConfig_t, CTAPolicy)},
      {"shrinkShare", offsetof(ncclConfig_t, shrinkShare)},
      {"nvlsCTAs", offsetof(ncclConfig_t, nvlsCTAs)},
      {"nChannelsPerNetPeer", offsetof(ncclConfig_t, nChannelsPerNetPeer)},
      {"nvlinkCentricSched", offsetof(ncclConfig_t, nvlinkCentricSched)},
  };
  for (const auto& [field, offset] : kIntHints) {
    if (!has_field<int>(c, offset)) continue;
    int value = 0;
    std::memcpy(&value, reinterpret_cast<const char*>(c) + offset, sizeof value);
    if (value != NCCL_CONFIG_UNDEF_INT) note(field, std::to_string(value));
  }
  if (has_field<const char*>(c, offsetof(ncclConfig_t, netName)) && c->netName != nullptr) note("netName", c->netName);
  return ncclSuccess;
}

size_t nccl_type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

ncclResult_t map_dtype(ncclComm* comm, ncclDataType_t type, bool reduces, ncclRedOp_t op, DataType* out) {
  bool exact = true;  // zerowire reduces this type as NCCL does
  switch (type) {
    case ncclFloat32: *out = DataType::kFloat32; break;
    case ncclFloat16: *out = DataType::kFloat16; break;
    case ncclBfloat16: *out = DataType::kBFloat16; break;
    case ncclFloat64: *out = DataType::kFloat64; break;
    case ncclInt32: *out = DataType::kInt32; break;
    case ncclInt64: *out = DataType::kInt64; break;
    case ncclUint8: *out = DataType::kUInt8; break;
    case ncclUint32:
      *out = DataType::kInt32;
      exact = op == ncclSum || op == ncclProd;
      break;
    case ncclUint64:
      *out = DataType::kInt64;
      exact = op == ncclSum || op == ncclProd;
      break;
    case ncclInt8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      *out = DataType::kUInt8;
      exact = false;
      break;
    default:
      return fail(comm, ncclInvalidArgument,
                  "data type " + std::to_string(static_cast<int>(type)) + " is not an NCCL 2.28 type (0.." +
                      std::to_string(ncclNumTypes - 1) + ")");
  }
  if (reduces && !exact)
    return fail(comm, ncclInvalidUsage,
                "zerowire cannot reduce NCCL data type " + std::to_string(static_cast<int>(type)) +
                    " with this operation (no int8 or fp8 reductions; uint32/uint64 only with sum and prod)");
  return ncclSuccess;
}

}  // namespace zw::nccl

extern "C" ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return zw::nccl::fail(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
