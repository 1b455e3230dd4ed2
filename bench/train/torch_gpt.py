#!/usr/bin/python3
"""torch_gpt.py — the PyTorch twin of zw_train, for bench/train/run.sh (CPU) and bench/train/gpu.sh (CUDA).

The same GPT-2 (pre-norm, tied embeddings, tanh GELU, layernorm eps 1e-5, biases on every linear but the LM head,
init N(0, 0.02) with residual projections scaled by 1/sqrt(2L)), the same AdamW (betas 0.9/0.95, eps 1e-8, decay
on matmul weights and embeddings only), the same warmup + cosine LR schedule and global-norm clipping, trained on
the same batches as zw_train: windows of T+1 tokens (inputs, targets shifted by one) drawn from the first 90 % of
the tokens by zw_train's own generator (SplitMix64 seeded with seed ^ 0xda7a5eed, start = next() % (split - T)),
so with the same --seed both sides see the same tokens. Data: a byte file (--data) or an llm.c shard (--data-bin:
256 int32 header words, magic 20240520, version 1, token count, then uint16 tokens).

--device cpu (default; what run.sh uses): fp32, attention written out (causal mask + softmax) as torch 1.13
  (Debian's python3-torch) has no fused SDPA, the default AdamW, every step timed.
--device cuda (what gpu.sh uses): parameters in fp32 (master weights, created on the GPU), the forward under
  torch.autocast(bfloat16), F.scaled_dot_product_attention(is_causal=True), AdamW(fused=True), and TF32 allowed
  for whatever autocast leaves in fp32 (--tf32 1, as speed-minded users set it). --compile 1 wraps the model
  (forward and loss; AOTAutograd compiles the backward) in torch.compile, default mode. Each step is timed from
  batch sampling to the end of the optimizer step, closed by torch.cuda.synchronize(); the first --warmup-iters
  steps are not timed (torch.compile compiles inside the first step: their wall time is printed, compile_s=).
  --dtype fp32 turns autocast off; --sdpa and --fused override their per-device defaults (so the CUDA
  configuration can also be tried on a CPU with a recent torch: --sdpa 1 --fused 1 --dtype bf16 --compile 1).
Prints one progress line every --log-every steps and finally "compile_s=<untimed warm-up seconds>" and
"tokens_per_s=<median over the timed steps>"; on CUDA also "mfu=<percent>", "peak_gib=<max_memory_allocated
/ 2**30>" and "peak_reserved_gib=<max_memory_reserved / 2**30>".
MFU = tokens/s x (6 N + 12 L C T) / peak, N the parameter count including the embeddings (the tied wte once, wpe
too): the PaLM paper's appendix B / llm.c convention, against PEAK_TFLOPS (env; default 989.4 TFLOP/s, the dense
bf16 peak of an H200 SXM).
Non-goals: matching zw_train's losses bit for bit (different init RNG and kernels), multi-GPU, CUDA graphs.
"""
import argparse
import contextlib
import math
import os
import statistics
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

LLMC_MAGIC, LLMC_VERSION, LLMC_HEADER_WORDS = 20240520, 1, 256
MASK64 = (1 << 64) - 1


