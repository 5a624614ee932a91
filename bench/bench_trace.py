"""`trainest calibrate --trace` on a trace of a few MB: read, classify, compare, fit, write (not a timed test).

    python bench/bench_trace.py          # prints the seconds of each part and of the whole command

The issue's target: under 2 s for a few-MB file. Inputs: DeepSeek's published H800 trace (3.1 MB JSON,
tests/data, gzipped) with --trace-layers 4, and trainest's own timeline of a dense 8B step (a few MB).
"""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEEPSEEK = ROOT / "tests" / "data" / "deepseek-v3-train-h800-ep64.json.gz"
DEEPSEEK_ARGS = ["--model", "deepseek-v3", "--hardware", "h800-sxm", "--devices", "2048", "--pp", "16", "--ep", "64",
                 "--pipeline-schedule", "dualpipe", "--pipeline-split", "balanced", "--precision", "fp8",
                 "--seq-len", "4096", "--global-batch", "15360", "--trace-layers", "4"]
DENSE_ARGS = ["--model", "llama3-8b", "--devices", "16", "--tp", "2", "--pp", "2", "--seq-len", "4096",
              "--global-batch", "64"]


def _run(args: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one command: on a shared machine the wall time counts the others' load too."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trainest", *args], check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        plain = Path(d) / "deepseek.json"
        plain.write_bytes(gzip.decompress(DEEPSEEK.read_bytes()))
        mine = Path(d) / "dense.json"
        _run(["estimate", *DENSE_ARGS, "--timeline", str(mine), "-q", "--json"])
        for label, path, args in (("deepseek-v3 H800 (published)", plain, DEEPSEEK_ARGS),
                                  ("llama3-8b timeline (trainest)", mine, DENSE_ARGS)):
            mb = path.stat().st_size / 1e6
            wall, cpu = _run(["calibrate", "--trace", str(path), *args, "-o", str(Path(d) / "p.yaml"), "--json"])
            print(json.dumps({"trace": label, "mb": round(mb, 2), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}))


if __name__ == "__main__":
    main()
