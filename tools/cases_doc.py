#!/usr/bin/env python3
"""Write docs/cases.md: the four cases of issue 14, each a set of `trainest estimate` commands and what
they print, run through the CLI (`--json`, `--ops` where the roofline matters).

    python tools/cases_doc.py          # rewrite docs/cases.md
    python tools/cases_doc.py --check  # exit 1 when docs/cases.md is not what the commands print

tests/test_cases.py keeps the document current and checks the claims its text makes.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "cases.md"
GIB = 2**30


def run(args: list[str]) -> dict[str, Any]:
    """`trainest estimate ARGS --json` in process: its JSON document."""
    from trainest.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(["estimate", *args, "--json"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise RuntimeError(f"trainest estimate {' '.join(args)} exited {exc.code}") from None
    return json.loads(out.getvalue())


def command(args: list[str]) -> str:
    return "trainest estimate " + " ".join(args)


def op(doc: dict, name: str, phase: str = "forward") -> dict:
    return next(o for o in doc["ops"] if o["name"] == name and o["phase"] == phase)


def memory_bound_share(doc: dict) -> float:
    """Share of the step spent in memory-bound operations (device memory)."""
    return sum(o["share"] for o in doc["ops"] if o["bound"] == "memory")


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def fits(doc: dict) -> str:
    m = doc["memory"]
    text = f"{m['per_device_bytes'] / GIB:.0f} of {m['capacity_bytes'] / GIB:.0f} GiB"
    if m["host_bytes"]:
        text += f"; host {m['host_bytes'] / GIB:.0f} of {(m['host_capacity_bytes'] or 0) / GIB:.0f} GiB"
    return ("fits: " if m["fits"] else "**does not fit**: ") + text


# ----------------------------------------------------------------------------------------- case 1

CASE1 = [(hw, s, b) for hw in ("dgx-spark", "h100-sxm", "b200") for s, b in ((256, 1), (256, 16), (2048, 1), (2048, 4))]


def case1_args(hw: str, s: int, b: int) -> list[str]:
    return ["--model", "llama3.2-3b", "--hardware", hw, "--devices", "1", "--seq-len", str(s), "--micro-batch", str(b),
            "--global-batch", "64", "--recompute", "full", "--ops"]


def case1() -> tuple[list[str], dict]:
    rows, docs = [], {}
    for hw, s, b in CASE1:
        doc = run(case1_args(hw, s, b))
        docs[(hw, s, b)] = doc
        g = op(doc, "mlp_up")
        rows.append([hw, doc["roofline"]["memory_kind"], str(s), str(b), f"{s * b:,}", f"{doc['step']['time_s']:.3g} s",
                     doc["step"]["bottleneck"], f"{memory_bound_share(doc):.0%}", f"{doc['throughput']['mfu']:.0%}",
                     f"{g['intensity']:.0f} / {g['ridge']:.0f}", g["bound"]])
    head = ["hardware", "memory", "seq", "b", "tokens per GEMM (T)", "step", "bottleneck", "memory-bound share", "MFU",
            "MLP-up GEMM FLOP/B / its ridge", "MLP-up is"]
    return table(head, rows), docs


# ----------------------------------------------------------------------------------------- case 2

CASE2 = [(hw, off) for hw in ("gh200", "h100-pcie") for off in ("none", "optimizer", "optimizer+weights")]


def case2_args(hw: str, off: str) -> list[str]:
    return ["--model", "llama3-8b", "--hardware", hw, "--devices", "1", "--seq-len", "4096", "--global-batch", "16",
            "--recompute", "full", "--offload", off, "--ops"]


def case2() -> tuple[list[str], dict]:
    rows, docs = [], {}
    for hw, off in CASE2:
        doc = run(case2_args(hw, off))
        docs[(hw, off)] = doc
        st = doc["step"]
        parts = [o for o in doc["ops"] if o["part"] == "offload" and o["exposed_s"] > 0]
        bound = max(parts, key=lambda o: o["exposed_s"])["name"].replace("offload.", "") if parts else "-"
        shown = f"{st['offload_s']:.2f} s ({st['shares']['offload']:.0%})"
        rows.append([hw, off, fits(doc), f"{st['time_s']:.2f} s", shown, bound,
                     f"{doc['throughput']['tokens_per_s']:,.0f}"])
    head = ["hardware", "offload", "memory", "step", "offload (share)", "largest offload part", "tokens/s"]
    return table(head, rows), docs


# ----------------------------------------------------------------------------------------- case 3

CASE3 = [(hw, p) for hw in ("b200", "gb200", "dgx-spark") for p in ("bf16", "fp8", "fp4")]


def case3_args(hw: str, precision: str) -> list[str]:
    if hw == "dgx-spark":
        return ["--model", "llama3.2-3b", "--hardware", hw, "--devices", "1", "--seq-len", "2048", "--micro-batch",
                "4", "--global-batch", "64", "--recompute", "full", "--precision", precision, "--ops"]
    return ["--model", "llama3-8b", "--hardware", hw, "--devices", "8", "--seq-len", "4096", "--global-batch", "64",
            "--zero", "1", "--precision", precision, "--ops"]


def case3() -> tuple[list[str], dict]:
    rows, docs = [], {}
    for hw, p in CASE3:
        doc = run(case3_args(hw, p))
        docs[(hw, p)] = doc
        bf16 = docs[(hw, "bf16")]["step"]["time_s"]
        gemm = sum(o["share"] for o in doc["ops"] if o["bound"] == "compute" and "attention" not in o["name"])
        attn = sum(o["share"] for o in doc["ops"] if o["name"].startswith("attention"))
        rows.append([hw, p, f"{doc['step']['time_s']:.3g} s", f"{bf16 / doc['step']['time_s']:.2f}×",
                     f"{gemm:.0%}", f"{attn:.0%}", f"{memory_bound_share(doc):.0%}", f"{doc['throughput']['mfu']:.0%}"])
    head = ["hardware", "GEMMs in", "step", "speed-up vs bf16", "compute-bound GEMMs", "attention (16-bit)",
            "memory-bound ops", "MFU (of that precision's peak)"]
    return table(head, rows), docs


# ----------------------------------------------------------------------------------------- case 4

CASE4 = [(m, ft, hw, n) for m in ("llama3-8b", "llama3-70b") for hw, n in (("dgx-spark", 1), ("h100-sxm", 1),
                                                                            ("h100-sxm", 8))
         for ft in ("full", "lora", "qlora")]


def case4_args(model: str, ft: str, hw: str, n: int) -> list[str]:
    return ["--model", model, "--hardware", hw, "--devices", str(n), "--seq-len", "2048", "--global-batch", "8",
            "--recompute", "full", "--finetune", ft] + (["--zero", "3"] if n > 1 else [])


def case4() -> tuple[list[str], dict]:
    rows, docs = [], {}
    for model, ft, hw, n in CASE4:
        doc = run(case4_args(model, ft, hw, n))
        docs[(model, ft, hw, n)] = doc
        rows.append([model, ft, f"{n} × {hw}", fits(doc), f"{doc['step']['time_s']:.3g} s",
                     f"{doc['throughput']['tokens_per_s']:,.0f}", f"{doc['throughput']['mfu']:.0%}",
                     f"{doc['training']['time_days'] * 86400 * 1e8 / doc['training']['tokens'] / 3600:.2f} h"])
    head = ["model", "method", "devices", "memory per device", "step", "tokens/s", "MFU (fine-tuning)",
            "100 M tokens take"]
    return table(head, rows), docs


# ----------------------------------------------------------------------------------------- the document

INTRO = """# Four cases: unified memory, offload, FP4 and fine-tuning

