#!/usr/bin/python3
"""Writes the PyTorch reference ("golden") files for the tensor layer's tiny-GPT test.

Purpose: an independent implementation of the same GPT-2 (pre-norm blocks, tanh GELU, causal attention, tied
embeddings, mean cross-entropy) and of AdamW, whose numbers tests/model/gpt_golden_test.cc must reproduce:
the weights, forward activations at a few points, the loss, every parameter gradient, and the losses and final
weights of 10 AdamW steps on one fixed batch. Non-goals: training quality, other model sizes.

Regenerate (deterministic: fixed seeds, float32, one thread; rerunning rewrites identical bytes):
    apt-get install python3-torch        # Debian's CPU build (1.13); `pip install torch` works as well
    /usr/bin/python3 tests/model/make_golden.py        # from the repository root
It writes tests/model/golden/tiny_gpt.txt (header) and tiny_gpt.bin (raw little-endian data); the format is
described in tests/model/golden_io.h. Parameter names and shapes follow src/model/gpt_layout.h; weights are
[out, in] as in nn.Linear.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

CONFIG = dict(num_layers=2, d_model=32, num_heads=4, max_seq_len=16, vocab_size=64, batch=2, seq_len=16)
ADAMW = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, steps=10)
SEED = 1234


def param_specs(cfg):
    """(name, shape) in the layout order of src/model/gpt_layout.h."""
    C, V, T = cfg["d_model"], cfg["vocab_size"], cfg["max_seq_len"]
    specs = [("wte", (V, C)), ("wpe", (T, C))]
    for l in range(cfg["num_layers"]):
        p = f"h{l}."
        specs += [(p + "ln1.w", (C,)), (p + "ln1.b", (C,)),
                  (p + "attn.qkv.w", (3 * C, C)), (p + "attn.qkv.b", (3 * C,)),
                  (p + "attn.proj.w", (C, C)), (p + "attn.proj.b", (C,)),
                  (p + "ln2.w", (C,)), (p + "ln2.b", (C,)),
                  (p + "mlp.fc.w", (4 * C, C)), (p + "mlp.fc.b", (4 * C,)),
                  (p + "mlp.proj.w", (C, 4 * C)), (p + "mlp.proj.b", (C,))]
    return specs + [("lnf.w", (C,)), ("lnf.b", (C,))]


def decays(name):
    """GPT-2 rule: matmul weights and embeddings decay; biases and layernorm parameters do not."""
    return name in ("wte", "wpe") or (name.endswith(".w") and ".ln" not in name and not name.startswith("lnf"))


def make_params(cfg, gen):
    """GPT-2 style init, with non-trivial layernorm parameters and biases so that their gradients are exercised."""
    resid_std = 0.02 / math.sqrt(2 * cfg["num_layers"])
    params = {}
    for name, shape in param_specs(cfg):
        if ".ln" in name or name.startswith("lnf"):
            base = 1.0 if name.endswith(".w") else 0.0
            t = base + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith(".b"):
            t = 0.02 * torch.randn(shape, generator=gen)
        else:
            std = resid_std if name.endswith("attn.proj.w") or name.endswith("mlp.proj.w") else 0.02
            t = std * torch.randn(shape, generator=gen)
        params[name] = t.float().requires_grad_(True)
    return params


def forward(cfg, p, tokens, targets):
    B, T = tokens.shape
    C, NH = cfg["d_model"], cfg["num_heads"]
    hs = C // NH
    acts = {}
    x = p["wte"][tokens] + p["wpe"][:T].unsqueeze(0)
    acts["act.encoded"] = x
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(cfg["num_layers"]):
        q_ = f"h{l}."
        h = F.layer_norm(x, (C,), p[q_ + "ln1.w"], p[q_ + "ln1.b"], eps=1e-5)
        qkv = F.linear(h, p[q_ + "attn.qkv.w"], p[q_ + "attn.qkv.b"])
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + F.linear(y, p[q_ + "attn.proj.w"], p[q_ + "attn.proj.b"])
        h = F.layer_norm(x, (C,), p[q_ + "ln2.w"], p[q_ + "ln2.b"], eps=1e-5)
        h = F.gelu(F.linear(h, p[q_ + "mlp.fc.w"], p[q_ + "mlp.fc.b"]), approximate="tanh")
        x = x + F.linear(h, p[q_ + "mlp.proj.w"], p[q_ + "mlp.proj.b"])
        acts[f"act.h{l}"] = x
    x = F.layer_norm(x, (C,), p["lnf.w"], p["lnf.b"], eps=1e-5)
    acts["act.lnf"] = x
    logits = F.linear(x, p["wte"])
    acts["act.logits"] = logits
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    return loss, acts


def adamw_losses(cfg, params, tokens, targets):
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    groups = [{"params": [p[n] for n in p if decays(n)], "weight_decay": ADAMW["weight_decay"]},
              {"params": [p[n] for n in p if not decays(n)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"])
    losses = []
    for _ in range(ADAMW["steps"]):
        opt.zero_grad(set_to_none=False)
        loss, _ = forward(cfg, p, tokens, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float32), p


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(SEED)
    cfg = CONFIG
    params = make_params(cfg, gen)
    tokens = torch.randint(0, cfg["vocab_size"], (cfg["batch"], cfg["seq_len"]), generator=gen)
    targets = torch.randint(0, cfg["vocab_size"], (cfg["batch"], cfg["seq_len"]), generator=gen)
    loss, acts = forward(cfg, params, tokens, targets)
    loss.backward()
    losses, final = adamw_losses(cfg, params, tokens, targets)

    entries = [("tokens", tokens.to(torch.int32)), ("targets", targets.to(torch.int32))]
    entries += [("param." + n, params[n].detach()) for n, _ in param_specs(cfg)]
    entries += [(k, v.detach()) for k, v in acts.items()]
    entries += [("loss", loss.detach().reshape(1))]
    entries += [("grad." + n, params[n].grad) for n, _ in param_specs(cfg)]
    entries += [("adamw.losses", losses)]
    entries += [("adamw.final." + n, final[n].detach()) for n, _ in param_specs(cfg)]

    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
    os.makedirs(out_dir, exist_ok=True)
    lines = ["# zerowire tensor golden v1: tiny GPT-2 reference from tests/model/make_golden.py "
             f"(torch {torch.__version__.split('+')[0]}); data in tiny_gpt.bin",
             "config " + " ".join(f"{k} {v}" for k, v in cfg.items()),
             "adamw " + " ".join(f"{k} {v}" for k, v in ADAMW.items())]
    with open(os.path.join(out_dir, "tiny_gpt.bin"), "wb") as data:
        for name, t in entries:
            dtype = "i32" if t.dtype == torch.int32 else "f32"
            t = t.contiguous() if dtype == "i32" else t.float().contiguous()
            lines.append(f"tensor {name} {dtype} {t.dim()} " + " ".join(str(d) for d in t.shape))
            data.write(t.numpy().astype("<i4" if dtype == "i32" else "<f4").tobytes())
    with open(os.path.join(out_dir, "tiny_gpt.txt"), "w") as header:
        header.write("\n".join(lines) + "\n")
    print(f"loss {loss.item():.6f}; adamw losses {[round(x, 6) for x in losses.tolist()]}", file=sys.stderr)


if __name__ == "__main__":
    main()
