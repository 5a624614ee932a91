"""Benchmark `trainest plan`: wall time of the whole command (interpreter start-up included) and
the search's own plans per second, for the two targets of issue 4, the MoE case of issue 13 and a
hybrid Mamba-2 case.

    python bench/bench_plan.py [--repeat 5]

Runs the CLI as a subprocess (`python -m trainest plan ... --json`), so the wall time is what a user
waits for; plans/s and the plan counts come from the JSON `search` block.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

CASES = {
    "GPT-3 175B, 1,024 x A100 80GB, B=1536, s=2048": [
        "--model", "gpt3-175b", "--hardware", "a100-80gb-sxm", "--devices", "1024", "--global-batch", "1536",
        "--seq-len", "2048"],
    "Megatron 530B, 2,240 x A100 80GB, B=2240, s=2048": [
        "--model", "megatron-530b", "--hardware", "a100-80gb-sxm", "--devices", "2240", "--global-batch", "2240",
        "--seq-len", "2048"],
    # issue 13: a mixture of experts with MLA, ep and etp searched too (Megatron-Bridge's DeepSeek-V3 H100 job)
    "DeepSeek-V3 671B (MoE, MLA), 1,024 x H100, B=8192, s=4096, FP8": [
        "--model", "deepseek-v3", "--hardware", "h100-sxm", "--devices", "1024", "--global-batch", "8192",
        "--seq-len", "4096", "--precision", "fp8"],
    # a hybrid of Mamba-2, attention and LatentMoE blocks with multi-token prediction (docs/model.md §16)
    "Nemotron 3 Super (hybrid, LatentMoE, MTP), 256 x GB200, B=2048, s=8192, FP8": [
        "--model", "nemotron-3-super", "--hardware", "gb200", "--devices", "256", "--global-batch", "2048",
        "--seq-len", "8192", "--precision", "fp8"],
}
TARGET_WALL_S = 2.0


def run_once(args: list[str]) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds of the child, JSON document). CPU time is the steadier figure on a
    shared machine: wall time also counts waiting for a core."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "trainest", "plan", *args, "--json"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"trainest plan failed ({out.returncode}): {out.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per case (median and best are reported)")
    opts = ap.parse_args()
    failed = False
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    for name, args in CASES.items():
        walls, cpus, searches, doc = [], [], [], {}
        for _ in range(opts.repeat):
            wall, cpu, doc = run_once(args)
            walls.append(wall)
            cpus.append(cpu)
            searches.append(doc["search"]["seconds"])
        s = doc["search"]
        best = doc["plans"][0]
        p = best["parallel"]
        ok = statistics.median(walls) <= TARGET_WALL_S
        failed |= not ok
        print(f"{name}")
        print(f"  plans evaluated {s['evaluated']:,} (feasible {s['feasible']:,}; rejected "
              + ", ".join(f"{k} {v:,}" for k, v in s["rejected"].items()) + ")")
        print(f"  wall time incl. start-up: median {statistics.median(walls):.2f} s, best {min(walls):.2f} s "
              f"(target <= {TARGET_WALL_S:g} s: {'met' if ok else 'MISSED'}); CPU time median "
              f"{statistics.median(cpus):.2f} s")
        print(f"  search only: median {statistics.median(searches):.3f} s = "
              f"{s['evaluated'] / statistics.median(searches):,.0f} plans/s")
        print(f"  best plan: tp={p['tp']} pp={p['pp']} cp={p['cp']} dp={p['dp']} vpp={p['vpp']} ep={p['ep']} "
              f"etp={p['etp']} zero={p['zero']} "
              f"sp={p['sequence_parallel']} b={best['micro_batch']} recompute={best['recompute']}: "
              f"step {best['step']['time_s']:.3f} s, MFU {best['throughput']['mfu']:.1%}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