_Generated by `python tools/cases_doc.py` from the commands shown (run with `--json`); do not edit by
hand. `tests/test_cases.py` keeps it current and checks what the text says. Every number is trainest's
estimate with the shipped hardware data; the DGX Spark, GB200 and the host-side facts are unfitted
priors (docs/validation.md), so read them as physics, not as measurements._
"""


# ----------------------------------------------------------------------------------------- case 5

CASE5_ARGS = ["--model", "llama3.2-3b", "--hardware", "gh200", "--devices", "1", "--seq-len", "4096",
              "--global-batch", "16", "--recompute", "full"]
CASE5_WHAT_IF = [("as profiled", []), ("CPU offload of the optimizer over NVLink-C2C", ["--offload", "optimizer"]),
                 ("optimizer and weights in host memory (unified memory over C2C)", ["--offload", "optimizer+weights"]),
                 ("mixed precision FP8", ["--precision", "fp8"]),
                 ("Llama 3 8B, optimizer offload", ["--model", "llama3-8b", "--offload", "optimizer"])]


def calibrate_json(args: list[str]) -> dict[str, Any]:
    """`trainest calibrate ARGS --json` in process: its JSON document."""
    from trainest.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(["calibrate", *args, "--json"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise RuntimeError(f"trainest calibrate {' '.join(args)} exited {exc.code}") from None
    return json.loads(out.getvalue())


def case5() -> tuple[list[str], list[str], list[str], dict]:
    """(the class table, the fitted parameters, the what-if table, the documents) of the GH200 case: the step's
    timeline as its profile, read back by calibrate --trace, then what-ifs on the written profile."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        trace, profile = str(Path(d) / "gh200-step.json"), str(Path(d) / "gh200-mine.yaml")
        run([*CASE5_ARGS, "--timeline", trace])
        cal = calibrate_json(["--trace", trace, *CASE5_ARGS, "-o", profile])
        rows = [[c["class"], f"{c['measured_s'] * 1e3:,.1f} ms", f"{c['predicted_s'] * 1e3:,.1f} ms", c["bound"]]
                for c in cal["classes"]]
        params = [[p["name"], f"{p['start']:.4g}", f"{p['value']:.4g}",
                   "determined" if p["constrained"] else "not constrained: kept"] for p in cal["parameters"]]
        what, docs = [], {"calibrate": cal}
        for label, extra in CASE5_WHAT_IF:
            args = [profile if a == "gh200" else a for a in CASE5_ARGS] + extra
            doc = run(args)
            docs[label] = doc
            st = doc["step"]
            what.append([label, fits(doc), f"{st['time_s']:.2f} s", st["bottleneck"],
                         f"{st['offload_s']:.2f} s", f"{doc['throughput']['tokens_per_s']:,.0f}"])
    return (table(["class", "measured", "predicted", "bound"], rows),
            table(["efficiency", "start", "fitted", "what the trace says"], params),
            table(["what if", "memory", "step", "bottleneck", "offload", "tokens/s"], what), docs)


