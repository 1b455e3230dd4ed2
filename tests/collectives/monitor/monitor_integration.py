#!/usr/bin/env python3
"""Monitoring through real processes launched by zwrun (registered with ctest by CMakeLists.txt):

  endpoint  PY ZWRUN PROBE            the Prometheus endpoint parsed by prometheus_client's own text parser (PY is
                                      the python that has it; exit 77, with the reason, when none has), the JSON
                                      endpoint, and zwrun --metrics-dir gathering every rank's dump at exit
  dump      ZWRUN PROBE               zwrun --metrics-dir: a rank dumps its JSON on SIGUSR2, and every rank at exit
  straggler ZWRUN PROBE TRANSPORT N   one rank sleeps before each collective: rank 0 names it, and nobody else; then
                                      the same job without the sleep, as fast as it goes for 4 s: windows are
                                      judged all the same (rank 0's dump), and nobody is named
  flight    ZWRUN PROBE ZW_FLIGHT TRANSPORT stop|kill
                                      one of 3 ranks stops (SIGSTOP) or dies (SIGKILL) before collective 20: the
                                      flight files of all ranks say it never reached collective 20 and the others did
  flight_formats ZW_FLIGHT            files of flight-recorder versions 2 (96-byte records, a count of records in the
                                      header) and 3 (64-byte records found by their versions, a ring that wrapped),
                                      written here byte by byte: zw_flight reads both, derives version 3's bytes, and
                                      names the rank that never reached a collective
  zwtop     ZWRUN PROBE ZWTOP         zwtop runs in tmux against a live job; its screen shows the collective, each
                                      rank's row and the straggler mark
  bad_port  ZWRUN PROBE               ZW_METRICS_PORT past the last TCP port with the local rank added: each rank
                                      says so and serves nothing (it used to wrap onto another port), the job
                                      runs; zwrun --metrics-port refuses such a port for its ranks
  zwtop_store PROBE ZWTOP STORE_TOOL [TORCHPY]
                                      a job launched as torchrun launches it (RANK, MASTER_ADDR/PORT,
                                      TORCHELASTIC_RUN_ID: rank 0 serves the store at MASTER_PORT+1, token derived
                                      from the run id), no zwrun: zwtop --store MASTER_ADDR:MASTER_PORT finds both
                                      ranks through the store; with TORCHPY (a python with torch), the same endpoints
                                      published under a torch c10d TCPStore's keys are found through torch
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def free_port_base(n):
    """A base port with n consecutive free ports on 127.0.0.1."""
    for _ in range(200):
        base = random.randint(20000, 50000)
        try:
            socks = []
            for i in range(n):
                s = socket.socket()
                s.bind(("127.0.0.1", base + i))
                socks.append(s)
            for s in socks:
                s.close()
            return base
        except OSError:
            for s in socks:
                s.close()
    fail("no free ports")


def fetch(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def start_job(zwrun, probe, n, transport, probe_args, env=None, zwrun_args=()):
    e = dict(os.environ)
    e.update(env or {})
    cmd = [zwrun, "-n", str(n), "--transport", transport, "--timeout", "240", *zwrun_args, "--", probe, *probe_args]
    return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_ops(port, ops, timeout=120):
    """Polls a rank's JSON endpoint until it finished `ops` operations; returns the JSON."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            j = json.loads(fetch(port, "/metrics.json"))
            if j["communicators"] and sum(s["count"] for s in j["communicators"][0]["stats"]) >= ops:
                return j
        except OSError:
            pass
        time.sleep(0.2)
    fail(f"endpoint on port {port} never reported {ops} operations")


