"""Write README.md: the front page, its example outputs produced by the tool itself.

    python tools/readme.py          # rewrite README.md (run after a change that moves a number)
    python tools/readme.py --check  # exit 1 when a number in README.md is off what the tool prints now

tests/test_readme.py runs the check with a tolerance (TOLERANCE), so that a small move of the physics does not
fail it but a stale example does. Everything else a user may want is in docs/ (docs/guide.md first).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "README.md"
MAX_BYTES = 8192
TOLERANCE = 0.05          # relative; numbers under 1 compared to 0.05 absolute
WIDTH = "96"

# the commands whose output the README shows (the words after `trainest`)
ESTIMATE = ["estimate"]
PLAN = ["plan", "--model", "llama3-70b", "--devices", "64"]
COMPARE = ["compare", "--model", "llama3-70b", "--devices", "64", "--hardware", "h100-sxm,b200,mi300x"]
SWEEP = ["sweep", "--model", "llama3-70b", "--devices", "64..1024", "--plan"]
FINETUNE = ["estimate", "--model", "llama3-70b", "--hardware", "dgx-spark", "--finetune", "qlora", "--seq-len", "2048",
            "--global-batch", "8", "--recompute", "full", "--tokens", "20M"]


def run(args: list[str]) -> str:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": WIDTH, "TRAINEST_NO_FAST_PATH": ""}
    proc = subprocess.run([sys.executable, "-m", "trainest", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"trainest {' '.join(args)} failed: {proc.stderr[-500:]}")
    return proc.stdout


def doc(args: list[str]) -> dict:
    return json.loads(run([*args, "--json", "-q"]))


def _strip(lines: list[str]) -> str:
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def estimate_excerpt() -> str:
    """The default estimate's step table, its memory line and its whole-run table, as printed."""
    lines = run([*ESTIMATE, "-q"]).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Step:"))
    end = next(i for i in range(start + 2, len(lines)) if lines[i].startswith("└"))
    mem = next(line for line in lines if line.startswith("Memory per device:"))
    run_start = next(i for i, line in enumerate(lines) if line.startswith("Whole run"))
    run_end = next(i for i in range(run_start + 2, len(lines)) if lines[i].startswith("└"))
    return _strip(lines[start:end + 1] + [mem.split(" (")[0]] + lines[run_start:run_end + 1])


def compare_table() -> str:
    lines = run([*COMPARE, "-q"]).splitlines()
    end = next(i for i in range(3, len(lines)) if not lines[i].strip())
    return _strip(lines[:end])


def plan_line() -> str:
    d = doc(PLAN)
    p = d["plans"][0]
    par = p["parallel"]
    return (f"tp {par['tp']} pp {par['pp']} cp {par['cp']} dp {par['dp']}, micro-batch {p['micro_batch']}, ZeRO "
            f"{par['zero']}, recompute {p['recompute']}: {p['step']['time_s']:.2f} s per step, "
            f"{p['throughput']['mfu']:.0%} MFU, {p['memory']['per_device_bytes'] / 2**30:.0f} GiB per device, "
            f"{p['training']['time_days']:.0f} days")


def sweep_line() -> str:
    d = doc(SWEEP)
    pts = d["sweep"]
    first, last = pts[0], pts[-1]
    per = [p["throughput"]["tokens_per_s"] / p["value"] for p in (first, last)]
    return (f"at its best plan, {first['value']} devices train it in {first['training']['time_days']:.0f} days, "
            f"{last['value']} in {last['training']['time_days']:.1f} days ({per[1] / per[0]:.0%} of linear scaling)")


def finetune_line() -> str:
    d = doc(FINETUNE)
    return (f"{d['memory']['per_device_bytes'] / 1e9:.0f} GB of the Spark's {d['memory']['capacity_bytes'] / 1e9:.0f}, "
            f"{d['step']['time_s']:.0f} s per step of 8 x 2048 tokens, {d['training']['time_days']:.1f} days for "
            f"20 M tokens")


def cmd(args: list[str]) -> str:
    import shlex
    return "trainest " + shlex.join(args)


def accuracy_line() -> str:
    """The headline accuracy (one source left out, docs/cross-validation.json) and the band's coverage on the same
    footing (specs/bands.json), as tools/fit_defaults.py last wrote them."""
    sys.path.insert(0, str(ROOT / "tools"))
    from cross_validate import summary   # unrounded: the JSON's 7.85 (a float just under) would print 7.8, not 7.9
    s = summary(json.loads((ROOT / "docs" / "cross-validation.json").read_text(encoding="utf-8"))["runs"], None)
    o = json.loads((ROOT / "specs" / "bands.json").read_text(encoding="utf-8"))["checks"]["one_source_left_out"]["all"]
    text = (f"On published runs of a source left out of the fit (a cluster, framework or recipe it has not seen) the "
            f"step-time error is {s['dense']['left_out_mape_pct']:.1f} % MAPE over {s['dense']['runs']} dense runs, "
            f"{s['moe']['left_out_mape_pct']:.0f} % for MoE and {s['hybrid']['left_out_mape_pct']:.0f} % for hybrid "
            f"Mamba models; the printed band held for {o['coverage'] * 100:.0f} % of {o['runs']} such runs. Per "
            f"hardware, framework and family: [docs/validation.md](docs/validation.md).")
    return textwrap.fill(text, 110, break_on_hyphens=False)