def document() -> str:
    t1, _ = case1()
    t2, _ = case2()
    t3, _ = case3()
    t4, _ = case4()
    c5, p5, w5, _ = case5()
    lines = [INTRO, "## 1. DGX Spark: which training steps are memory-bound, and what makes them compute-bound", "",
             "Llama 3.2 3B, a full fine-tune, one device, full recompute, 64 sequences per step:", "", "```",
             command(case1_args("dgx-spark", 256, 1)),
             "# and the same on h100-sxm and b200, with --seq-len 256|2048 and --micro-batch 1|16|4", "```", "",
             *t1, "",
             CASE1_TEXT, "", "## 2. GH200: offload over NVLink-C2C, and the same on an H100 PCIe card", "",
             "Llama 3 8B, a full fine-tune (18 B per parameter of weights, gradients and Adam state: 144 GB), "
             "one device, s = 4096, 16 sequences per step, full recompute:", "", "```",
             command(case2_args("gh200", "optimizer")), "# and --offload none | optimizer | optimizer+weights, on "
             "gh200 and h100-pcie", "```", "", *t2, "", CASE2_TEXT, "",
             "## 3. FP4 on Blackwell: where FP4 GEMMs help and where memory traffic caps the gain", "", "```",
             command(case3_args("b200", "fp4")), command(case3_args("dgx-spark", "fp4")),
             "# and --precision bf16 | fp8 | fp4 on b200, gb200, dgx-spark", "```", "", *t3, "", CASE3_TEXT, "",
             "## 4. LoRA and QLoRA of Llama 3 8B and 70B on one DGX Spark, one H100 and 8 H100", "",
             "s = 2048, 8 sequences per step, gradient checkpointing (full recompute), LoRA rank 16 on every "
             "linear layer (the defaults), FSDP (ZeRO-3) on 8 GPUs:", "", "```",
             command(case4_args("llama3-70b", "qlora", "dgx-spark", 1)),
             "# and --model llama3-8b | llama3-70b, --finetune full | lora | qlora, on 1 dgx-spark, 1 h100-sxm, "
             "8 h100-sxm (--zero 3)", "```", "", *t4, "", CASE4_TEXT, "",
             "## 5. GH200: profile a step, read the bound per class, calibrate, then ask what would change", "",
             CASE5_INTRO, "", "```", command([*CASE5_ARGS, "--timeline", "gh200-step.json"]),
             "trainest calibrate --trace gh200-step.json " + " ".join(CASE5_ARGS) + " -o gh200-mine.yaml", "```", "",
             *c5, "", *p5, "", CASE5_CALIBRATE_TEXT, "", "```",
             command([*("gh200-mine.yaml" if a == "gh200" else a for a in CASE5_ARGS), "--offload", "optimizer"]),
             "# and --offload optimizer+weights, --precision fp8, --model llama3-8b --offload optimizer", "```", "",
             *w5, "", CASE5_TEXT, ""]
    return "\n".join(lines)


