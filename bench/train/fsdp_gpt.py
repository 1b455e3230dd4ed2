#!/usr/bin/python3
"""fsdp_gpt.py — torch_gpt.py's GPT trained by PyTorch FSDP2 (fully_shard), for bench/train/gpu.sh (issue 22).

The anchor of the several-GPU comparison: the same model (torch_gpt.GPT, SDPA attention), AdamW hyper-parameters,
warmup + cosine LR and global-norm clipping as zw_train, on the same batches as zw_train's ZeRO-3 engine on the same
number of ranks: every rank draws the global batch of B x ACC x WORLD windows with zw_train's SplitMix, and rank r
trains micro step k on rows (k x WORLD + r) x B .. + B (tools/zw_train/trainer.cc, rows_of).

Run one process per GPU under torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; one
process without them):
    python -m torch.distributed.run --standalone --nproc-per-node 2 bench/train/fsdp_gpt.py --data-bin tokens.bin
What FSDP2 is given, as its users configure it for GPT-2-sized models: fully_shard on every block, then on the root
(embeddings, final layernorm; the LM head is tied to wte); MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
with --dtype bf16 (fp32 sharded parameters are the master weights), the forward under torch.autocast(bf16) as in
torch_gpt.py (cross-entropy and layernorm in fp32); AdamW(fused=True) on the sharded parameters. --compile 1 compiles
each block before it is sharded (torch.compile(block), the way torchtitan does: FSDP2's hooks stay outside the
compiled graphs). --offload 1 adds CPUOffloadPolicy(pin_memory=True): the sharded parameters, gradients and AdamW
run on the host (the figure issue 22 compares the offloaded ZeRO-3 optimizer against). --backend names the process
group's backend: nccl (default on CUDA; "cpu:gloo,cuda:nccl" with --offload, whose gradient norm is reduced on the
host), gloo, or zerowire (imports zerowire.torch; "cpu:gloo,cuda:zerowire" works too), so that the same script
measures PyTorch on NCCL, on zerowire, and on libzwnccl through LD_PRELOAD.
Processes may share a GPU (LOCAL_RANK modulo the visible GPUs) where the backend allows it (zerowire and gloo do,
NCCL does not).

Each step is timed on rank 0 from batch sampling to the end of the optimizer step, closed by
torch.cuda.synchronize(); the first --warmup-iters steps are not timed. Prints torch_gpt.py's key=value lines, for
the whole job: tokens_per_s (every rank's tokens), mfu (per GPU: against PEAK_TFLOPS x the GPUs used), peak_gib and
peak_reserved_gib (the largest rank's, measured from after the model was sharded), compile_s; and the loss of each
logged step, averaged over the ranks.
Non-goals: several hosts' worth of tuning (HSDP, 2-D meshes), activation checkpointing, matching zw_train's losses
bit for bit.
"""
import argparse
import contextlib
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPU_DEFAULTS, GPT, SplitMix, add_train_args, allow_tf32, load_tokens, lr_at  # noqa: E402


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_train_args(ap, GPU_DEFAULTS)
    ap.add_argument("--acc", type=int, default=1, help="accumulation steps (micro-batches per optimizer step)")
    ap.add_argument("--compile", type=int, default=0)
    ap.add_argument("--offload", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank on the CPU")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default=None,
                    help="parameters in the forward and backward (default: bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--backend", default=None, help="process group backend (default: nccl on cuda, gloo on cpu)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="process group timeout")
    a = ap.parse_args()
    if a.warmup_iters >= a.steps:
        ap.error(f"--warmup-iters {a.warmup_iters} leaves no timed step of --steps {a.steps}")
    if a.acc < 1:
        ap.error("--acc must be at least 1")
    return a


def init(a):
    """Process group and device of this rank; returns (rank, world, device, gpus used)."""
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(k, v)
    if "MASTER_PORT" not in os.environ:
        if os.environ["WORLD_SIZE"] != "1":
            raise SystemExit("fsdp_gpt: WORLD_SIZE > 1 but no MASTER_PORT: launch under torchrun")
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    cuda = a.device == "cuda"
    backend = a.backend or ("nccl" if cuda else "gloo")
    if a.offload and backend == "nccl":
        backend = "cpu:gloo,cuda:nccl"  # the offloaded shards' gradient norm is reduced on the host
    if "zerowire" in backend:
        import zerowire.torch  # noqa: F401 (registers the backend)
    world = int(os.environ["WORLD_SIZE"])
    if cuda:
        if not torch.cuda.is_available():
            raise SystemExit("fsdp_gpt: --device cuda but torch.cuda.is_available() is False")
        dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        gpus = min(world, torch.cuda.device_count())
    else:
        dev, gpus = torch.device("cpu"), 0
        torch.set_num_threads(a.threads)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=a.timeout_s),
                            **({"device_id": dev} if cuda and "nccl" in backend else {}))
    return dist.get_rank(), world, dev, gpus, backend


