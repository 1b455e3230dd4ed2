#!/usr/bin/python3
"""ds_gpt.py — torch_gpt.py's GPT trained by DeepSpeed ZeRO-3 with a DeepSpeed JSON, for bench/train/gpu.sh.

The anchor of issue 17's comparison: the same model (torch_gpt.GPT, SDPA attention), the same batches (zw_train's
SplitMix draw, one micro-batch of --batch windows after another), the same AdamW hyper-parameters, warmup + cosine
LR and gradient clipping as zw_train, trained by DeepSpeed with the JSON that zw_train reads (--deepspeed_config).
DeepSpeed runs as one process (RANK=0, WORLD_SIZE=1, LOCAL_RANK=0 and MASTER_ADDR/PORT are set here when absent).

What is added to the JSON, and why: an "optimizer" section (AdamW with --lr, betas 0.9/0.95, eps 1e-8 and
--weight-decay; DeepSpeed turns it into DeepSpeedCPUAdam when offload_optimizer is on; otherwise it asks for torch's
fused AdamW ("torch_adam": true, "fused": true), the kernel the eager, compile and FSDP2 sides use — DeepSpeed's own
FusedAdam would be JIT-built with nvcc on every fresh machine, a minute of each device call), and
"gradient_clipping": --grad-clip when the file has none (zw_train clips at --grad-clip in that case, so both sides
do the same work). Decay goes to the dim >= 2 tensors only, as on every other side (two parameter groups). The
tied LM head reads wte.weight outside the wte module, so it is registered with
deepspeed.zero.register_external_parameter (ZeRO-3 would otherwise have released it).

One step = gradient_accumulation_steps micro-batches (engine.backward each; engine.step() updates at the boundary),
timed from the first micro-batch's sampling to the end of the update, closed by torch.cuda.synchronize(); the first
--warmup-iters steps are not timed (they include DeepSpeed's first-use work; the JIT build of its CPU Adam happens
in deepspeed.initialize, before step 1, and is printed as init_s=). Prints the same key=value lines as
torch_gpt.py (tokens_per_s, mfu, peak_gib, peak_reserved_gib, compile_s) so gpu.sh reads both alike.
Non-goals: several GPUs (issue 22), NVMe offload, matching zw_train's losses bit for bit.
"""
import argparse
import json
import os
import socket
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPU_DEFAULTS, GPT, SplitMix, add_train_args, allow_tf32, load_tokens, lr_at, report  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ds_config(a):
    with open(a.deepspeed_config) as f:
        cfg = json.load(f)
    acc = int(cfg.get("gradient_accumulation_steps", 1))
    if int(cfg.get("train_batch_size", a.batch * acc)) != a.batch * acc:
        raise SystemExit(f"ds_gpt: train_batch_size {cfg['train_batch_size']} is not --batch {a.batch} x "
                         f"gradient_accumulation_steps {acc} (one process)")
    cfg["train_micro_batch_size_per_gpu"] = a.batch
    cfg.setdefault("gradient_clipping", a.grad_clip)
    cfg.setdefault("steps_per_print", 10**9)
    cfg["optimizer"] = {"type": "AdamW", "params": {"lr": a.lr, "betas": [0.9, 0.95], "eps": 1e-8,
                                                     "weight_decay": a.weight_decay}}
    offload = cfg.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
    if offload in ("none", None):
        cfg["optimizer"]["params"].update({"torch_adam": True, "fused": True})
    return cfg, acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_train_args(ap, GPU_DEFAULTS, data_bin_only=True)
    ap.add_argument("--deepspeed_config", "--deepspeed-config", required=True, help="DeepSpeed JSON (as zw_train)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("ds_gpt: needs a CUDA device")
    if a.warmup_iters >= a.steps:
        raise SystemExit(f"ds_gpt: --warmup-iters {a.warmup_iters} leaves no timed step of --steps {a.steps}")
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                 ("MASTER_PORT", str(free_port()))):
        os.environ.setdefault(k, v)
    import deepspeed  # imported late: its import is slow and prints, and --help should not need it

    cfg, acc = ds_config(a)
    allow_tf32()
    torch.manual_seed(a.seed)
    tokens, split = load_tokens(a)
    rng = SplitMix(a.seed ^ 0xDA7A5EED)
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    with torch.device(dev):
        model = GPT(a.layers, a.d_model, a.heads, a.seq_len, a.vocab, sdpa=True)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    t_init = time.perf_counter()
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=groups, config=cfg)
    deepspeed.zero.register_external_parameter(engine.module, engine.module.wte.weight)
    init_s = time.perf_counter() - t_init
    flops_per_token = 6 * params + 12 * a.layers * a.d_model * a.seq_len
    peak_tflops = float(os.environ.get("PEAK_TFLOPS", "989.4"))
    print(f"ds_gpt: deepspeed {deepspeed.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}; "
          f"{params} parameters, micro-batch {a.batch} x T {a.seq_len} x {acc} accumulation step(s); "
          f"optimizer {type(optimizer).__name__}; config {json.dumps(cfg, sort_keys=True)}", flush=True)

    rates, warm_s = [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        for g in optimizer.param_groups:
            g["lr"] = lr_at(step, a)
        for _ in range(acc):
            starts = [rng.below(split - a.seq_len) for _ in range(a.batch)]
            w = torch.stack([tokens[s: s + a.seq_len + 1] for s in starts]).to(torch.long)
            x = w[:, :-1].contiguous().to(dev, non_blocking=True)
            y = w[:, 1:].contiguous().to(dev, non_blocking=True)
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        rate = acc * a.batch * a.seq_len / dt
        (warm_s if step < a.warmup_iters else rates).append(dt if step < a.warmup_iters else rate)
        if (step + 1) % a.log_every == 0 or step + 1 == a.steps or step < a.warmup_iters:
            print(f"step {step + 1}/{a.steps} | loss {loss.item():.4f} | lr {lr_at(step, a):.2e} | "
                  f"{rate:.0f} tok/s | {dt * 1e3:.1f} ms{' (warm-up, not timed)' if step < a.warmup_iters else ''}",
                  flush=True)
    print(f"init_s={init_s:.2f}")
    report("ds_gpt", rates, warm_s, flops_per_token, peak_tflops, True, f", initialize {init_s:.1f} s")

if __name__ == "__main__":
    main()