CASE5_INTRO = """Llama 3.2 3B, a full fine-tune on one GH200, s = 4096, 16 sequences per step, full recompute. No
measured GH200 profile is bundled with trainest, so this case uses the step's own predicted timeline
(`estimate --timeline`, a Chrome trace) as the profile: every number below is reproducible, and with a
PyTorch profiler trace (`.json`, `.json.gz`) or an Nsight Systems SQLite export of your own step you
give that file instead. `calibrate --trace` finds the step, sorts every kernel into a class, sets each
class beside the model's prediction with its bound, fits the efficiencies the classes determine, and
writes a hardware profile."""

CASE5_CALIBRATE_TEXT = """Reading it. The bound column says what each class waits on: the GEMMs and attention on the
tensor cores, the norms, activations, casts and the optimizer on the HBM, the idle time on the host and
the schedule. A profile of your own step differs from the prediction class by class: the fit moves the
efficiency behind each class (gemm for the GEMMs, attention, memory for the memory-bound kernels, the
network's for the collectives, host time per kernel for the idle time) and keeps what no class measures at
its start value; a class more than 2x off is named in a warning and not fitted (the scenario given does
not match what ran). Where the trace says which pass launched each kernel (PyTorch's autograd functions, a
backward annotation or NVTX range, a trainest timeline), a second table sets the compute classes beside the
prediction forward and backward, so that a miss can be placed in its pass. Here the profile is the model's own step, so the fit returns the start values: the
round trip that tests/test_trace.py checks with efficiencies the timeline was made with."""

CASE5_TEXT = """Reading it. The what-ifs start from the calibrated profile (`--hardware gh200-mine.yaml`). Moving the
optimizer (FP32 master weights and Adam's moments, 16 B per parameter) to Grace's LPDDR5X over
NVLink-C2C (450 GB/s per direction) takes 44 GiB off the HBM (the 16-bit copy the GPU then computes
with, 2 B per parameter, comes back) and costs the gradients' copy down and the
weights' copy up plus the CPU's Adam, after the backward. trainest has no separate unified-memory mode
for GH200 (its file says memory.unified false: HBM and LPDDR5X are two memories joined by C2C); CUDA
unified memory that pages the weights and the optimizer over C2C is what `--offload optimizer+weights`
models: each pass fetches its layers' weights over the link, behind the computation where the link keeps
up. FP8 GEMMs have twice the BF16 peak: the compute-bound GEMMs shrink, the casts add memory traffic,
attention stays 16-bit. Llama 3 8B does not fit one GH200 without offload (case 2); with the optimizer
offloaded it does."""

CASE1_TEXT = """Reading it. A GEMM of T tokens by a weight matrix does about T FLOPs per byte of the weight it
reads (2·T·K·N FLOPs over 2·K·N bytes, plus the activations): its arithmetic intensity is ~T FLOP/B
(233 for the MLP's up/gate GEMM at T = 256). The DGX Spark's ridge point is 125 TFLOP/s / 273 GB/s =
458 FLOP/B at the peaks, 270–400 FLOP/B for these GEMM shapes at achievable rates (the ridge column:
small GEMMs reach a smaller fraction of the peak, so their ridge is lower). At s = 256 and one
sequence per micro-batch, T = 256 sits below it: every weight GEMM is memory-bound and 96 % of the
step waits on the LPDDR5X, the optimizer's 34 B per parameter included. More tokens per GEMM make the
same GEMMs compute-bound: 16 sequences of 256 (T = 4096) or 2048-token sequences; what stays
memory-bound is the element-wise work and the optimizer (19–26 %). The H100 and the B200 have about
the same peak ridge (295 and 281 FLOP/B) but a lower achievable one at T = 256 (~200 FLOP/B: their
fitted bandwidth fraction is lower than the Spark's prior), so there the same GEMMs are just
compute-bound; the step is 7× (H100, HBM3) and 16× (B200, HBM3e) shorter than the Spark's."""

