// tests/model/golden_io.cc — parsing of the golden header and raw data (see golden_io.h).
#include "tests/model/golden_io.h"

#include <fstream>
#include <sstream>

namespace zw::model::testing {

const GoldenTensor* Golden::find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

Result<Golden> load_golden(const std::string& dir, const std::string& stem) {
  std::ifstream header(dir + "/" + stem + ".txt");
  std::ifstream data(dir + "/" + stem + ".bin", std::ios::binary);
  if (!header || !data)
    return Status(Code::kNotFound, "golden files " + dir + "/" + stem +
                                       ".{txt,bin} not found; run "
                                       "tests/model/make_golden.py");
  Golden g;
  std::string line;
  while (std::getline(header, line)) {
    std::istringstream in(line);
    std::string kind;
    if (!(in >> kind) || kind[0] == '#') continue;
    if (kind == "config" || kind == "adamw") {
      std::string key;
      double value;
      while (in >> key >> value) (kind == "config" ? g.config : g.adamw)[key] = value;
      continue;
    }
    std::string name, dtype;
    int rank = 0;
    if (kind != "tensor" || !(in >> name >> dtype >> rank))
      return Status(Code::kInvalidArgument, "golden header: bad line '" + line + "'");
    GoldenTensor t;
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) {
      int64_t d = 0;
      in >> d;
      t.shape.push_back(d);
      n *= d;
    }
    if (dtype == "f32") {
      t.f32.resize(n);
      data.read(reinterpret_cast<char*>(t.f32.data()), n * 4);
    } else if (dtype == "i32") {
      t.i32.resize(n);
      data.read(reinterpret_cast<char*>(t.i32.data()), n * 4);
    } else {
      return Status(Code::kInvalidArgument, "golden header: unknown dtype " + dtype);
    }
    if (!data) return Status(Code::kInvalidArgument, "golden data: truncated at tensor " + name);
    g.tensors[name] = std::move(t);
  }
  return g;
}

}  // namespace zw::model::testing