def build(a, dev, cuda, dtype):
    """The model, built whole with the same seed on every rank (so every rank starts from the same weights), then
    sharded: blocks first, the root last."""
    torch.manual_seed(a.seed)
    with torch.device(dev):
        model = GPT(a.layers, a.d_model, a.heads, a.seq_len, a.vocab, sdpa=cuda)
    params = sum(p.numel() for p in model.parameters())  # wte once (tied)
    kw = {}
    if dtype == "bf16":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if a.offload:
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=cuda)
    for i, block in enumerate(model.blocks):
        if a.compile:
            block = torch.compile(block)
            model.blocks[i] = block
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    return model, params


def main():
    a = parse()
    cuda = a.device == "cuda"
    dtype = a.dtype or ("bf16" if cuda else "fp32")
    rank, world, dev, gpus, backend = init(a)
    if cuda:
        allow_tf32()
    tokens, split = load_tokens(a)
    rng = SplitMix(a.seed ^ 0xDA7A5EED)
    model, params = build(a, dev, cuda, dtype)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused AdamW runs where the shards are: the GPU, or the host with --offload (torch's CPU fused AdamW)
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=cuda or None)
    if dtype == "bf16":
        autocast = lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = contextlib.nullcontext
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()  # the whole model was built on every rank before sharding
    flops_per_token = 6 * params + 12 * a.layers * a.d_model * a.seq_len
    peak_tflops = float(os.environ.get("PEAK_TFLOPS", "989.4"))
    B, T, acc = a.batch, a.seq_len, a.acc
    if rank == 0:
        what = ", ".join([f"{dtype} parameters" + (", fp32 reduce" if dtype == "bf16" else ""),
                          "SDPA" if cuda else "written-out attention", ("fused " if cuda else "") + "AdamW"]
                         + (["CPUOffloadPolicy"] if a.offload else [])
                         + ["torch.compile per block" if a.compile else "eager"])
        where = torch.cuda.get_device_name() if cuda else f"CPU, {a.threads} thread(s) per rank"
        print(f"fsdp_gpt: FSDP2 over {world} rank(s) ({backend}), {params} parameters, micro-batch {B} x T {T} x "
              f"{acc} accumulation step(s) per rank, {what}, {where}, torch {torch.__version__}; {len(tokens)} "
              f"tokens ({split} train); {a.warmup_iters} untimed warm-up step(s)", flush=True)

    rates, warm_s = [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        starts = [rng.below(split - T) for _ in range(B * acc * world)]  # the global batch, as zw_train draws it
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=dev)
        for k in range(acc):
            rows = starts[(k * world + rank) * B:(k * world + rank + 1) * B]
            w = torch.stack([tokens[s: s + T + 1] for s in rows]).to(torch.long)
            x, y = w[:, :-1].contiguous(), w[:, 1:].contiguous()
            if cuda:
                x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            with autocast():
                loss = model(x, y)
            (loss / acc).backward()
            total += loss.detach() / acc
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        rate = B * T * acc * world / dt
        (warm_s if step < a.warmup_iters else rates).append(dt if step < a.warmup_iters else rate)
        if (step + 1) % a.log_every == 0 or step + 1 == a.steps or step < a.warmup_iters:
            dist.all_reduce(total, op=dist.ReduceOp.AVG)  # after the timing: the mean loss of the global batch
            norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
            if rank == 0:
                tag = " (warm-up, not timed)" if step < a.warmup_iters else ""
                print(f"step {step + 1}/{a.steps} | loss {total.item():.6f} | lr {lr_at(step, a):.2e} | "
                      f"norm {norm.item():.4f} | {rate:.0f} tok/s | {dt * 1e3:.1f} ms{tag}", flush=True)
    report(a, rank, cuda, dev, gpus, rates, warm_s, flops_per_token, peak_tflops)
    dist.destroy_process_group()


def report(a, rank, cuda, dev, gpus, rates, warm_s, flops_per_token, peak_tflops):
    """torch_gpt.report's lines for the whole job (rank 0 prints): the median of the timed steps' tokens/s; on CUDA
    the MFU per GPU used and the largest rank's peak memory."""
    median = statistics.median(rates)
    lines = []
    if cuda:
        peaks = torch.tensor([torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()],
                             dtype=torch.float64, device=dev)
        dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
        peak, reserved = (float(v) / 2**30 for v in peaks.tolist())
        mfu = 100.0 * median * flops_per_token / (peak_tflops * 1e12 * gpus)
        lines += [f"fsdp_gpt: done, {len(rates)} timed steps, median {median:.0f} tokens/s over {gpus} GPU(s), MFU "
                  f"{mfu:.1f} % ({flops_per_token / 1e9:.3f} GFLOP/token at {peak_tflops} TFLOP/s per GPU), peak "
                  f"{peak:.2f} GiB allocated, {reserved:.2f} GiB reserved (the largest rank's)",
                  f"mfu={mfu:.2f}", f"peak_gib={peak:.3f}", f"peak_reserved_gib={reserved:.3f}"]
    else:
        lines.append(f"fsdp_gpt: done, {len(rates)} timed steps, median {median:.0f} tokens/s")
    lines += [f"compile_s={sum(warm_s):.2f}", f"tokens_per_s={median:.1f}"]
    if rank == 0:
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
