#!/usr/bin/env python3
"""sdpa_probe.py — the attention anchor: PyTorch's causal scaled_dot_product_attention forward and backward at the
GPT shapes of bench/train/gpu.sh, timed with CUDA events (median of 20 after 5 warm-up), with the kernel names
torch.profiler sees, so zerowire's flash attention (src/tensor/cuda/attention_*.cu, timed by zw_train --profile)
can be read against it. FLOPs counted for causal attention as 2 matmuls x 2 x B·NH·T²·hs / 2 forward and 2.5x
that backward (FlashAttention-2's count).
Usage: python3 bench/train/sdpa_probe.py   (GPU only)
"""
import statistics

import torch
import torch.nn.functional as F

SHAPES = {"124m": (16, 12, 1024, 64), "1.3b": (8, 16, 1024, 128), "1.3b-t4096": (2, 16, 4096, 128)}


def timed(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for name, (B, NH, T, hs) in SHAPES.items():
        q, k, v = (torch.randn(B, NH, T, hs, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        do = torch.randn(B, NH, T, hs, device="cuda", dtype=torch.bfloat16)
        fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = fwd()
        bwd = lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
        tf, tb = timed(fwd), timed(bwd)
        flops = 2 * 2 * B * NH * T * T * hs / 2
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            o = fwd()
            torch.autograd.grad(o, (q, k, v), do)
            torch.cuda.synchronize()
        kernels = sorted({e.name[:70] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
        print(f"{name:<11} B{B} NH{NH} T{T} hs{hs}: fwd {tf:.3f} ms ({flops / tf / 1e9:.0f} TFLOP/s), "
              f"bwd {tb:.3f} ms ({2.5 * flops / tb / 1e9:.0f} TFLOP/s); per step x layers: see gpu.sh")
        for kname in kernels:
            print(f"    kernel {kname}")


if __name__ == "__main__":
    main()
