// zero/checkpoint/safetensors.cc — header building and validation for the safetensors format.
// Non-goals: preserving header key order on read (the data order is what matters).
#include "zero/checkpoint/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

namespace zw::zero {
namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;  // as the reference implementation

Status bad_file(const std::string& path, const std::string& what) {
  return Status(Code::kInvalidArgument,
                path + " is not a valid safetensors file: " + what + "; the file is damaged or not a checkpoint shard");
}

Result<uint64_t> tensor_bytes(const StTensor& t) {
  const size_t eb = dtype_bytes(t.dtype);
  if (eb == 0) return Status(Code::kInvalidArgument, "tensor " + t.name + " has unknown dtype \"" + t.dtype + "\"");
  uint64_t n = 1;
  for (int64_t e : t.shape) {
    if (e < 0) return Status(Code::kInvalidArgument, "tensor " + t.name + " has a negative extent");
    if (e != 0 && n > UINT64_MAX / 16 / static_cast<uint64_t>(e))
      return Status(Code::kInvalidArgument, "tensor " + t.name + " is too large");
    n *= static_cast<uint64_t>(e);
  }
  return n * eb;
}

Status parse_entry(const std::string& path, const std::string& name, const nlohmann::json& v, StTensor* t) {
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
    return bad_file(path, "entry \"" + name + "\" lacks dtype, shape or data_offsets");
  try {
    t->name = name;
    t->dtype = v["dtype"].get<std::string>();
    // Integers only: nlohmann converts a float with a cast that is undefined out of range (found by
    // tests/fuzz/fuzz_safetensors).
    for (const auto& e : v["shape"].get_ref<const nlohmann::json::array_t&>()) {
      if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > INT64_MAX))
        return bad_file(path, "an extent of \"" + name + "\" is not an integer of int64 range");
      t->shape.push_back(e.get<int64_t>());
    }
    const auto& offsets = v["data_offsets"].get_ref<const nlohmann::json::array_t&>();
    if (offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned() ||
        offsets[0].get<uint64_t>() > offsets[1].get<uint64_t>())
      return bad_file(path, "bad data_offsets of \"" + name + "\"");
    t->begin = offsets[0].get<uint64_t>();
    t->end = offsets[1].get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    return bad_file(path, "entry \"" + name + "\": " + e.what());
  }
  auto want = tensor_bytes(*t);
  if (!want.ok()) return bad_file(path, want.status().message());
  if (want.value() != t->bytes())
    return bad_file(path, "\"" + name + "\" spans " + std::to_string(t->bytes()) +
                              " bytes but its dtype and shape need " + std::to_string(want.value()));
  return Status();
}

}  // namespace

size_t dtype_bytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "U8" || d == "I8" || d == "BOOL") return 1;
  return 0;
}

Result<SafetensorsWriter> SafetensorsWriter::create(const std::string& path, std::vector<StTensor> tensors,
                                                    const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (StTensor& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name))
      return Status(Code::kInvalidArgument,
                    "safetensors " + path + ": duplicate or reserved tensor name \"" + t.name + "\"");
    ZW_ASSIGN_OR_RETURN(uint64_t bytes, tensor_bytes(t));
    t.begin = offset;
    t.end = offset + bytes;
    offset = t.end;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // data starts 8-byte aligned
  ZW_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  const uint64_t n = text.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  ZW_TRY(file.write(len, 8));
  ZW_TRY(file.write(text.data(), text.size()));
  return SafetensorsWriter(std::move(file), std::move(tensors), offset);
}

Status SafetensorsWriter::write(const void* data, size_t bytes) {
  if (written_ + bytes > data_bytes_)
    return Status(Code::kInternal, "safetensors " + file_.path() + ": " + std::to_string(written_ + bytes) +
                                       " data bytes written, more than the " + std::to_string(data_bytes_) +
                                       " declared");
  written_ += bytes;
  return file_.write(data, bytes);
}

Result<FileDigest> SafetensorsWriter::commit() {
  if (written_ != data_bytes_)
    return Status(Code::kInternal, "safetensors " + file_.path() + ": only " + std::to_string(written_) + " of " +
                                       std::to_string(data_bytes_) + " declared data bytes were written");
  return file_.commit();
}

Result<SafetensorsReader> SafetensorsReader::open(const std::string& path) {
  ZW_ASSIGN_OR_RETURN(ReadFile file, ReadFile::open(path));
  SafetensorsReader r(std::move(file));
  const uint64_t size = r.file_.size();
  if (size < 8) return bad_file(path, "only " + std::to_string(size) + " bytes");
  uint8_t len[8];
  ZW_TRY(r.file_.pread_exact(len, 8, 0));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > kMaxHeader || n > size - 8)
    return bad_file(path,
                    "header length " + std::to_string(n) + " exceeds the file (" + std::to_string(size) + " bytes)");
  std::string text(n, '\0');
  ZW_TRY(r.file_.pread_exact(text.data(), n, 8));
  const auto header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return bad_file(path, "the header is not a JSON object");
  r.data_start_ = 8 + n;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return bad_file(path, "__metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) return bad_file(path, "__metadata__ value of \"" + k + "\" is not a string");
        r.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    StTensor t;
    ZW_TRY(parse_entry(path, key, value, &t));
    r.tensors_.push_back(std::move(t));
  }
  std::sort(r.tensors_.begin(), r.tensors_.end(), [](const StTensor& a, const StTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  for (size_t i = 0; i < r.tensors_.size(); ++i) {
    if (r.tensors_[i].begin != expect)
      return bad_file(path, "tensor data has a hole or overlap at \"" + r.tensors_[i].name + "\"");
    expect = r.tensors_[i].end;
    r.by_name_[r.tensors_[i].name] = i;
  }
  if (expect != size - r.data_start_)  // data_start_ <= size; written so that a huge `expect` cannot wrap around
    return bad_file(path, "the tensors cover " + std::to_string(expect) + " data bytes but the file holds " +
                              std::to_string(size - r.data_start_) + " (truncated or extended)");
  return r;
}

Result<const StTensor*> SafetensorsReader::find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return Status(Code::kNotFound, file_.path() + " has no tensor \"" + name + "\"");
  return &tensors_[it->second];
}

Status SafetensorsReader::read(const StTensor& t, uint64_t offset, void* dst, size_t bytes) const {
  if (offset > t.bytes() || bytes > t.bytes() - offset)
    return Status(Code::kInternal, "read of bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                                       ") outside tensor " + t.name + " of " + file_.path());
  return file_.pread_exact(dst, bytes, data_start_ + t.begin + offset);
}

Result<std::string> SafetensorsReader::meta(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return Status(Code::kNotFound, file_.path() + " has no __metadata__ key \"" + key + "\"");
  return it->second;
}

}  // namespace zw::zero
