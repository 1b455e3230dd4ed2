// zero/checkpoint/checkpoint_index.cc — index.json and DONE: JSON mapping, layout validation, the DONE gate.
// Non-goals: migrating older index formats.
#include "zero/checkpoint/checkpoint_index.h"

#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/checkpoint_io.h"

namespace zw::zero {
namespace {

Status bad_index(const std::string& where, const std::string& what) {
  return Status(Code::kInvalidArgument, where + ": " + what + "; the checkpoint is damaged or from another tool");
}

// Names of leftover temporary files in dir, for the "no DONE" message.
std::vector<std::string> temp_files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

Result<uint64_t> parse_hex64(const nlohmann::json& v, const std::string& where) {
  if (!v.is_string() || v.get<std::string>().size() != 16) return bad_index(where, "hash is not 16 hex digits");
  const std::string& text = v.get_ref<const std::string&>();
  uint64_t h = 0;
  for (char c : text) {  // hex digits only (stoull took a sign, blanks and "0x")
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return bad_index(where, "hash is not hexadecimal");
    h = h << 4 | static_cast<uint64_t>(d);
  }
  return h;
}

// Element counts, offsets and extents beyond this are refused: no checkpoint holds 2^50 elements, and sums and
// products of smaller ones are checked, so nothing derived from them overflows int64_t.
constexpr int64_t kMaxElements = int64_t{1} << 50;

// A field that is not an integer in range (thrown by integer(), caught with nlohmann's exceptions).
struct BadField {
  std::string what;
};

// The JSON integer `v` (named `what`) within [lo, hi]. A float is refused: nlohmann converts it with a cast that is
// undefined out of range (found by tests/fuzz/fuzz_checkpoint_index).
int64_t integer(const nlohmann::json& v, const std::string& what, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) throw BadField{what + " is " + v.type_name() + ", not an integer"};
  const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi);
  if (too_big || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw BadField{what + " = " + v.dump() + " is outside " + std::to_string(lo) + ".." + std::to_string(hi)};
  return v.get<int64_t>();
}

}  // namespace

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::vector<int64_t> shape_dims(const tensor::Shape& shape) {
  return std::vector<int64_t>(shape.dims, shape.dims + std::clamp(shape.rank, 0, tensor::kMaxDims));
}

Result<tensor::Shape> shape_from_dims(const std::vector<int64_t>& dims, const std::string& what) {
  if (dims.size() > size_t(tensor::kMaxDims))
    return Status(Code::kInvalidArgument, what + " has " + std::to_string(dims.size()) + " dimensions; at most " +
                                              std::to_string(tensor::kMaxDims) + " are supported");
  int64_t numel = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(numel, d, &numel) || numel > kMaxElements)
      return Status(Code::kInvalidArgument, what + " has a negative extent or more than 2^50 elements");
  tensor::Shape shape;
  shape.rank = int(dims.size());
  std::copy(dims.begin(), dims.end(), shape.dims);
  return shape;
}

nlohmann::json layout_to_json(const tensor::ModelLayout& layout, int world_size) {
  nlohmann::json units = nlohmann::json::array();
  for (const tensor::UnitLayout& u : layout.units) {
    nlohmann::json params = nlohmann::json::array();
    for (const tensor::ParamLayout& p : u.params)
      params.push_back({{"name", p.name}, {"shape", shape_dims(p.shape)}, {"offset", p.offset}});
    units.push_back({{"name", u.name}, {"numel", u.numel}, {"padded_numel", u.padded_numel}, {"params", params}});
  }
  return {{"world_size", world_size}, {"units", units}};
}

Result<tensor::ModelLayout> layout_from_json(const nlohmann::json& j, int world_size, const std::string& where) {
  tensor::ModelLayout layout;
  layout.unit_align = std::max(1, world_size);
  try {
    if (integer(j.at("world_size"), "the layout's world_size", 1, INT32_MAX) != world_size)
      return bad_index(where, "world_size, layout and file list disagree");
    for (const auto& ju : j.at("units")) {
      tensor::UnitLayout u;
      u.name = ju.at("name").get<std::string>();
      u.offset = layout.total_numel;
      u.numel = integer(ju.at("numel"), "numel of unit " + u.name, 0, kMaxElements);
      u.padded_numel = integer(ju.at("padded_numel"), "padded_numel of unit " + u.name, 0, kMaxElements);
      for (const auto& jp : ju.at("params")) {
        tensor::ParamLayout p;
        p.name = jp.at("name").get<std::string>();
        std::vector<int64_t> dims;
        for (const auto& d : jp.at("shape").get_ref<const nlohmann::json::array_t&>())
          dims.push_back(integer(d, "an extent of parameter " + p.name, 0, kMaxElements));
        auto shape = shape_from_dims(dims, "parameter " + p.name);
        if (!shape.ok()) return bad_index(where, shape.status().message());
        p.shape = shape.value();
        p.offset = integer(jp.at("offset"), "offset of parameter " + p.name, 0, kMaxElements);
        u.params.push_back(std::move(p));
      }
      if (__builtin_add_overflow(layout.total_numel, u.padded_numel, &layout.total_numel) ||
          __builtin_add_overflow(layout.num_params, u.numel, &layout.num_params) ||
          layout.total_numel > kMaxElements || layout.num_params > kMaxElements)
        return bad_index(where, "the units hold more than 2^50 elements");
      layout.units.push_back(std::move(u));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad_index(where, std::string("malformed layout (") + e.what() + ")");
  } catch (const BadField& e) {
    return bad_index(where, "malformed layout (" + e.what + ")");
  }
  ZW_TRY(validate_layout(layout, world_size, where));
  return layout;
}

Status validate_layout(const tensor::ModelLayout& layout, int world_size, const std::string& what) {
  if (world_size < 1) return Status(Code::kInvalidArgument, what + ": layout world_size must be >= 1");
  std::set<std::string> names;
  for (const tensor::UnitLayout& u : layout.units) {
    const std::string at = what + ": unit \"" + u.name + "\"";
    if (!names.insert(u.name).second) return Status(Code::kInvalidArgument, at + " appears twice in the layout");
    if (u.numel < 0 || u.padded_numel < u.numel || u.padded_numel % world_size != 0) {
      return Status(Code::kInvalidArgument, at + " has numel " + std::to_string(u.numel) + " and padded_numel " +
                                                std::to_string(u.padded_numel) +
                                                ", which is not >= numel and a multiple of world size " +
                                                std::to_string(world_size));
    }
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const tensor::ParamLayout& p : u.params) {
      if (p.numel() < 0) return Status(Code::kInvalidArgument, at + " parameter " + p.name + " has a negative extent");
      if (p.offset < 0 || p.offset + p.numel() > u.numel)
        return Status(Code::kInvalidArgument, at + " parameter " + p.name + " at offset " + std::to_string(p.offset) +
                                                  " does not fit in the unit's " + std::to_string(u.numel) +
                                                  " elements");
      ranges.emplace_back(p.offset, p.offset + p.numel());
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].first < ranges[i - 1].second)
        return Status(Code::kInvalidArgument,
                      at + " has overlapping parameters at element " + std::to_string(ranges[i].first));
  }
  return Status();
}