def endpoint(py, zwrun, probe):
    if py == "none":
        print("SKIPPED: prometheus_client is unavailable (tools/monitor-env.sh could not make its venv); the "
              "endpoint was not checked with Prometheus' own parser")
        return SKIP
    if os.environ.get("ZW_MONITOR_TEST_CHILD") != "1":  # re-run under the python that has prometheus_client
        env = dict(os.environ, ZW_MONITOR_TEST_CHILD="1")
        return subprocess.call([py, __file__, "endpoint", py, zwrun, probe], env=env)
    from prometheus_client.parser import text_string_to_metric_families
    tmp = tempfile.mkdtemp(prefix="zw_mon_ep_")
    hold = os.path.join(tmp, "hold")
    port = free_port_base(2)
    ops = 150
    job = start_job(zwrun, probe, 2, "shm", ["--ops", str(ops), "--hold-file", hold],
                    zwrun_args=["--metrics-port", str(port), "--metrics-dir", os.path.join(tmp, "metrics")])
    try:
        for r in range(2):
            wait_ops(port + r, ops)
            families = {f.name: f for f in text_string_to_metric_families(fetch(port + r, "/metrics"))}
            for name, kind in [("zerowire_operations", "counter"), ("zerowire_operation_bytes", "counter"),
                               ("zerowire_operation_errors", "counter"), ("zerowire_busbw_bytes_per_second", "gauge"),
                               ("zerowire_algbw_bytes_per_second", "gauge"),
                               ("zerowire_operation_duration_seconds", "histogram"),
                               ("zerowire_operation_duration_quantile_seconds", "gauge"),
                               ("zerowire_operations_in_flight", "gauge"),
                               ("zerowire_current_operation_running_seconds", "gauge")]:
                if name not in families or families[name].type != kind:
                    fail(f"rank {r}: family {name} ({kind}) missing or mistyped: {sorted(families)}")
            total = [s for s in families["zerowire_operations"].samples if s.name == "zerowire_operations_total"]
            if len(total) != 1 or total[0].value != ops or total[0].labels["op"] != "all_gather" \
                    or total[0].labels["rank"] != str(r) or total[0].labels["transport"] != "shm":
                fail(f"rank {r}: zerowire_operations_total samples {total}")
            hist = families["zerowire_operation_duration_seconds"].samples
            buckets = [s for s in hist if s.name.endswith("_bucket")]
            values = [s.value for s in buckets]
            if values != sorted(values) or buckets[-1].labels["le"] != "+Inf" or buckets[-1].value != ops:
                fail(f"rank {r}: histogram buckets not cumulative or +Inf != {ops}")
            alg = families["zerowire_algbw_bytes_per_second"].samples[0].value
            bus = families["zerowire_busbw_bytes_per_second"].samples[0].value
            if not (alg > 0 and abs(bus - alg / 2) <= 1e-6 * alg):
                fail(f"rank {r}: busbw {bus} is not algbw {alg} x 1/2 for 2 ranks")
            q = {s.labels["quantile"]: s.value for s in families["zerowire_operation_duration_quantile_seconds"].samples}
            if not (0 < q["0.5"] <= q["0.9"] <= q["0.99"]):
                fail(f"rank {r}: percentiles out of order: {q}")
            if families["zerowire_operations_in_flight"].samples[0].value != 0:
                fail(f"rank {r}: operations in flight after the job's last wait")
            probe = families.get("zerowire_probe_operations_done")  # a zw::metrics::set_gauge gauge
            if probe is None or probe.type != "gauge" or [(s.labels, s.value) for s in probe.samples] != \
                    [({"rank": str(r)}, ops)]:
                fail(f"rank {r}: the probe's gauge zerowire_probe_operations_done: {probe}")
        with open(hold, "w"):
            pass
        out, _ = job.communicate(timeout=120)
        if job.returncode != 0:
            fail(f"job exited {job.returncode}:\n{out}")
        for r in range(2):
            path = os.path.join(tmp, "metrics", f"rank{r}.json")
            with open(path) as f:
                j = json.load(f)
            stats = j["communicators"][0]["stats"]
            if j["communicators"][0]["rank"] != r or sum(s["count"] for s in stats) != ops:
                fail(f"{path}: wrong rank or count: {stats}")
        print(f"endpoint: 2 ranks' /metrics parsed by prometheus_client, dumps gathered in {tmp}/metrics")
        return 0
    finally:
        if job.poll() is None:
            job.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def dump(zwrun, probe):
    """zwrun --metrics-dir: SIGUSR2 makes a rank write its dump now; at exit every rank's lands there."""
    tmp = tempfile.mkdtemp(prefix="zw_mon_dump_")
    hold, mdir = os.path.join(tmp, "hold"), os.path.join(tmp, "metrics")
    port = free_port_base(3)
    job = start_job(zwrun, probe, 3, "tcp", ["--ops", "60", "--op", "all_reduce", "--hold-file", hold],
                    zwrun_args=["--metrics-port", str(port), "--metrics-dir", mdir])
    try:
        snap = wait_ops(port + 1, 60)
        path = os.path.join(mdir, "rank1.json")
        if os.path.exists(path):
            fail("rank 1 dumped before it was asked to")
        os.kill(snap["pid"], signal.SIGUSR2)
        for _ in range(100):
            if os.path.exists(path):
                break
            time.sleep(0.05)
        with open(path) as f:
            j = json.load(f)
        if j["pid"] != snap["pid"] or j["communicators"][0]["stats"][0]["count"] != 60:
            fail(f"rank 1's SIGUSR2 dump: {j}")
        with open(hold, "w"):
            pass
        out, _ = job.communicate(timeout=120)
        if job.returncode != 0:
            fail(f"job exited {job.returncode}:\n{out}")
        for r in range(3):
            with open(os.path.join(mdir, f"rank{r}.json")) as f:
                c = json.load(f)["communicators"][0]
            if c["rank"] != r or c["size"] != 3 or c["stats"][0]["op"] != "all_reduce" or c["stats"][0]["count"] != 60:
                fail(f"rank {r}'s dump at exit: {c}")
        print(f"dump: SIGUSR2 dump of rank 1, and 3 ranks' dumps at exit in {mdir}")
        return 0
    finally:
        if job.poll() is None:
            job.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def straggler_lines(out):
    return re.findall(r"straggler: rank (\d+) \(host", out)


