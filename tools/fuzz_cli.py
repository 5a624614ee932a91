"""Random command lines and random scenario/runs files through the whole CLI, in process (issue 32).

Each case is a `trainest ...` command line drawn from the knob table's options (valid values, edge values
and junk), sometimes with a scenario file (an estimate's mutated `inputs` echo, or random keys) or a runs file
(a bundled run, mutated). The output is checked for what must never happen:

    traceback      an exception other than SystemExit escaped, or 'Traceback' on stderr
    nonfinite      NaN or inf in the JSON (Python's json writes NaN/Infinity), or 'nan'/'inf' in a table
    negative       a negative time, size, count, cost or energy in the JSON
    error_exit0    exit 0 with an 'Error:' line on stderr
    error_stdout   an 'Error:' exit that also wrote to stdout (bad input: nothing on stdout)
    error_lines    an error message of more than one line, or an empty one
    changed        a value given as an option that the JSON's `inputs` echo shows otherwise, or lists as derived

    python tools/fuzz_cli.py [-n 2000] [--seed 1] [--show 5] [--json FILE]

Exit 1 when anything is found. The draw is seeded, so a finding reproduces with the same --seed and -n.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
import re
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from golden import json_numbers  # noqa: E402  (tools/: the number walker the invariants use)

from trainest import choices as C  # noqa: E402

MODELS = ["llama3-8b", "llama3-70b", "qwen3-4b", "qwen3-30b-a3b", "mixtral-8x7b", "gpt3-175b", "deepseek-v3",
          "qwen3-32b", "nosuch-model", "llama3-8", ""]
HARDWARE = ["h100-sxm", "h100-pcie", "a100-80gb-sxm", "b200", "b300", "gh200", "mi300x", "tpu-v5p", "gaudi3",
            "dgx-spark", "rtx-4090", "trainium2", "groq", "h100", "nosuch", ""]
CHOICES = {"precision": C.PRECISIONS, "mlp": C.MLPS, "recompute": C.RECOMPUTES, "attention": C.ATTENTIONS,
           "kernels": C.KERNELS, "optimizer": C.OPTIMIZERS, "adam_moments": C.ADAM_MOMENTS,
           "pipeline_split": C.PIPELINE_SPLITS, "dp_collectives": C.DP_COLLECTIVES, "framework": C.FRAMEWORKS,
           "finetune": C.FINETUNES, "lora_targets": C.LORA_TARGETS, "offload": C.OFFLOADS,
           "moe_overlap": C.MOE_OVERLAPS, "pipeline_schedule": C.PIPELINE_SCHEDULES,
           "cuda_graphs": ("none", "partial", "full")}
INTS = {"devices": [1, 2, 4, 8, 16, 64, 256, 3, 6, 1024], "tp": [1, 2, 4, 8, 3], "pp": [1, 2, 4, 8, 3],
        "cp": [1, 2, 4], "dp": [1, 2, 4, 8, 16], "vpp": [1, 2, 3], "ep": [1, 2, 4, 8, 64], "etp": [1, 2],
        "zero": [0, 1, 2, 3, 4], "micro_batch": [1, 2, 4, 8], "global_batch": [1, 8, 64, 512, 4096, 7],
        "dp_shard": [1, 2, 8], "devices_per_node": [1, 4, 8, 72], "layers": [1, 2, 32, 61, 96],
        "hidden": [64, 4096, 8192, 1000], "ffn_hidden": [128, 14336], "heads": [1, 8, 32, 7],
        "kv_heads": [1, 8, 32], "vocab": [100, 32000, 128256], "experts": [1, 8, 64], "top_k": [1, 2, 8],
        "expert_ffn_hidden": [512, 2048], "attention_window": [128, 4096], "packed_length": [256, 4096],
        "lora_rank": [1, 8, 16, 256], "base_bits": [4, 8, 16, 3]}
FLOATS = {"moe_imbalance": [1.0, 1.2, 2.0], "lora_alpha": [1.0, 16.0, 32.0], "price_per_hour": [0.5, 2.5, 100.0],
          "pue": [1.0, 1.2, 2.0], "grid_gco2_per_kwh": [0.0, 400.0]}
STRS = {"seq_len": ["2048", "4k", "8192", "32k", "128k", "1000"], "global_batch_tokens": ["1M", "4M", "16M"],
        "tokens": ["1B", "15T", "100M", "2e12"], "memory_headroom": ["5%", "2GiB", "0", "50%"],
        "recompute_modules": ["core_attn", "mlp,moe", "layernorm"], "max_days": ["1", "30d", "0.001"],
        "max_cost": ["1000", "1e9"], "pipeline_layout": ["Et|t|tL", "Et*2|t*2L"]}
JUNK = ["-1", "0", "nan", "inf", "-inf", "1e400", "", " ", "abc", "1.5", "0x10", "1:04", "２", "1_000", "9" * 30,
        "--json", "'", "\x00", "8 ", "١٢"]
FLAGS = ["--fsdp", "--sequence-parallel", "--no-sequence-parallel", "--tp-overlap", "--dp-overlap",
         "--no-dp-overlap", "--require-fit", "--ops", "-q"]

GIVEN_ECHO = {"--devices": ("devices",), "--seq-len": ("seq_len",), "--tp": ("parallel", "tp"),
              "--pp": ("parallel", "pp"), "--cp": ("parallel", "cp"), "--zero": ("parallel", "zero"),
              "--micro-batch": ("micro_batch",), "--global-batch": ("global_batch",),
              "--precision": ("precision",), "--recompute": ("recompute",), "--framework": ("framework",),
              "--finetune": ("finetune", "method"), "--lora-rank": ("finetune", "rank"),
              "--offload": ("offload",), "--optimizer": ("optimizer",), "--price-per-hour": ("price_per_hour",),
              "--pue": ("pue",), "--kernels": ("kernels",), "--attention": ("attention",)}
DERIVED_NAME = {("parallel", "tp"): "parallel.tp", ("parallel", "pp"): "parallel.pp",
                ("parallel", "cp"): "parallel.cp", ("parallel", "zero"): "parallel.zero",
                ("finetune", "rank"): "finetune.rank", ("finetune", "method"): "finetune.method"}
NONNEGATIVE = re.compile(r"(time|_s$|_s_|bytes|cost|usd|energy|kwh|co2|tokens|flops|days|hours|mfu|devices|count"
                         r"|params)", re.I)


def option(rng: random.Random, name: str, flag: str) -> list[str]:
    """One option and a value: mostly a valid one, sometimes an edge or junk."""
    junk = rng.random() < 0.12
    if name in CHOICES:
        value = rng.choice(JUNK) if junk else rng.choice(CHOICES[name])
    elif name in INTS:
        value = rng.choice(JUNK) if junk else str(rng.choice(INTS[name]))
    elif name in FLOATS:
        value = rng.choice(JUNK) if junk else repr(rng.choice(FLOATS[name]))
    elif name in STRS:
        value = rng.choice(JUNK) if junk else rng.choice(STRS[name])
    elif name == "model":
        value = rng.choice(MODELS)
    elif name == "hardware":
        value = rng.choice(HARDWARE)
    else:
        return []
    return [flag, str(value)]


def job_options(rng: random.Random, k: int, names: list[str]) -> list[str]:
    """k random options of `names` (the knob table's names), each once."""
    from trainest.knobs import ESTIMATE_OPTIONS
    flags = {o.name: o.flags[0] for o in ESTIMATE_OPTIONS if o.name in names}
    words: list[str] = []
    for name in rng.sample(sorted(flags), min(k, len(flags))):
        words += option(rng, name, flags[name])
    if rng.random() < 0.3:
        words.append(rng.choice(FLAGS))
    return words


JOB_NAMES = [n for n in [*CHOICES, *INTS, *FLOATS, *STRS, "model", "hardware"]
             if n not in ("max_days", "max_cost")]


def estimate_case(rng: random.Random) -> list[str]:
    words = ["estimate", *job_options(rng, rng.randint(0, 7), JOB_NAMES + ["max_days", "max_cost"])]
    return words + (["--json"] if rng.random() < 0.75 else [])


def sweep_case(rng: random.Random) -> list[str]:
    knob = rng.choice([("--seq-len", "2048,4096"), ("--devices", "8,16"), ("--precision", "bf16,fp8"),
                       ("--global-batch", "64..256"), ("--micro-batch", "1,2,banana"), ("--zero", "0..3"),
                       ("--tp", "1,2,4"), ("--devices", "8..64:8"), ("--moe-dispatcher", "alltoall,deepep,hybridep"),
                       ("--cuda-graphs", "none,partial,full"), ("--moe-overlap", "none,deepep")])
    names = [n for n in JOB_NAMES if f"--{n.replace('_', '-')}" != knob[0]]
    return ["sweep", *job_options(rng, rng.randint(0, 3), names), *knob, "--json"]


def plan_case(rng: random.Random) -> list[str]:
    names = ["model", "hardware", "seq_len", "global_batch", "precision", "finetune", "tokens", "framework"]
    devices = rng.choice(["8", "16", "64", "8..32", "0", "abc"])
    allow = (["--allow", rng.choice(["moe_dispatcher=alltoall,deepep", "cuda_graphs=none,full", "moe_overlap=none,deepep",
                                     "moe_dispatcher=banana", "cuda_graphs=", "fp8_params=on,off",
                                     "fused_grouped_mlp=on,off"])] if rng.random() < 0.25 else [])
    return ["plan", *job_options(rng, rng.randint(0, 3), names), "--devices", devices, "--top", "3", *allow, "--json"]


def compare_case(rng: random.Random) -> list[str]:
    names = ["model", "seq_len", "global_batch", "precision", "finetune", "tokens"]
    hw = ",".join(rng.sample(["h100-sxm", "b200", "mi300x", "tpu-v5p", "gh200", "h100-pcie", "nosuch"], 2))
    extra = rng.choice([[], ["--price-per-hour", "2.5"], ["--price-per-hour", "h100-sxm=2,b200=x"],
                        ["--budget", "1e6"], ["--deadline", "30d"]])
    return ["compare", *job_options(rng, rng.randint(0, 3), names), "--hardware", hw, "--devices", "16",
            *extra, "--json"]


def mutate(rng: random.Random, value: Any) -> Any:
    """A value made wrong (or harmlessly different)."""
    return rng.choice([None, -1, 0, 1, 2, 1e400, "nan", ".inf", "banana", [], {}, True, "0x40", "1:04", 3.5,
                       value if not isinstance(value, (int, float)) or isinstance(value, bool) else 2 * value])


def echo_file(rng: random.Random, folder: Path, base: dict) -> str:
    """An estimate's `inputs` echo with a few keys mutated, dropped or added."""
    data = json.loads(json.dumps(base))
    for _ in range(rng.randint(0, 3)):
        key = rng.choice(sorted(data))
        roll = rng.random()
        if roll < 0.2:
            data.pop(key)
        elif isinstance(data[key], dict) and data[key]:
            inner = rng.choice(sorted(data[key]))
            data[key][inner] = mutate(rng, data[key][inner])
        else:
            data[key] = mutate(rng, data[key])
    if rng.random() < 0.15:
        data[rng.choice(["nosuch", "devices ", "Devices"])] = 8
    path = folder / f"s{rng.randrange(10**9)}.yaml"
    text = json.dumps(data) if rng.random() < 0.5 else _yaml(data)
    if rng.random() < 0.1:
        text += "\ndevices: 64\n" if not text.lstrip().startswith("{") else ""
    path.write_text(text)
    return str(path)


def _yaml(data: dict) -> str:
    import yaml
    return yaml.safe_dump(data, sort_keys=False)


# keys a run's `conflicting` may name (one is no scenario key): a fifth of the runs files get one
CONFLICTING_KEYS = ("parallel.tp", "parallel.pp", "parallel.zero", "micro_batch", "recompute", "seq_len", "layers")


def runs_file(rng: random.Random, folder: Path, runs: list[dict]) -> str:
    picked = [json.loads(json.dumps(r)) for r in rng.sample(runs, min(len(runs), rng.randint(1, 3)))]
    for run in picked:
        for _ in range(rng.randint(0, 2)):
            key = rng.choice(sorted(run))
            run[key] = mutate(rng, run[key])
        if rng.random() < 0.2:
            key = rng.choice(CONFLICTING_KEYS)
            par = run.get("parallel") if isinstance(run.get("parallel"), dict) else {}
            stated = par.get(key.removeprefix("parallel.")) if key.startswith("parallel.") else run.get(key)
            run["conflicting"] = rng.choice([{key: mutate(rng, stated)}, {key: stated}, mutate(rng, None)])
    path = folder / f"r{rng.randrange(10**9)}.yaml"
    path.write_text(_yaml({"runs": picked}))
    return str(path)


def run(argv: list[str]) -> tuple[int, str, str, str | None]:
    """(exit code, stdout, stderr, traceback text or None) of `trainest ARGV`, in process."""
    from trainest.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    code, tb = 0, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:                    # noqa: BLE001 (the finding)
            code, tb = -1, traceback.format_exc()
    return code, out.getvalue(), err.getvalue(), tb


def _echo_value(doc: dict, where: tuple[str, ...]) -> Any:
    value: Any = doc.get("inputs", {})
    for part in where:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _given(argv: list[str]) -> dict[str, str]:
    """The last value of each option in GIVEN_ECHO on a command line."""
    found = {}
    for i, word in enumerate(argv[:-1]):
        if word in GIVEN_ECHO:
            found[word] = argv[i + 1]
    return found


def _same_value(echoed: Any, given: str, flag: str) -> bool:
    from trainest.units import parse_count, parse_length
    if echoed is None:
        return False
    if isinstance(echoed, str):
        return echoed == given
    try:
        parse = parse_length if flag == "--seq-len" else parse_count
        want = float(parse(given)) if not re.fullmatch(r"[\d.eE+-]+", given) else float(given)
    except Exception:                          # noqa: BLE001 (a value the tool accepted but this cannot read)
        return True
    return math.isclose(float(echoed), want, rel_tol=1e-9)


def check(argv: list[str], code: int, out: str, err: str, tb: str | None) -> list[tuple[str, str]]:
    """The findings of one case: (kind, detail)."""
    found: list[tuple[str, str]] = []
    if tb is not None or "Traceback (most recent call last)" in err:
        found.append(("traceback", (tb or err).strip().splitlines()[-1][:300]))
        return found
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    if errors and code == 0:
        found.append(("error_exit0", errors[0][:300]))
    if errors and code != 0 and out.strip():
        found.append(("error_stdout", errors[0][:200]))
    if code != 0 and not out.strip() and not errors and "--help" not in argv:
        found.append(("error_lines", f"exit {code} without an Error: line: {err.strip()[:200]!r}"))
    if len(errors) > 1:
        found.append(("error_lines", " | ".join(errors)[:300]))
    if "--json" in argv and out.strip():
        bad: list[str] = []
        doc = json.loads(out, parse_constant=lambda c: bad.append(c) or 0.0)
        if bad:
            found.append(("nonfinite", f"{bad[0]} in the JSON"))
        for path, value in json_numbers(doc):
            if isinstance(value, float) and not math.isfinite(value):
                found.append(("nonfinite", path))
            elif value < 0 and NONNEGATIVE.search(path.rsplit(".", 1)[-1]) and "delta" not in path \
                    and "error" not in path and "margin" not in path and "slack" not in path \
                    and "headroom" not in path:
                found.append(("negative", f"{path} = {value}"))
        if argv[0] == "estimate" and isinstance(doc, dict) and "inputs" in doc:
            derived = set(doc["inputs"].get("derived", []))
            for flag, given in _given(argv).items():
                where = GIVEN_ECHO[flag]
                name = DERIVED_NAME.get(where, where[0])
                echoed = _echo_value(doc, where)
                if name in derived or not _same_value(echoed, given, flag):
                    if flag == "--devices" and "--fsdp" in argv:
                        continue
                    found.append(("changed", f"{flag} {given} -> inputs {'.'.join(where)} = {echoed!r}"
                                              f"{' (listed as derived)' if name in derived else ''}"))
    elif out and code == 0:
        if re.search(r"(?<![\w.])(nan|inf)(?![\w])", out, re.I):
            found.append(("nonfinite", "nan/inf in the tables"))
    return found


def draw_case(rng: random.Random, folder: Path, echo: dict, runs: list[dict]) -> list[str]:
    roll = rng.random()
    if roll < 0.55:
        return estimate_case(rng)
    if roll < 0.70:
        argv = estimate_case(rng)
        return [argv[0], "--config", echo_file(rng, folder, echo), *argv[1:]] if rng.random() < 0.6 else \
            ["estimate", "--config", echo_file(rng, folder, echo), "--json"]
    if roll < 0.80:
        return sweep_case(rng)
    if roll < 0.86:
        return plan_case(rng)
    if roll < 0.92:
        return compare_case(rng)
    return ["validate", "--runs", runs_file(rng, folder, runs), "--json"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="cases (default 2000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=5, help="examples shown per kind of finding")
    ap.add_argument("--json", dest="json_out", help="write every finding to this file")
    args = ap.parse_args()
    import yaml
    rng = random.Random(args.seed)
    code, out, _, _ = run(["estimate", "--json"])
    echo = json.loads(out)["inputs"]
    runs = [r for name in ("korthikanti2022.yaml", "llm-foundry.yaml", "dgx-spark.yaml")
            for r in yaml.safe_load((REPO / "specs/runs" / name).read_text())["runs"][:15]]
    findings: list[dict] = []
    commands: Counter[str] = Counter()
    exits: Counter[int] = Counter()
    t0 = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.n):
            argv = draw_case(rng, Path(tmp), echo, runs)
            code, out, err, tb = run(argv)
            commands[argv[0]] += 1
            exits[code] += 1
            for kind, detail in check(argv, code, out, err, tb):
                findings.append({"case": i, "kind": kind, "detail": detail, "argv": argv})
    cpu = time.process_time() - t0
    kinds = Counter(f["kind"] for f in findings)
    print(f"{args.n} cases (seed {args.seed}) in {cpu:.0f} s of CPU: {dict(commands)}; exit codes {dict(exits)}")
    print(f"findings: {sum(kinds.values())} {dict(kinds)}")
    for kind in kinds:
        shown = [f for f in findings if f["kind"] == kind][:args.show]
        for f in shown:
            print(f"  {kind}: {f['detail']}\n      trainest {' '.join(repr(a) if ' ' in a or not a else a for a in f['argv'])}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(findings, indent=1))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