std::string index_to_json(const CheckpointIndex& index) {
  nlohmann::json files = nlohmann::json::array();
  for (const IndexFileEntry& f : index.files)
    files.push_back({{"rank", f.rank}, {"file", f.file}, {"bytes", f.bytes}, {"xxh64", hex64(f.xxh64)}});
  nlohmann::json j = {{"format", kCheckpointFormat},
                      {"version", kCheckpointVersion},
                      {"world_size", index.world_size},
                      {"step", index.step},
                      {"loss_scaler", index.loss_scaler},
                      {"tensors", kTensorKinds},
                      {"files", files},
                      {"layout", layout_to_json(index.layout, index.world_size)}};
  return j.dump(1);
}

Result<CheckpointIndex> read_index(const std::string& dir) {
  const std::string done_path = join_path(dir, kCheckpointDone);
  auto done_text = read_small_file(done_path);
  if (!done_text.ok()) {
    std::string tmps;
    for (const std::string& t : temp_files(dir)) {
      if (!tmps.empty()) tmps += ", ";
      tmps += t;
    }
    if (!tmps.empty()) tmps = "; temporary files of an interrupted save: " + tmps;
    return Status(Code::kNotFound, "checkpoint " + dir + " is incomplete: it has no " + kCheckpointDone + " marker (" +
                                       done_text.status().message() + ")" + tmps +
                                       "; the save that wrote it did not finish: load an older checkpoint");
  }
  const std::string index_path = join_path(dir, kCheckpointIndex);
  ZW_ASSIGN_OR_RETURN(std::string text, read_small_file(index_path));
  return parse_index(done_text.value(), text, done_path, index_path);
}

Result<CheckpointIndex> parse_index(std::string_view done_text, std::string_view text, const std::string& done_path,
                                    const std::string& index_path) {
  const auto done = nlohmann::json::parse(done_text, nullptr, false);
  if (!done.is_object() || !done.contains("index_bytes") || !done.contains("index_xxh64"))
    return bad_index(done_path, "not a DONE marker of this format");
  ZW_ASSIGN_OR_RETURN(uint64_t want_hash, parse_hex64(done["index_xxh64"], done_path));
  if (done["index_bytes"] != text.size() || Xxh64::of(text.data(), text.size()) != want_hash)
    return bad_index(index_path, "size or XXH64 differs from what " + done_path + " recorded");
  const auto j = nlohmann::json::parse(text, nullptr, false);
  const auto* format = j.is_object() && j.contains("format") ? j["format"].get_ptr<const std::string*>() : nullptr;
  if (format == nullptr || *format != kCheckpointFormat || !j.contains("version") || j["version"] != kCheckpointVersion)
    return bad_index(index_path, std::string("not a ") + kCheckpointFormat + " version 1 index");
  CheckpointIndex index;
  try {
    index.world_size = static_cast<int>(integer(j.at("world_size"), "world_size", 1, INT32_MAX));
    index.step = integer(j.at("step"), "step", 0, INT64_MAX);
    index.loss_scaler = j.at("loss_scaler").get<std::string>();
    for (const auto& f : j.at("files")) {
      IndexFileEntry e;
      e.rank = static_cast<int>(integer(f.at("rank"), "a file's rank", 0, INT32_MAX));
      e.file = f.at("file").get<std::string>();
      e.bytes = static_cast<uint64_t>(integer(f.at("bytes"), "a file's bytes", 0, INT64_MAX));
      ZW_ASSIGN_OR_RETURN(e.xxh64, parse_hex64(f.at("xxh64"), index_path));
      index.files.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad_index(index_path, std::string("malformed (") + e.what() + ")");
  } catch (const BadField& e) {
    return bad_index(index_path, "malformed (" + e.what + ")");
  }
  if (!j.contains("layout")) return bad_index(index_path, "no layout");
  if (index.world_size < 1 || index.files.size() != static_cast<size_t>(index.world_size))
    return bad_index(index_path, "world_size, layout and file list disagree");
  ZW_ASSIGN_OR_RETURN(index.layout, layout_from_json(j["layout"], index.world_size, index_path));
  for (int r = 0; r < index.world_size; ++r)
    if (index.files[r].rank != r) return bad_index(index_path, "files are not listed in rank order");
  return index;
}

}  // namespace zw::zero
