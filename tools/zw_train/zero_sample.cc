// zw_train/zero_sample.cc — consolidating a ZeRO-3 checkpoint into the single-process parameter layout.
//
// Non-goals: see zero_sample.h.
#include "zw_train/zero_sample.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "zero/checkpoint.h"
#include "zero/safetensors.h"
#include "zw_train/config.h"

namespace zw::train {

bool is_zero_checkpoint(const std::string& dir) { return std::filesystem::exists(dir + "/latest"); }

Result<ZeroParams> load_zero_params(const std::string& dir) {
  std::ifstream latest(dir + "/latest"), model(dir + "/" + kZeroModelFile);
  std::string tag;
  if (!(latest >> tag)) return Status(Code::kNotFound, "sample: " + dir + "/latest names no checkpoint");
  const nlohmann::json mj = nlohmann::json::parse(model, nullptr, false);
  if (mj.is_discarded())
    return Status(Code::kInvalidArgument, "sample: " + dir + "/" + kZeroModelFile + " is missing or not JSON");
  ZeroParams out;
  ZW_ASSIGN_OR_RETURN(out.model, model_from_json(mj));
  const std::string tmp =
      std::filesystem::temp_directory_path().string() + "/zw_sample_" + std::to_string(::getpid()) + ".safetensors";
  ZW_TRY(zero::consolidate_checkpoint(dir + "/" + tag, tmp, DataType::kFloat32));
  Result<zero::SafetensorsReader> reader = zero::SafetensorsReader::open(tmp);
  std::filesystem::remove(tmp);  // the open file stays readable
  ZW_TRY(reader.status().ok() ? Status() : reader.status());
  ZW_ASSIGN_OR_RETURN(const tensor::GptLayout layout, tensor::make_gpt_layout(out.model));
  out.params.assign(layout.total_numel, 0.0f);
  for (const tensor::Unit& u : layout.units)
    for (const tensor::ParamSlot& s : u.slots) {
      ZW_ASSIGN_OR_RETURN(const zero::StTensor* t, reader->find(s.name));
      if (t->dtype != "F32" || t->bytes() != size_t(s.numel()) * 4)
        return Status(Code::kInvalidArgument, "sample: " + s.name + " in " + dir + "/" + tag + " is " + t->dtype +
                                                  " of " + std::to_string(t->bytes()) + " bytes, expected F32 " +
                                                  s.shape.to_string());
      ZW_TRY(reader->read(*t, 0, out.params.data() + u.offset + s.offset, t->bytes()));
    }
  return out;
}

}  // namespace zw::train
