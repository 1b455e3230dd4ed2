#!/usr/bin/python3
"""torch_gpt.py — the PyTorch eager twin of zw_train, for bench/train/run.sh.

The same GPT-2 (pre-norm, tied embeddings, tanh GELU, layernorm eps 1e-5, biases on every linear but the LM head,
init N(0, 0.02) with residual projections scaled by 1/sqrt(2L)), the same AdamW (betas 0.9/0.95, eps 1e-8, decay
on matmul weights and embeddings only), the same warmup + cosine LR schedule and global-norm clipping, trained on
random windows of a byte file. Prints one progress line per step and finally "tokens_per_s=<median>".
Attention is written out (causal mask + softmax), as torch 1.13 (Debian's python3-torch) has no fused SDPA.
Non-goals: matching zw_train's losses bit for bit (different RNGs and kernels), GPUs, torch.compile.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
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
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, d, heads, seq_len, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
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
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied LM head, no bias
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def lr_at(step, a):
    if step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    if step >= a.steps or a.steps <= a.warmup_steps:
        return a.min_lr
    ratio = (step - a.warmup_steps) / (a.steps - a.warmup_steps)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, typ, default in (("--layers", int, 6), ("--d-model", int, 256), ("--heads", int, 8),
                               ("--seq-len", int, 256), ("--vocab", int, 256), ("--batch", int, 4),
                               ("--steps", int, 10), ("--lr", float, 1e-3), ("--min-lr", float, 1e-4),
                               ("--warmup-steps", int, 2), ("--weight-decay", float, 0.1),
                               ("--grad-clip", float, 1.0), ("--seed", int, 1337), ("--threads", int, 1)):
        ap.add_argument(flag, type=typ, default=default)
    ap.add_argument("--data", required=True, help="byte-level training text")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    data = torch.frombuffer(bytearray(open(a.data, "rb").read()), dtype=torch.uint8).long()
    train = data[: len(data) - len(data) // 10]
    model = GPT(a.layers, a.d_model, a.heads, a.seq_len, a.vocab)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    params = sum(p.numel() for p in model.parameters())
    print(f"torch_gpt: {params} parameters, batch {a.batch} x T {a.seq_len}, {a.threads} thread(s), torch {torch.__version__}")
    rates = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        starts = torch.randint(0, len(train) - a.seq_len - 1, (a.batch,))
        x = torch.stack([train[s: s + a.seq_len] for s in starts])
        y = torch.stack([train[s + 1: s + 1 + a.seq_len] for s in starts])
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        opt.step()
        dt = time.perf_counter() - t0
        rates.append(a.batch * a.seq_len / dt)
        print(f"step {step + 1}/{a.steps} | loss {loss.item():.4f} | norm {norm.item():.3f} | {rates[-1]:.0f} tok/s",
              flush=True)
    print(f"tokens_per_s={statistics.median(rates):.1f}")


if __name__ == "__main__":
    main()
