// zw_consolidate — turns a sharded ZeRO-3 checkpoint into one safetensors file of full parameters.
//
//   zw_consolidate <ckpt_dir> <out.safetensors> [--dtype f32|bf16|f16] [--no-verify]
//
// Reads <ckpt_dir>/index.json (refusing a checkpoint without DONE), checks every shard's XXH64 against the index
// unless --no-verify, and streams the fp32 master weights unit by unit into <out.safetensors> (written atomically),
// one unpadded tensor per parameter, named by parameter name, converted to bf16/f16 with round-to-nearest-even
// when asked. The output loads with Python's safetensors (safe_open / load_file). Exit code 0 on success, 1 on
// any error (printed on stderr), 2 on bad usage. Non-goals: exporting optimizer state, sharded outputs.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>

#include "zero/checkpoint/checkpoint.h"

int main(int argc, char** argv) {
  CLI::App app{"zw_consolidate: writes the full parameters of a sharded ZeRO-3 checkpoint into one safetensors file"};
  std::string dir, out, dtype = "f32";
  bool no_verify = false;
  app.add_option("ckpt_dir", dir, "checkpoint directory (with index.json and DONE)")->required();
  app.add_option("out", out, "output .safetensors file")->required();
  app.add_option("--dtype", dtype, "output dtype")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_flag("--no-verify", no_verify, "skip checking the shards' XXH64 hashes against the index");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const std::map<std::string, zw::DataType> dtypes = {
      {"f32", zw::DataType::kFloat32}, {"bf16", zw::DataType::kBFloat16}, {"f16", zw::DataType::kFloat16}};
  zw::Status st = zw::zero::consolidate_checkpoint(dir, out, dtypes.at(dtype), !no_verify);
  if (!st.ok()) {
    std::fprintf(stderr, "zw_consolidate: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
