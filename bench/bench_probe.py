"""Wall time of `trainest probe`'s CPU probe against its budget (the timing the unit tests leave out:
a wall-clock assert fails on a busy machine; tests/test_probe.py checks what the probe measures).

    python bench/bench_probe.py [--budget 2.0] [-n 3] [--report-only]

Runs `trainest.probe.probe_cpu(budget_s=...)` N times in this process and prints each run's elapsed
seconds (the probe's own clock) and the process CPU time. Exits 1 when the median elapsed time is over
2 x budget + 1 s (unless --report-only). On a shared machine the load moves it: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    from trainest import probe
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=2.0)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    elapsed = []
    for i in range(args.n):
        cpu0 = time.process_time()
        result = probe.probe_cpu(budget_s=args.budget)
        elapsed.append(result.elapsed_s)
        print(f"run {i + 1}: {result.elapsed_s:.2f} s elapsed, {time.process_time() - cpu0:.2f} s CPU "
              f"(budget {args.budget:g} s)")
    median = statistics.median(elapsed)
    limit = 2.0 * args.budget + 1.0
    print(f"median {median:.2f} s; limit {limit:.2f} s")
    return 0 if args.report_only or median <= limit else 1


if __name__ == "__main__":
    raise SystemExit(main())