def rank0_straggler(mdir):
    """Rank 0's straggler state from its dump at exit: (windows judged, windows missed, the last verdict or None)."""
    with open(os.path.join(mdir, "rank0.json")) as f:
        c = json.load(f)["communicators"][0]
    return c["straggler_windows"]["judged"], c["straggler_windows"]["missed"], c["straggler"]


def straggler(zwrun, probe, transport, n):
    """One rank sleeps 15 ms before each collective: rank 0 names it, and nobody else. Then the same job without the
    sleep, its collectives as fast as they go for 4 s (windows last milliseconds, the exchange's tick 50 ms): rank 0
    judges windows all the same, and names nobody."""
    n = int(n)
    late = n - 1 if n > 2 else 1
    tmp = tempfile.mkdtemp(prefix="zw_mon_strag_")
    try:
        env = {"ZW_STRAGGLER_WINDOW": "30", "ZW_DEBUG": "WARN"}
        args = ["--op", "all_gather", "--bytes", "4096"]
        mdir = os.path.join(tmp, "delayed")
        job = start_job(zwrun, probe, n, transport,
                        args + ["--ops", "150", "--delay-rank", str(late), "--delay-ms", "15"], env,
                        zwrun_args=["--metrics-dir", mdir])
        out, _ = job.communicate(timeout=300)
        if job.returncode != 0:
            fail(f"delayed job exited {job.returncode}:\n{out}")
        named = straggler_lines(out)
        if not named or any(int(r) != late for r in named):
            fail(f"{transport} {n} ranks, rank {late} delayed 15 ms: straggler lines name {named}:\n{out}")
        judged, missed, verdict = rank0_straggler(mdir)
        if judged < 1 or verdict is None or verdict["named"] != late:
            fail(f"{transport} {n} ranks, rank {late} delayed: rank 0's dump has {judged} windows judged, "
                 f"{missed} missed, verdict {verdict}")
        mdir = os.path.join(tmp, "undelayed")
        env["ZW_STRAGGLER_WINDOW"] = "200"
        job = start_job(zwrun, probe, n, transport, args + ["--seconds", "4"], env,
                        zwrun_args=["--metrics-dir", mdir])
        out2, _ = job.communicate(timeout=300)
        if job.returncode != 0:
            fail(f"undelayed job exited {job.returncode}:\n{out2}")
        if straggler_lines(out2):
            fail(f"{transport} {n} ranks, nobody delayed: named {straggler_lines(out2)}:\n{out2}")
        judged2, missed2, verdict2 = rank0_straggler(mdir)
        if judged2 < 1 or verdict2 is None or verdict2["named"] != -1:
            fail(f"{transport} {n} ranks, nobody delayed, 4 s of collectives: rank 0 judged {judged2} windows "
                 f"(missed {missed2}), verdict {verdict2}: the exchange must keep up with fast collectives")
        print(f"straggler {transport} {n} ranks: rank {late} named {len(named)} time(s) when delayed "
              f"({judged} windows judged, {missed} missed); nobody otherwise ({judged2} judged, {missed2} missed)")
        print([l for l in out.splitlines() if "straggler:" in l][0])
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def flight(zwrun, probe, zw_flight, transport, mode):
    tmp = tempfile.mkdtemp(prefix="zw_mon_flight_")
    try:
        env = {"ZW_TIMEOUT": "4", "ZW_STRAGGLER_WINDOW": "0"}
        job = start_job(zwrun, probe, 3, transport,
                        ["--ops", "40", "--die-rank", "2", "--die-at", "20", "--die", mode],
                        env, zwrun_args=["--flight-dir", tmp])
        out, _ = job.communicate(timeout=120)
        if job.returncode == 0:
            fail(f"the job with rank 2 {mode}ped succeeded:\n{out}")
        files = sorted(os.listdir(tmp))
        if len(files) != 3:
            fail(f"expected 3 flight files in {tmp}, found {files}")
        res = subprocess.run([sys.executable, zw_flight, tmp, "--json"], capture_output=True, text=True)
        if res.returncode != 0:
            fail(f"zw_flight failed: {res.stderr}")
        comm = json.loads(res.stdout)[0]
        missing = comm["missing"]
        if len(missing) != 1 or missing[0]["rank"] != 2 or missing[0]["never_reached"] != 20 \
                or sorted(missing[0]["blocked"]) != [0, 1]:
            fail(f"zw_flight's verdict: {missing}")
        r2 = comm["ranks"]["2"]
        if r2["last_done"]["coll_index"] != 19 or r2["running"] is not None:
            fail(f"rank 2's records: {r2}")
        for r, s in comm["ranks"].items():  # the header's issue counter, read from where this version keeps it
            last = s["running"] or s["failed_in"] or s["last_done"]
            if not last or s["issued"] < last["seq"] or s["issued"] > last["seq"] + 1:
                fail(f"rank {r} issued {s['issued']} operations, but its last record is {last}")
        for r in ("0", "1"):
            s = comm["ranks"][r]
            # Blocked in collective 20 when zwrun stopped the job, or failed in it (timeout, dead peer).
            blocked = s["running"] is not None and s["running"]["coll_index"] == 20
            failed_in = s["failed"] and s["failed_in"] and s["failed_in"]["coll_index"] == 20
            if not (blocked or failed_in):
                fail(f"rank {r} should be blocked or have failed in collective 20: {s}")
        text = subprocess.run([sys.executable, zw_flight, tmp], capture_output=True, text=True).stdout
        if "rank 2 never reached collective 20" not in text:
            fail(f"zw_flight's text:\n{text}")
        print(f"flight {transport} {mode}:\n{text}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

# op_record.h's layouts, written independently of zw_flight's reader: the 512-byte header, then the slots.
FLIGHT_HEADER = struct.Struct("<8sIIIIiiiIQQQQQQ64s64s16s256sQ16s")


def flight_file(path, version, rank, size, records, capacity, last_enqueued):
    """A ring file of `version` holding `records` (index, seq, coll_index, count, state) of 2-rank all_gathers of
    floats; state 1 running, 2 done."""
    slot_bytes = 96 if version == 2 else 64
    written = max((r[0] for r in records), default=-1) + 1
    header = FLIGHT_HEADER.pack(b"ZWFLIGHT", version, 512, slot_bytes, capacity, rank, size, 4242, 0, 0, 0,
                                written if version == 2 else 0, 0, 0, 0, b"hostx", b"fmt", b"shm", b"", last_enqueued,
                                b"")
    slots = bytearray(capacity * slot_bytes)
    for index, seq, coll, count, state in records:
        rnd = index // capacity
        version_word = 4 * rnd + (2 if state == 1 else 4)
        packed = 0 | 0 << 8 | 0 << 16 | 0 << 24 | state << 32  # all_gather, ring, float, sum; host path
        end = 0 if state == 1 else 1000 * seq + 500
        if version == 2:
            words = (version_word, seq, coll, count * 4 * size, count, 1000 * seq, 1000 * seq + 1, end, packed, 0, 0, 0)
            struct.pack_into("<12Q", slots, (index % capacity) * 96, *words)
        else:
            words = (version_word, seq, coll, count, 1000 * seq, 1000 * seq + 1, end, packed)
            struct.pack_into("<8Q", slots, (index % capacity) * 64, *words)
    with open(path, "wb") as f:
        f.write(header + bytes(slots))


def flight_formats(zw_flight):
    tmp = tempfile.mkdtemp(prefix="zw_mon_fmt_")
    try:
        for version in (2, 3):
            d = os.path.join(tmp, f"v{version}")
            os.mkdir(d)
            # Rank 0 finished collectives 0..40 and runs 41 (its ring of 16 wrapped twice); rank 1 finished 0..37.
            r0 = [(i, i + 1, i, 256, 2) for i in range(41)] + [(41, 42, 41, 256, 1)]
            r1 = [(i, i + 1, i, 256, 2) for i in range(38)]
            for rank, recs in ((0, r0), (1, r1)):
                flight_file(os.path.join(d, f"zw-flight-hostx-4242-fmt-r{rank}.bin"), version, rank, 2, recs, 16,
                            recs[-1][1])
            res = subprocess.run([sys.executable, zw_flight, d, "--json", "--records", "16"], capture_output=True,
                                 text=True)
            if res.returncode != 0 or "skipping" in res.stderr:
                fail(f"zw_flight on version {version}: {res.stderr}")
            comm = json.loads(res.stdout)[0]
            r0_recs = comm["records"]["0"]
            if [r["seq"] for r in r0_recs] != list(range(27, 43)):
                fail(f"version {version}: rank 0's last 16 records are {[r['seq'] for r in r0_recs]}")
            if any(r["bytes"] != 2048 or r["count"] != 256 or r["op"] != "all_gather" or r["dtype"] != "float"
                   for r in r0_recs):
                fail(f"version {version}: a record's fields: {r0_recs}")
            if comm["ranks"]["0"]["running"]["seq"] != 42 or comm["ranks"]["0"]["last_done"]["seq"] != 41:
                fail(f"version {version}: rank 0: {comm['ranks']['0']}")
            missing = comm["missing"]
            if len(missing) != 1 or missing[0]["rank"] != 1 or missing[0]["never_reached"] != 38:
                fail(f"version {version}: zw_flight's verdict: {missing}")
        short = os.path.join(tmp, "short.bin")
        with open(os.path.join(tmp, "v3", "zw-flight-hostx-4242-fmt-r0.bin"), "rb") as f:
            head = f.read(512 + 64)
        with open(short, "wb") as f:
            f.write(head)
        res = subprocess.run([sys.executable, zw_flight, short], capture_output=True, text=True)
        if "shorter than its 16 records" not in res.stderr:
            fail(f"a truncated file: {res.stderr}")
        print("flight formats 2 and 3: read alike")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def zwtop(zwrun, probe, zwtop_path):
    if shutil.which("tmux") is None:
        print("SKIPPED: tmux is not installed (tools/install-deps.sh installs it); zwtop's screen was not checked")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="zw_mon_top_")
    hold = os.path.join(tmp, "hold")
    port = free_port_base(2)
    session = f"zwtop{os.getpid()}"
    job = start_job(zwrun, probe, 2, "shm", ["--ops", "90", "--delay-rank", "1", "--delay-ms", "10", "--hold-file", hold],
                    {"ZW_STRAGGLER_WINDOW": "20"}, zwrun_args=["--metrics-port", str(port)])
    try:
        wait_ops(port, 90)
        time.sleep(0.5)  # rank 0's service thread judges the last complete window
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "30",
                        f"{sys.executable} {zwtop_path} -n 2 --port {port} --interval 0.5"], check=True)
        screen = ""
        for _ in range(40):
            time.sleep(0.25)
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
            if "<- straggler" in screen:
                break
        rows = {int(m.group(1)): m.group(0) for m in re.finditer(r"^\s+(\d)\s+default .*$", screen, re.M)}
        coll = re.search(r"default\s+all_gather\s+8K\s+(\d+)", screen)
        if not coll or int(coll.group(1)) != 180 or sorted(rows) != [0, 1] or "idle" not in rows[0] \
                or "<- straggler" not in rows[1] or "<- straggler" in rows[0]:
            fail(f"zwtop's screen:\n{screen}")
        subprocess.run(["tmux", "send-keys", "-t", session, "q"])
        time.sleep(1)
        alive = subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode == 0
        if alive:
            fail("zwtop did not quit on 'q'")
        print("zwtop screen:\n" + screen)
        return 0
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        with open(hold, "w"):
            pass
        try:
            job.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def zwtop_store(probe, zwtop_path, store_tool, torchpy=""):
    tmp = tempfile.mkdtemp(prefix="zw_mon_store_")
    hold = os.path.join(tmp, "hold")
    master, metrics = free_port_base(2), free_port_base(2)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master), TORCHELASTIC_RUN_ID=f"run{os.getpid()}",
               WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", ZW_METRICS_PORT=str(metrics))
    env.pop("ZW_AUTH_TOKEN", None)
    env.pop("ZW_STORE_ADDR", None)
    jobs = [subprocess.Popen([probe, "--ops", "25", "--hold-file", hold], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    try:
        for r in range(2):
            wait_ops(metrics + r, 25)
        # zwtop runs with the job's launcher variables (the run id makes the token) but is not a rank itself.
        top_env = {k: v for k, v in env.items() if k not in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "ZW_METRICS_PORT")}
        out = subprocess.run([sys.executable, zwtop_path, "--store", f"127.0.0.1:{master}", "--once",
                              "--store-tool", store_tool], env=top_env,
                             capture_output=True, text=True, timeout=120)
        rows = re.findall(r"^\s+(\d)\s+default\s+\S+\s+(\d+)\s+25\s", out.stdout, re.M)
        coll = re.search(r"default\s+all_gather\s+8K\s+(\d+)", out.stdout)
        pids = sorted(str(j.pid) for j in jobs)
        if out.returncode != 0 or sorted(r for r, _ in rows) != ["0", "1"] or sorted(p for _, p in rows) != pids \
                or not coll or int(coll.group(1)) != 50:
            fail(f"zwtop --store (rc {out.returncode}):\n{out.stdout}\n{out.stderr}")
        print("zwtop --store, zerowire's store at MASTER_PORT+1:\n" + out.stdout)
        if torchpy:
            torch_store(torchpy, zwtop_path, tmp, metrics)
        return 0
    finally:
        with open(hold, "w"):
            pass
        for j in jobs:
            try:
                j.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                j.kill()
        shutil.rmtree(tmp, ignore_errors=True)


TORCH_MASTER = """
import datetime, sys, time, torch.distributed as d
m = d.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
# The keys the torch backend's communicator writes: torch's group prefixes, then zerowire's own.
s = d.PrefixStore("0/", d.PrefixStore("default_pg", m))
for r, rec in enumerate(sys.argv[1:]):
    s.set(f"zw/torch/0/monitor/endpoint/{r}", rec)
print(m.port, flush=True)
sys.stdin.read()
"""


def torch_store(torchpy, zwtop_path, tmp, metrics):
    recs = [json.dumps(dict(rank=r, size=2, comm="torch", host=socket.gethostname(), addr="127.0.0.1",
                            port=metrics + r, pid=0)) for r in range(2)]
    master = subprocess.Popen([torchpy, "-c", TORCH_MASTER, *recs], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        port = int(master.stdout.readline())
        out = subprocess.run([torchpy, zwtop_path, "--store", f"127.0.0.1:{port}", "--once",
                              "--store-tool", "/nonexistent"], capture_output=True, text=True, timeout=120)
        rows = re.findall(r"^\s+(\d)\s+default\s", out.stdout, re.M)
        if out.returncode != 0 or sorted(rows) != ["0", "1"]:
            fail(f"zwtop --store on a torch store (rc {out.returncode}):\n{out.stdout}\n{out.stderr}")
        print("zwtop --store, torch's c10d store:\n" + out.stdout)
    finally:
        master.communicate(input="", timeout=30)


def bad_port(zwrun, probe):
    # At INFO, a started endpoint says "metrics endpoint: http://...".
    job = start_job(zwrun, probe, 2, "shm", ["--ops", "20"],
                    env={"ZW_METRICS_PORT": "70000", "ZW_DEBUG": "INFO", "ZW_DEBUG_SUBSYS": "COLL"})
    out, _ = job.communicate(timeout=120)
    if job.returncode != 0:
        fail(f"job exited {job.returncode}:\n{out}")
    for r in range(2):
        want = f"ZW_METRICS_PORT=70000 + local rank {r} = {70000 + r} is past the last TCP port (65535)"
        if want not in out:
            fail(f"rank {r} did not say '{want}':\n{out}")
    if "metrics endpoint: http" in out:
        fail(f"an endpoint was started on a wrapped port:\n{out}")
    r = subprocess.run([zwrun, "-n", "3", "--metrics-port", "65534", "--", probe, "--ops", "1"], capture_output=True,
                       text=True, timeout=60)
    if r.returncode == 0 or "choose a port of at most 65533" not in r.stderr:
        fail(f"zwrun -n 3 --metrics-port 65534 exited {r.returncode}:\n{r.stdout}{r.stderr}")
    print("bad_port: both ranks refused port 70000 + local rank and ran; zwrun refused 65534 for 3 ranks")
    return 0


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    sys.exit({"endpoint": endpoint, "dump": dump, "straggler": straggler, "flight": flight,
              "flight_formats": flight_formats, "zwtop": zwtop, "bad_port": bad_port,
              "zwtop_store": zwtop_store}[what](*args))