class SplitMix:
    """zw_train's batch generator (tools/zw_train/data.h), bit for bit."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n


class Block(nn.Module):
    def __init__(self, d, heads, sdpa):
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, d, heads, seq_len, vocab, sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, heads, sdpa) for _ in range(layers))
        self.lnf = nn.LayerNorm(d, eps=1e-5)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied LM head, no bias
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def lr_at(step, a):
    if step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    if step >= a.steps or a.steps <= a.warmup_steps:
        return a.min_lr
    ratio = (step - a.warmup_steps) / (a.steps - a.warmup_steps)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


def load_tokens(a):
    """All tokens of the file as an int32 tensor (no numpy: pip's torch does not require it)."""
    if a.data_bin:
        with open(a.data_bin, "rb") as f:
            raw = f.read()
        header_bytes = LLMC_HEADER_WORDS * 4
        if len(raw) < header_bytes:
            raise SystemExit(f"torch_gpt: {a.data_bin} is shorter than the 1024-byte llm.c header")
        header = torch.frombuffer(bytearray(raw[:header_bytes]), dtype=torch.int32)
        magic, version, count = (int(v) for v in header[:3])
        if magic != LLMC_MAGIC or version != LLMC_VERSION:
            raise SystemExit(f"torch_gpt: {a.data_bin}: magic {magic} version {version}, expected "
                             f"{LLMC_MAGIC} version {LLMC_VERSION} (llm.c uint16 shard)")
        if len(raw) - header_bytes != 2 * count:
            raise SystemExit(f"torch_gpt: {a.data_bin}: header says {count} tokens, file holds "
                             f"{(len(raw) - header_bytes) / 2:g}")
        # int16 reinterpreted, widened, and masked back to the uint16 value (torch.uint16 has few ops)
        tokens = torch.frombuffer(bytearray(raw[header_bytes:]), dtype=torch.int16).to(torch.int32) & 0xFFFF
    else:
        tokens = torch.frombuffer(bytearray(open(a.data, "rb").read()), dtype=torch.uint8).to(torch.int32)
    split = len(tokens) - len(tokens) // 10  # zw_train's Dataset: the first 90 % train, the rest validation
    if split < a.seq_len + 1:
        raise SystemExit(f"torch_gpt: {len(tokens)} tokens are too few for seq_len {a.seq_len}")
    top = int(tokens.max())
    if top >= a.vocab:
        raise SystemExit(f"torch_gpt: token {top} is outside the vocabulary of {a.vocab}; raise --vocab")
    return tokens, split


def allow_tf32():
    # torch.set_float32_matmul_precision("high") is the legacy switch (== torch.backends.cuda.matmul.allow_tf32 =
    # True) that inductor itself still reads in torch 2.9-2.11. The newer torch.backends.cuda.matmul.fp32_precision
    # = "tf32" would be mixed with those reads and make torch.compile raise "you have used mix of the legacy and new
    # APIs to set the TF32 status" (pytorch/pytorch#166387), so the legacy one is used and its deprecation warning
    # silenced. Under bf16 autocast the matmuls run in bf16 anyway; this only touches what autocast leaves in fp32.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.set_float32_matmul_precision("high")


# The flags every twin of zw_train shares (model shape, batch, schedule, timing), in zw_train's spelling, and the
# defaults of the CPU comparison (run.sh) and of the GPU ones (gpu.sh: GPT-2 small).
TRAIN_FLAGS = (("--layers", int), ("--d-model", int), ("--heads", int), ("--seq-len", int), ("--vocab", int),
               ("--batch", int), ("--steps", int), ("--lr", float), ("--min-lr", float), ("--warmup-steps", int),
               ("--weight-decay", float), ("--grad-clip", float), ("--seed", int), ("--warmup-iters", int),
               ("--log-every", int))
CPU_DEFAULTS = (6, 256, 8, 256, 256, 4, 10, 1e-3, 1e-4, 2, 0.1, 1.0, 1337, 0, 1)
GPU_DEFAULTS = (12, 768, 12, 1024, 50304, 16, 30, 6e-4, 6e-5, 5, 0.1, 1.0, 1337, 5, 10)


def add_train_args(ap, defaults, data_bin_only=False):
    """Adds TRAIN_FLAGS with `defaults` (in their order) and the data source: --data or --data-bin, or --data-bin
    alone."""
    for (flag, typ), default in zip(TRAIN_FLAGS, defaults, strict=True):
        ap.add_argument(flag, type=typ, default=default)
    if data_bin_only:
        ap.add_argument("--data-bin", required=True, help="llm.c token shard (uint16 tokens)")
        ap.set_defaults(data=None)
        return
    data = ap.add_mutually_exclusive_group(required=True)
    data.add_argument("--data", help="byte-level training text")
    data.add_argument("--data-bin", help="llm.c token shard (uint16 tokens; set --vocab to match)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_train_args(ap, CPU_DEFAULTS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", type=int, default=0)
    ap.add_argument("--tf32", type=int, default=1)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    # per-device defaults: cuda gets what gpu.sh compares against, cpu keeps what run.sh has always measured
    ap.add_argument("--dtype", choices=("bf16", "fp32"), help="autocast dtype (default: bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--sdpa", type=int, help="F.scaled_dot_product_attention (default: 1 on cuda, 0 on cpu)")
    ap.add_argument("--fused", type=int, help="AdamW(fused=True) (default: 1 on cuda, 0 on cpu)")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    dtype = a.dtype or ("bf16" if cuda else "fp32")
    sdpa = bool(cuda if a.sdpa is None else a.sdpa)
    fused = bool(cuda if a.fused is None else a.fused)
    if cuda and not torch.cuda.is_available():
        raise SystemExit("torch_gpt: --device cuda but torch.cuda.is_available() is False")
    if a.warmup_iters >= a.steps:
        raise SystemExit(f"torch_gpt: --warmup-iters {a.warmup_iters} leaves no timed step of --steps {a.steps}")
    if not cuda:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tokens, split = load_tokens(a)
    rng = SplitMix(a.seed ^ 0xDA7A5EED)
    dev = torch.device(a.device)

    if cuda:
        if a.tf32:
            allow_tf32()
        with torch.device(dev):  # parameters created and initialised on the GPU (no 1.3B init on the host)
            model = GPT(a.layers, a.d_model, a.heads, a.seq_len, a.vocab, sdpa)
    else:
        model = GPT(a.layers, a.d_model, a.heads, a.seq_len, a.vocab, sdpa)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if fused else {}))
    forward = torch.compile(model) if a.compile else model  # forward and loss; backward through AOTAutograd
    if dtype == "bf16":
        autocast = lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = contextlib.nullcontext  # torch 1.13 on a CPU-only build cannot even build a disabled cuda one

    params = sum(p.numel() for p in model.parameters())  # wte counted once (tied)
    flops_per_token = 6 * params + 12 * a.layers * a.d_model * a.seq_len
    peak_tflops = float(os.environ.get("PEAK_TFLOPS", "989.4"))
    what = (f"{dtype}{' autocast' if dtype != 'fp32' else ''}, {'SDPA' if sdpa else 'written-out attention'}, "
            f"{'fused ' if fused else ''}AdamW, {'torch.compile' if a.compile else 'eager'}")
    where = f"{torch.cuda.get_device_name()}, TF32 {'on' if a.tf32 else 'off'}" if cuda else f"{a.threads} thread(s)"
    print(f"torch_gpt: {params} parameters, batch {a.batch} x T {a.seq_len}, {what}, {where}, torch "
          f"{torch.__version__}; {len(tokens)} tokens ({split} train); {a.warmup_iters} untimed warm-up step(s)",
          flush=True)

    rates, warm_s = [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        starts = [rng.below(split - a.seq_len) for _ in range(a.batch)]
        w = torch.stack([tokens[s: s + a.seq_len + 1] for s in starts]).to(torch.long)
        x, y = w[:, :-1].contiguous(), w[:, 1:].contiguous()  # targets: the inputs shifted by one
        if cuda:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = forward(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        rate = a.batch * a.seq_len / dt
        if step < a.warmup_iters:
            warm_s.append(dt)
        else:
            rates.append(rate)
        if (step + 1) % a.log_every == 0 or step + 1 == a.steps or step < a.warmup_iters:
            tag = " (warm-up, not timed)" if step < a.warmup_iters else ""
            print(f"step {step + 1}/{a.steps} | loss {loss.item():.4f} | lr {lr_at(step, a):.2e} | "
                  f"norm {norm.item():.3f} | {rate:.0f} tok/s | {dt * 1e3:.1f} ms{tag}", flush=True)
    if warm_s:
        print(f"torch_gpt: untimed warm-up steps took {' + '.join(f'{s:.2f}' for s in warm_s)} s"
              f"{' (the first includes torch.compile of forward and backward)' if a.compile else ''}")
    report("torch_gpt", rates, warm_s, flops_per_token, peak_tflops, cuda)


def report(who, rates, warm_s, flops_per_token, peak_tflops, cuda, extra=""):
    """The closing lines that bench/train/gpu.sh reads (also ds_gpt.py's): the median of the timed steps' tokens/s,
    and on CUDA the MFU and torch's peak memory."""
    median = statistics.median(rates)
    if cuda:
        mfu = 100.0 * median * flops_per_token / (peak_tflops * 1e12)
        peak = torch.cuda.max_memory_allocated() / 2**30
        reserved = torch.cuda.max_memory_reserved() / 2**30
        print(f"{who}: done, {len(rates)} timed steps, median {median:.0f} tokens/s, MFU {mfu:.1f} % "
              f"({flops_per_token / 1e9:.3f} GFLOP/token at {peak_tflops} TFLOP/s), peak {peak:.2f} GiB allocated, "
              f"{reserved:.2f} GiB reserved{extra}")
        print(f"mfu={mfu:.2f}")
        print(f"peak_gib={peak:.3f}")
        print(f"peak_reserved_gib={reserved:.3f}")
    print(f"compile_s={sum(warm_s):.2f}")
    print(f"tokens_per_s={median:.1f}")


if __name__ == "__main__":
    main()