CASE2_TEXT = """Reading it. Without offload the model does not fit on the H100 (the Adam state alone is 96 GB)
and only just fits in the 141 GiB a GH200 exposes to a program. Optimizer offload (ZeRO-Offload) keeps
the 16-bit weights and two layers' gradients on the device; every micro-batch's backward sends its gradients down the host link, behind the backward, and
after the last one the CPU runs Adam and the updated weights come back up. On GH200 the link is
NVLink-C2C (450 GB/s per direction) and Grace's 72 cores and 500 GB/s of LPDDR5X run Adam in about
a second: offload costs 12 % of the step. The H100 PCIe card's file gives no host (it depends on the
server), so trainest takes the typical dual-socket PCIe Gen5 server, as a DGX H100's host, and says
so (derived): the link is PCIe Gen5 x16 (64 GB/s) and the GPU's share of the host is 14 cores and
77 GB/s of DDR5: the CPU's Adam step takes several seconds and bounds the offload (a third of the
step). Offloading the weights too leaves two layers on
the device; their fetch for every pass hides behind the computation on GH200, but over PCIe it does
not, and it becomes the largest part. Another server: `--host-cores`, `--host-memory-gb`, `--host-pcie-gen`
and `--host-pcie-lanes` replace the typical one's figures (the JSON's `hardware.host` says which are derived)."""

CASE3_TEXT = """Reading it. FP8 and FP4 GEMMs have 2× and 4× the BF16 peak; they speed up the weight GEMMs when
those are compute-bound, less the efficiency low-precision GEMMs lose (`low_precision_gemm`, fitted
on B200 and GB200). What does not shrink caps the gain (Amdahl): attention and the output layer run in
16 bit, and the norms, activations, the casts to FP8/FP4 (they add traffic) and the optimizer stream
through memory. So FP4 brings 1.5–1.8× per step, not 4×, and each precision step makes the compute-bound GEMMs a
smaller share and the memory-bound ops a larger one (on the DGX Spark at T = 8192 tokens per
micro-batch: 24 % → 51 %). MFU is relative to each precision's own peak, so it falls as the precision
drops."""

CASE4_TEXT = """Reading it. A full fine-tune needs 18 B per parameter before activations: Llama 3 8B fits
neither a DGX Spark (120 GB left to training) nor one H100, 70B fits nowhere here. LoRA freezes the
base: its 16-bit weights stay (16 GB for 8B, 141 GB for 70B), there are no gradients or Adam state for
them, and the backward skips their weight-gradient GEMMs, so 8B trains everywhere and 70B on 8 H100.
QLoRA stores the base in 4-bit NF4 with double quantisation (0.516 B per parameter: 70B is 40 GB with
its 16-bit embeddings), so 70B fits one DGX Spark and one H100; it pays for it with one dequantisation
of every weight per pass (read 0.5 B, write 2 B per parameter), memory-bound traffic that makes a QLoRA
step slower than a LoRA step, and on the Spark's 273 GB/s nearly as slow as a full fine-tune's would
be. The QLoRA rows run under a QLoRA's default framework, the Hugging Face stack (hf-accelerate: PEFT
and bitsandbytes' 4-bit layers, eager kernels, the loss read back every micro-batch), the full and LoRA
rows under Megatron-Core: part of a QLoRA step's extra time is that stack's (`--framework` compares them
under one). With gradient checkpointing the saving of a LoRA is smaller than without (the recomputed forward is
not saved by freezing): 0.75–0.86 of a full fine-tune's step here. MFU counts what a frozen base needs
(forward, data gradients and the adapters: about 2/3 of a full fine-tune's FLOPs), so it is lower than
a full fine-tune's at a similar speed."""


def main(argv: list[str]) -> int:
    text = document()
    if "--check" in argv:
        if OUT.read_text(encoding="utf-8") != text:
            print("docs/cases.md is stale: run python tools/cases_doc.py")
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
