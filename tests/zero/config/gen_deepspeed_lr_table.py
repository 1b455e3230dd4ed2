#!/usr/bin/env python3
"""Writes deepspeed_lr_table.json: DeepSpeed's own learning rates for chosen schedules and steps.

Each case builds a torch optimizer with the case's lr, wraps it in deepspeed.runtime.lr_schedules.<type>(**params)
as DeepSpeed's engine does for a "scheduler" block, and records the rate every optimizer update uses: the rate in
the optimizer before update k, then scheduler.step() (DeepSpeed steps it after each applied update).
zerowire's zero::scheduler_lr is tested against this table (lr_schedule_test.cc), so the table is committed and
regenerated only to follow a DeepSpeed release:
    python3 -m venv /tmp/ds && /tmp/ds/bin/pip install torch && \
    DS_BUILD_OPS=0 /tmp/ds/bin/pip install --no-build-isolation deepspeed==0.19.8
    /tmp/ds/bin/python tests/zero/config/gen_deepspeed_lr_table.py tests/zero/config/deepspeed_lr_table.json
(DeepSpeed logs to stdout, so the table goes to the file named on the command line.)
"""
import json
import sys

import deepspeed
import torch
from deepspeed.runtime import lr_schedules

CASES = [
    ("warmup_log", "WarmupLR", 1e-3, {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 10}, 16),
    ("warmup_linear", "WarmupLR", 1e-3,
     {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-4, "warmup_num_steps": 8, "warmup_type": "linear"}, 12),
    ("warmup_max_from_optimizer", "WarmupLR", 2e-4, {"warmup_num_steps": 5}, 8),
    ("warmup_one_step", "WarmupLR", 1e-3, {"warmup_max_lr": 5e-4, "warmup_num_steps": 1}, 4),
    ("decay_log", "WarmupDecayLR", 1e-3,
     {"total_num_steps": 30, "warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 10}, 34),
    ("decay_linear_past_end", "WarmupDecayLR", 1e-3,
     {"total_num_steps": 20, "warmup_min_lr": 1e-6, "warmup_max_lr": 5e-4, "warmup_num_steps": 4,
      "warmup_type": "linear"}, 25),
    ("decay_default_max", "WarmupDecayLR", 3e-5, {"total_num_steps": 12, "warmup_num_steps": 3}, 14),
    ("decay_total_below_warmup", "WarmupDecayLR", 1e-3,
     {"total_num_steps": 3, "warmup_max_lr": 1e-3, "warmup_num_steps": 6}, 9),
    ("cosine_log", "WarmupCosineLR", 3e-4, {"total_num_steps": 40, "warmup_num_steps": 10}, 46),
    ("cosine_linear_ratios", "WarmupCosineLR", 1e-3,
     {"total_num_steps": 25, "warmup_num_steps": 5, "warmup_min_ratio": 0.1, "cos_min_ratio": 0.05,
      "warmup_type": "linear"}, 30),
    ("decay_resumed", "WarmupDecayLR", 1e-3,
     {"total_num_steps": 20, "warmup_max_lr": 1e-3, "warmup_num_steps": 5, "last_batch_iteration": 7}, 10),
]


def rates(type_name, optimizer_lr, params, steps):
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=optimizer_lr)
    scheduler = getattr(lr_schedules, type_name)(optimizer, **params)
    out = []
    for _ in range(steps):
        out.append(float(optimizer.param_groups[0]["lr"]))
        optimizer.step()
        scheduler.step()
    return out


def main():
    cases = [{"name": name, "type": type_name, "optimizer_lr": lr, "params": params,
              "lrs": rates(type_name, lr, params, steps)} for name, type_name, lr, params, steps in CASES]
    with open(sys.argv[1], "w") as out:
        json.dump({"deepspeed": deepspeed.__version__, "torch": torch.__version__, "cases": cases}, out, indent=1)
        out.write("\n")


if __name__ == "__main__":
    main()
