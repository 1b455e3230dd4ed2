// zero/checkpoint/checkpoint_consolidate.cc — a sharded checkpoint to one safetensors file of full parameters.
//
// The output header is known from the layout alone (names, shapes, dtype), so the file streams: for each unit in
// layout order, gather its [0, numel) master elements from the old ranks' "<unit>/master" ranges into one
// unit-sized buffer, then write each parameter (converted to bf16/f16 with round-to-nearest-even when asked).
// Memory: one unit of fp32 plus one parameter of 16-bit output. Non-goals: optimizer state in the output
// (it is training state, not a model), other dtypes.
#include <algorithm>
#include <set>

#include "common/log.h"
#include "kernels/element.h"
#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/checkpoint_index.h"
#include "zero/checkpoint/safetensors.h"

namespace zw::zero {
namespace {

Result<std::string> st_dtype(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return std::string("F32");
    case DataType::kBFloat16:
      return std::string("BF16");
    case DataType::kFloat16:
      return std::string("F16");
    default:
      return Status(Code::kInvalidArgument, std::string("consolidate: dtype ") + dtype_name(dtype) +
                                                " is not supported; use float, bfloat16 or half");
  }
}

Status verify_all(const std::string& dir, const CheckpointIndex& index) {
  for (const IndexFileEntry& e : index.files) {
    const std::string path = join_path(dir, e.file);
    ZW_ASSIGN_OR_RETURN(ReadFile f, ReadFile::open(path));
    ZW_ASSIGN_OR_RETURN(FileDigest d, f.digest());
    if (d.bytes != e.bytes || d.xxh64 != e.xxh64)
      return Status(Code::kInvalidArgument, "checkpoint " + dir + " is corrupt: " + path + " has size " +
                                                std::to_string(d.bytes) + " and xxh64 " + hex64(d.xxh64) +
                                                ", the index says " + std::to_string(e.bytes) + " and " +
                                                hex64(e.xxh64) + "; restore it or use an older checkpoint");
  }
  return Status();
}

// Fills unit[0, numel) from the old ranks' master shards.
Status gather_unit(const std::vector<SafetensorsReader>& readers, const CheckpointIndex& index,
                   const tensor::UnitLayout& u, std::vector<float>& unit) {
  unit.assign(static_cast<size_t>(u.numel), 0.0f);
  const int64_t s = shard_numel(u, index.world_size);
  for (int r = 0; r < index.world_size && s > 0; ++r) {
    const int64_t lo = r * s, hi = std::min(u.numel, lo + s);
    if (lo >= hi) break;
    ZW_ASSIGN_OR_RETURN(const StTensor* t, readers[r].find(u.name + "/master"));
    if (t->dtype != "F32" || t->shape != std::vector<int64_t>{s})
      return Status(Code::kInvalidArgument,
                    readers[r].file().path() + ": " + t->name + " is not F32 of the shard size");
    ZW_TRY(readers[r].read(*t, 0, unit.data() + lo, static_cast<size_t>(hi - lo) * sizeof(float)));
  }
  return Status();
}

Status write_param(SafetensorsWriter& w, const float* src, size_t n, DataType dtype, std::vector<uint16_t>& half) {
  if (dtype == DataType::kFloat32) return w.write(src, n * sizeof(float));
  half.resize(n);
  for (size_t i = 0; i < n; ++i)
    half[i] = dtype == DataType::kBFloat16 ? kernels::f32_to_bf16(src[i]) : kernels::f32_to_f16(src[i]);
  return w.write(half.data(), n * sizeof(uint16_t));
}

}  // namespace

Status consolidate_checkpoint(const std::string& dir, const std::string& out_path, DataType dtype, bool verify) {
  ZW_ASSIGN_OR_RETURN(std::string st_name, st_dtype(dtype));
  ZW_ASSIGN_OR_RETURN(CheckpointIndex index, read_index(dir));
  if (verify) ZW_TRY(verify_all(dir, index));
  std::vector<SafetensorsReader> readers;
  for (const IndexFileEntry& e : index.files) {
    ZW_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::open(join_path(dir, e.file)));
    readers.push_back(std::move(r));
  }
  std::vector<StTensor> tensors;
  std::set<std::string> names;
  for (const tensor::UnitLayout& u : index.layout.units) {
    for (const tensor::ParamLayout& p : u.params) {
      if (!names.insert(p.name).second)
        return Status(Code::kInvalidArgument, "consolidate: parameter name \"" + p.name +
                                                  "\" appears in two units of " + dir + "; names must be unique");
      tensors.push_back({p.name, st_name, shape_dims(p.shape)});
    }
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"},
                                                   {"zerowire_step", std::to_string(index.step)},
                                                   {"zerowire_world_size", std::to_string(index.world_size)}};
  ZW_ASSIGN_OR_RETURN(SafetensorsWriter w, SafetensorsWriter::create(out_path, std::move(tensors), meta));
  std::vector<float> unit;
  std::vector<uint16_t> half;
  for (const tensor::UnitLayout& u : index.layout.units) {
    ZW_TRY(gather_unit(readers, index, u, unit));
    for (const tensor::ParamLayout& p : u.params)
      ZW_TRY(write_param(w, unit.data() + p.offset, static_cast<size_t>(p.numel()), dtype, half));
  }
  ZW_ASSIGN_OR_RETURN(FileDigest d, w.commit());
  ZW_INFO(kZero, "consolidated %s (step %lld, %d shards) into %s: %llu bytes", dir.c_str(),
          static_cast<long long>(index.step), index.world_size, out_path.c_str(),
          static_cast<unsigned long long>(d.bytes));
  return Status();
}

}  // namespace zw::zero
