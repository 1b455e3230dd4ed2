// The corpus of real-world-shaped DeepSpeed configs (corpus/*.json, written for these tests in the shapes of the
// Hugging Face Trainer/Accelerate examples, LLaMA-Factory, axolotl, LLaVA, FastChat, Megatron-DeepSpeed,
// DeepSpeedExamples and DeepSpeed-Chat) read exactly as zw_train reads them (load_ds_config: "auto" from the
// flags, 2 ranks). corpus/expected.json says for every file either that it trains, with the notes it gets, or
// the complete list of problems it is refused with, in file order; every file of the folder must be listed.
// That the "trains" files really train is corpus_train_test.sh's part.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "zw_train/ds_config.h"

namespace zw::train {
namespace {

const std::string kCorpus = std::string(ZW_CONFIG_TEST_DIR) + "/corpus";

nlohmann::json expected() {
  std::ifstream in(kCorpus + "/expected.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

// The flags corpus_train_test.sh passes: a tiny model, --batch 8, everything else zw_train's defaults.
TrainConfig flags() {
  TrainConfig c;
  c.model = model::GptConfig{1, 32, 2, 8, 256};
  c.batch = 8;
  c.steps = 2;
  return c;
}

// The problems of a failed load of `path`: one message, or the numbered lines of several (without their numbers).
std::vector<std::string> problems(const Status& s, const std::string& path) {
  std::string m = s.message();
  if (m.rfind(path + ": ", 0) == 0) m = m.substr(path.size() + 2);
  std::vector<std::string> out;
  if (m.find(" problems in the DeepSpeed config, in file order:") == std::string::npos) return {m};
  std::istringstream lines(m);
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) out.push_back(line.substr(line.find(". ") + 2));
  return out;
}

TEST(DeepSpeedCorpus, EveryFileTrainsOrIsRefusedWithAllItsReasons) {
  const nlohmann::json want = expected();
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpus)) {
    const std::string name = entry.path().filename().string();
    if (name == "expected.json") continue;
    ++files;
    ASSERT_TRUE(want.contains(name)) << name << " is not in corpus/expected.json";
    const nlohmann::json& w = want.at(name);
    Result<DsSetup> r = load_ds_config(flags(), entry.path().string(), 2, "2 test ranks");
    if (w.contains("trains")) {
      ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
      std::vector<std::string> notes;
      for (const zero::ConfigNote& n : r->ds.notes) notes.push_back(n.path);
      EXPECT_EQ(notes, w.at("notes").get<std::vector<std::string>>()) << name;
      EXPECT_EQ(r->ds.batch.train_batch_size, w.at("trains").at(0)) << name;
      EXPECT_EQ(r->ds.batch.micro_batch_per_gpu, w.at("trains").at(1)) << name;
      EXPECT_EQ(r->ds.batch.gradient_accumulation_steps, w.at("trains").at(2)) << name;
      continue;
    }
    ASSERT_FALSE(r.ok()) << name << " loaded, expected a refusal";
    const std::vector<std::string> got = problems(r.status(), entry.path().string());
    const std::vector<std::string> prefixes = w.at("refused");
    ASSERT_EQ(got.size(), prefixes.size()) << name << ":\n" << r.status().message();
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i].substr(0, prefixes[i].size()), prefixes[i]) << name << " problem " << i + 1 << ": " << got[i];
  }
  EXPECT_EQ(files, want.size()) << "corpus/expected.json lists a file the folder does not have";
  EXPECT_GE(files, 20u);
}

// The summary lines of a Hugging Face-style file: every "auto" with its source, and the schedule.
TEST(DeepSpeedCorpus, SummarySaysWhatEachAutoBecame) {
  Result<DsSetup> r = load_ds_config(flags(), kCorpus + "/hf_zero3_decay_auto.json", 2, "2 test ranks");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::string all;
  for (const std::string& l : r->lines) all += l + "\n";
  for (const char* line :
       {"optimizer.params.lr = \"auto\" -> 0.001 (--lr)", "scheduler.params.total_num_steps = \"auto\" -> 2 (--steps)",
        "train_micro_batch_size_per_gpu = \"auto\" -> 4 (inferred",
        "zero_optimization.reduce_bucket_size = \"auto\" -> 1024 (d_model²",
        "bf16.enabled = \"auto\" -> false (--dtype auto (fp32 here))",
        "lr schedule: DeepSpeed WarmupDecayLR: log warmup over 20 steps from 0 to 0.001"})
    EXPECT_NE(all.find(line), std::string::npos) << line << "\n" << all;
  EXPECT_EQ(r->train.log_every, 1);  // steps_per_print
  EXPECT_EQ(r->train.ds_scheduler.type, zero::SchedulerType::kWarmupDecayLR);
}

// Where the file and a flag both give a value, the file wins and the summary says so.
TEST(DeepSpeedCorpus, TheFileWinsOverAnExplicitFlagAndSaysSo) {
  TrainConfig c = flags();
  c.lr = 5e-4;
  c.log_every = 5;
  c.flags_given = {"--lr", "--log-every", "--batch"};
  Result<DsSetup> r = load_ds_config(c, kCorpus + "/dsexamples_zero3_warmup_cosine.json", 2, "2 test ranks");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::string all;
  for (const std::string& l : r->lines) all += l + "\n";
  EXPECT_NE(all.find("optimizer.params.lr = 0.0003 from the file wins over --lr 0.0005"), std::string::npos) << all;
  EXPECT_NE(all.find("steps_per_print = 1 from the file wins over --log-every 5"), std::string::npos) << all;
  EXPECT_NE(all.find("train_batch_size = 4 from the file wins over --batch 8"), std::string::npos) << all;
  EXPECT_DOUBLE_EQ(r->train.lr, 3e-4);
  EXPECT_EQ(r->train.log_every, 1);
  // Not given on the command line: no line, the file's value silently applies.
  EXPECT_EQ(all.find("--weight-decay"), std::string::npos) << all;
}

}  // namespace
}  // namespace zw::train
