// zw_train/main.cc — command line of the reference GPT trainer: train (default), --sample, --dump-corpus.
//
// Examples:
//   zw_train --steps 300 --out-dir run1                      # embedded corpus, no download; on the GPU if there
//                                                            # is one (bf16), else on the CPU (--device cpu|cuda)
//   zw_train --data input.txt --layers 6 --d-model 256 --heads 8 --seq-len 256 --out-dir run2
//   zw_train --out-dir run1 --steps 600 --resume             # continue exactly where run1 stopped
//   zw_train --sample --ckpt run1/ckpt --prompt "the cat" --tokens 200 --temperature 0.8 --seed 7
//   zwrun -n 4 -- zw_train --deepspeed_config ds.json --steps 100   # ZeRO-3 across 4 ranks (trainer.h)
// Non-goals: config files other than the DeepSpeed JSON of --deepspeed_config.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "zw_train/config.h"
#include "zw_train/data.h"
#include "zw_train/sample.h"
#include "zw_train/trainer.h"

namespace {

void add_train_flags(CLI::App& app, zw::train::TrainConfig& c) {
  app.add_option("--layers", c.model.num_layers, "transformer blocks")->capture_default_str();
  app.add_option("--d-model", c.model.d_model, "channels")->capture_default_str();
  app.add_option("--heads", c.model.num_heads, "attention heads (divides --d-model)")->capture_default_str();
  app.add_option("--seq-len", c.model.max_seq_len, "context length T")->capture_default_str();
  app.add_option("--vocab", c.model.vocab_size, "vocabulary (256 for the byte tokenizer)")->capture_default_str();
  app.add_option("--batch", c.batch, "sequences per step")->capture_default_str();
  app.add_option("--gradient-accumulation-steps", c.grad_accum,
                 "with --deepspeed_config: fills \"auto\" gradient_accumulation_steps (the micro batch is --batch / "
                 "(this × ranks))")
      ->capture_default_str();
  app.add_option("--steps", c.steps, "total optimizer steps (and the LR schedule's length)")->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate")->capture_default_str();
  app.add_option("--min-lr", c.min_lr, "learning rate at the end of the cosine decay")->capture_default_str();
  app.add_option("--warmup-steps", c.warmup_steps, "linear warmup steps")->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "AdamW decay of matmul weights and embeddings")
      ->capture_default_str();
  app.add_option("--grad-clip", c.grad_clip, "max global gradient norm (0: off)")->capture_default_str();
  app.add_option("--seed", c.seed, "init, batch sampling and text sampling seed")->capture_default_str();
  app.add_option("--data", c.data, "byte-level training text (default: the embedded corpus)");
  app.add_option("--data-bin", c.data_bin, "llm.c token shard (uint16 tokens; set --vocab to match)");
  app.add_option("--out-dir", c.out_dir, "metrics.jsonl and ckpt/ are written here")->capture_default_str();
  app.add_option("--log-every", c.log_every, "progress line every N steps")->capture_default_str();
  app.add_option("--eval-every", c.eval_every, "validation loss every N steps (0: at the end)")->capture_default_str();
  app.add_option("--eval-batches", c.eval_batches, "validation batches per evaluation")->capture_default_str();
  app.add_option("--ckpt-every", c.ckpt_every, "checkpoint every N steps (0: at the end only; -1: never, e.g. for benchmarks)")->capture_default_str();
  app.add_flag("--resume", c.resume, "continue from OUT_DIR/ckpt when it exists");
  app.add_option("--stop-after", c.stop_after, "stop after N steps of this run, with a checkpoint (0: no)");
  app.add_option("--threads", c.threads, "OpenBLAS threads (fixed for reproducible results)")->capture_default_str();
  app.add_flag("--quiet", c.quiet, "no progress lines");
  app.add_option("--device", c.device, "cuda, cpu, or auto (cuda where a GPU is visible)")->capture_default_str();
  app.add_option("--dtype", c.dtype,
                 "compute dtype: bf16, fp16 (dynamic loss scaling) or fp32; auto = bf16 on cuda, fp32 on cpu")
      ->capture_default_str();
  app.add_option("--peak-tflops", c.peak_tflops, "MFU denominator in TFLOP/s (default: H100/H200 SXM dense bf16)")
      ->capture_default_str();
  app.add_option("--recompute", c.recompute,
                 "activations backward recomputes instead of keeping per block: all (layernorm and GELU outputs; the "
                 "least memory), gelu (the GELU output only) or none")
      ->check(CLI::IsMember({"all", "gelu", "none"}))
      ->capture_default_str();
  app.add_flag("--profile", c.profile,
               "CUDA: time every op on the device (CUDA events) from the second step on and print a table per step");
  app.add_option("--timeline", c.timeline,
                 "with --deepspeed_config: record collective and compute spans; rank r writes PREFIX.rank<r>.json "
                 "(Chrome trace JSON) and rank 0 prints the fraction of communication hidden behind compute");
  app.add_option("--fault-ckpt-abort-bytes", c.fault_ckpt_abort_bytes,
                 "testing: abort() after writing N bytes of the next checkpoint")
      ->group("");
}

