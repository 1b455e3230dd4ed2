"""The torch binding's overhead: zerowire through torch.distributed (bench_collectives.py's JSON) against
zerowire's own benchmark (zw_*_perf's nccl-tests table, out-of-place time) at the same sizes, from 1 MiB.

    python bench/torch/overhead.py DIR    (DIR holds torch_n{2,4}.json and zw_{op}_n{2,4}.txt, as run.sh writes)
"""
import json
import os
import sys

OPS = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor", "all_reduce": "all_reduce"}


def perf_table(path):
    """size -> out-of-place time (us) from a zw_*_perf output (rows: size count type redop root time ...)."""
    times = {}
    for line in open(path):
        tok = line.split()
        if tok and tok[0].startswith("[") and tok[0].endswith("]"):
            tok = tok[1:]  # zwrun's rank prefix
        if len(tok) > 6 and tok[0].isdigit():
            times[int(tok[0])] = float(tok[5])
    return times


def main(d):
    print(f"{'op':24s} {'n':>2s} {'size':>6s} {'torch+zerowire us':>18s} {'zw_*_perf us':>13s} {'overhead':>9s}")
    for n in (2, 4):
        rows = json.load(open(os.path.join(d, f"torch_n{n}.json")))
        for op, torch_op in OPS.items():
            perf = perf_table(os.path.join(d, f"zw_{op}_n{n}.txt"))
            for r in rows:
                if r["op"] == torch_op and r["bytes"] in perf and r["bytes"] >= 1 << 20:
                    own = perf[r["bytes"]]
                    print(f"{torch_op:24s} {n:2d} {r['bytes'] >> 20:5d}M {r['zw_us']:18.1f} {own:13.1f} "
                          f"{(r['zw_us'] / own - 1) * 100:8.1f}%")


if __name__ == "__main__":
    main(sys.argv[1])