def document() -> str:
    return TEMPLATE.format(accuracy=accuracy_line(), estimate=cmd(ESTIMATE), estimate_out=estimate_excerpt(),
                           plan=cmd(PLAN), plan_line=plan_line(), compare=cmd(COMPARE), compare_out=compare_table(),
                           sweep=cmd(SWEEP), sweep_line=sweep_line(), finetune=cmd(FINETUNE),
                           finetune_line=finetune_line()).rstrip() + "\n"


TEMPLATE = """# trainest

How long will one LLM training step take on this hardware, with this precision and parallel layout? Does it
fit in memory, what is the bottleneck, and what will the whole run cost in days, dollars, kWh and CO2, and
how far off may that be? `trainest` answers from the command line, analytically, in milliseconds, without a
GPU, and checks itself against hundreds of published measured training runs.

```bash
python -m pip install ".[test]" && trainest estimate
python -m pytest -p no:cacheprovider
```

The first line installs trainest (Python 3.11+) and estimates the default scenario: Llama 3 8B on one node of
8 H100, FSDP, 64 sequences of 8192 tokens per step. The second runs the tests. Every option changes only
itself (`--model llama3-70b`); what you leave out is shown as `(default)`. `trainest COMMAND --help` groups
the options (model, hardware, layout, batch, precision, fine-tuning, run and cost, output).

## One estimate

`{estimate}` prints the scenario, then (excerpt):

```
{estimate_out}
```

The band is the error of trainest on measured runs like this one (held-out, per hardware and scale); on
hardware with no measured run it says so. A scenario that does not fit says so on its first line, with the
changes that fit as commands you can paste. `--json` prints one JSON object for scripts (`docs/schema/`).

## Plan, compare, sweep, fine-tune

The fastest layout that fits, searched over every tensor, pipeline, context and data-parallel split,
micro-batch, ZeRO stage and recompute mode (`--objective cost`, `--deadline 30d` with `--devices 64..1024`):

```bash
{plan}
```

finds {plan_line}.

One job on several accelerators, each at its best plan (`--all-hardware`, `--price-per-hour b200=4.5`):

```bash
{compare}
```

```
{compare_out}
```

One knob over a range (`--seq-len 2k..32k`, `--precision bf16,fp8,fp4`; `--csv`, `--png`):

```bash
{sweep}
```

prints a table and a terminal plot: {sweep_line}.

Fine-tuning (`--finetune full|lora|qlora`), here QLoRA of a 70B model on one DGX Spark, whose price is its
purchase amortised over three years:

```bash
{finetune}
```

needs {finetune_line}.

## How accurate

{accuracy}

## More

- [docs/guide.md](docs/guide.md): every command with examples, CI gates (`--max-days`, `--max-cost`,
  `--require-fit`: exit 3), the error band, probe, validate and calibrate, output and exit codes.
- [docs/cli.md](docs/cli.md): every option of every command; [docs/inputs.md](docs/inputs.md): every input
  and its scenario YAML key; [specs/README.md](specs/README.md): hardware, model and runs files.
- [docs/model.md](docs/model.md): every formula with its source; [docs/validation.md](docs/validation.md): how
  accurate it is; [docs/cases.md](docs/cases.md): five worked cases.
- `trainest list hardware|models|frameworks`: the catalog, with prices and their dates.
- [CHANGELOG.md](CHANGELOG.md).
"""

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def numbers(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in NUMBER.findall(text)]


def differences(old: str, new: str) -> list[str]:
    """Where `old` (README.md) differs from `new` (what the tool prints now): words exactly, numbers within
    TOLERANCE."""
    if NUMBER.sub("#", old).split() != NUMBER.sub("#", new).split():
        return ["the text differs beyond its numbers: run python tools/readme.py"]
    out = []
    for a, b in zip(numbers(old), numbers(new), strict=True):
        if abs(a - b) > max(TOLERANCE * max(abs(a), abs(b)), 0.05):
            out.append(f"{a:g} is now {b:g}")
    return out


def main(argv: list[str]) -> int:
    text = document()
    if len(text.encode("utf-8")) > MAX_BYTES:
        print(f"README.md would be {len(text.encode('utf-8'))} bytes, over {MAX_BYTES}", file=sys.stderr)
        return 1
    if "--check" in argv:
        diffs = differences(OUT.read_text(encoding="utf-8"), text)
        for d in diffs:
            print(d, file=sys.stderr)
        return 1 if diffs else 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text.encode('utf-8'))} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