int dump_corpus(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  const std::string text = zw::train::embedded_corpus();
  out.write(text.data(), std::streamsize(text.size()));
  if (!out) {
    std::fprintf(stderr, "zw_train: cannot write %s\n", path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zw_train: reference GPT-2 trainer on zerowire (one process on a GPU or the CPU, or ZeRO-3 with zwrun)"};
  zw::train::TrainConfig train;
  zw::train::SampleConfig sample;
  bool sample_mode = false;
  std::string dump_path;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag overrides
  add_train_flags(app, train);
  app.add_flag("--sample", sample_mode, "generate text from --ckpt instead of training");
  app.add_option("--ckpt", sample.ckpt_dir, "checkpoint directory to sample from (OUT_DIR/ckpt)");
  app.add_option("--prompt", sample.prompt, "text to continue");
  app.add_option("--tokens", sample.tokens, "tokens to generate")->capture_default_str();
  app.add_option("--temperature", sample.temperature, "sampling temperature (0: greedy)")->capture_default_str();
  app.add_option("--dump-corpus", dump_path, "write the embedded corpus to a file and exit");
  std::string ds_config;
  app.add_option("--deepspeed_config,--deepspeed-config", ds_config,
                 "DeepSpeed JSON: train with ZeRO-3 across the ranks of zwrun; \"auto\" takes the flags, and values "
                 "the file gives win over them (README: bring your DeepSpeed config)");
  CLI11_PARSE(app, argc, argv);
  for (const CLI::Option* opt : app.get_options())
    if (opt->count() > 0) train.flags_given.insert(opt->get_name());  // a DeepSpeed config says which of them won

  if (!dump_path.empty()) return dump_corpus(dump_path);
  if (sample_mode) {
    if (sample.ckpt_dir.empty()) sample.ckpt_dir = train.out_dir + "/ckpt";
    sample.seed = train.seed;
    sample.threads = train.threads;
    sample.device = train.device;
    std::fputs(sample.prompt.c_str(), stdout);
    const zw::Status st = zw::train::sample(sample, [](const std::string& s) {
      std::fwrite(s.data(), 1, s.size(), stdout);  // a byte may be NUL
      std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    if (!st.ok()) {
      std::fprintf(stderr, "zw_train: %s\n", st.to_string().c_str());
      return 1;
    }
    return 0;
  }
  const zw::Result<zw::train::TrainReport> report =
      ds_config.empty() ? zw::train::run_training(train) : zw::train::run_zero_training_from_env(train, ds_config);
  if (!report.ok()) {
    std::fprintf(stderr, "zw_train: %s\n", report.status().to_string().c_str());
    return 1;
  }
  if (report->reporter) {
    if (report->peak_device_bytes > 0)
      std::printf("zw_train: done, %zu steps this run, median %.0f tokens/s, MFU %.1f %%, peak device memory %.1f GiB "
                  "(%s)\n",
                  report->losses.size(), report->tokens_per_s, report->mfu,
                  double(report->peak_device_bytes) / double(1 << 30), report->device.c_str());
    else
      std::printf("zw_train: done, %zu steps this run, median %.0f tokens/s (%s)\n", report->losses.size(),
                  report->tokens_per_s, report->device.c_str());
  }
  return 0;
}
