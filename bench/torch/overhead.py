"""The torch binding's overhead, from 1 MiB: zerowire through torch.distributed (bench_collectives.py's JSON) against
the same operation straight on its communicator (zw-raw, same tensors, interleaved), on huge-page tensors (zw-thp,
interleaved) and against zerowire's own benchmark (zw_*_perf's nccl-tests table, run right after: out-of-place time
for all_gather and reduce_scatter, in-place time for all_reduce, as torch's all_reduce is in place).

    python bench/torch/overhead.py DIR    (DIR holds torch_n{2,4}.json and zw_{op}_n{2,4}.txt, as run.sh writes)

Columns (%, time / reference - 1): binding = zerowire / zw-raw (Python, torch's dispatcher and the backend, on the
same buffers); pages = zerowire / zw-thp (torch's 4 KiB pages against huge pages); vs perf = zerowire / zw_*_perf
(the issue's measure: binding and pages together, not interleaved); thp vs perf = zw-thp / zw_*_perf.
"""
import json
import os
import sys

OPS = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor", "all_reduce": "all_reduce"}


def perf_table(path, in_place):
    """size -> time (us) from a zw_*_perf output (rows: size count type redop root time algbw busbw #wrong time ...)."""
    times = {}
    for line in open(path):
        tok = line.split()
        if tok and tok[0].startswith("[") and tok[0].endswith("]"):
            tok = tok[1:]  # zwrun's rank prefix
        if len(tok) > 9 and tok[0].isdigit():
            times[int(tok[0])] = float(tok[9] if in_place else tok[5])
    return times


def pct(a, b):
    return f"{(a / b - 1) * 100:+7.0f}%" if a and b else "       -"


def main(d):
    print(f"{'op':24s} {'n':>2s} {'size':>5s} {'zerowire us':>12s} {'zw-raw':>9s} {'zw-thp':>9s} {'zw_*_perf':>10s} "
          f"{'binding':>8s} {'pages':>8s} {'vs perf':>8s} {'thp/perf':>8s}")
    for n in (2, 4):
        path = os.path.join(d, f"torch_n{n}.json")
        if not os.path.exists(path):
            continue
        rows = json.load(open(path))
        for op, torch_op in OPS.items():
            perf_path = os.path.join(d, f"zw_{op}_n{n}.txt")
            perf = perf_table(perf_path, op == "all_reduce") if os.path.exists(perf_path) else {}
            for r in rows:
                if r["op"] != torch_op or r["bytes"] < 1 << 20:
                    continue
                zw, raw, thp, own = r["zw_us"], r.get("raw_us"), r.get("thp_us"), perf.get(r["bytes"])
                cell = lambda v: f"{v:9.1f}" if v else "        -"  # noqa: E731
                print(f"{torch_op:24s} {n:2d} {r['bytes'] >> 20:4d}M {zw:12.1f} {cell(raw)} {cell(thp)} {cell(own):>10s} "
                      f"{pct(zw, raw)} {pct(zw, thp)} {pct(zw, own)} {pct(thp, own)}")


if __name__ == "__main__":
    main(sys.argv[1])
