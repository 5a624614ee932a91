"""Reader of ../shared/reference/memory-given.yaml (measured peak GPU memory with the configuration each was measured
under: litgpt's config-hub fine-tunes, torchtune's README tables, the Hugging Face single-GPU guide) into
trainest's runs schema: specs/runs/memory-given.yaml, `set: memory`, each run `measured: {peak_memory_gib,
peak_memory_kind}` and no step metric (memory-only runs: `trainest validate --set memory` reports their memory
error per kind; no step-time gate, fit or band sees them).

Called by tools/import_runs.py (`main`); every rule below is keyed on the record's own fields (its source,
hardware, optimizer, recompute and other_settings texts), never on a record id. Every assumption is written into
the run's notes; a record trainest cannot express is kept with `expressible: false` and its reason.
"""

from __future__ import annotations

import re
from collections import OrderedDict

FILE = "memory-given.yaml"
SLUG = "memory-given"
RUN_SET = "memory"
TITLE = ("Measured peak GPU memory with configurations (../shared/reference/memory-given.yaml): litgpt config_hub "
         "fine-tuning table, torchtune README tables, Hugging Face transformers single-GPU training guide")

# What each source's memory column measured -> trainest's peak_memory_kind (validate.PEAK_MEMORY_KINDS).
KIND_WORDS = (("allocated", "allocated"), ("active", "active"), ("reserved", "reserved"),
              ("device used", "device"), ("unspecified", "unspecified"))

# Hardware texts -> catalog entries. The A10G (24 GB GDDR6, Ampere GA102) has no catalog entry: its memory-only
# runs are predicted on the L4's entry, the catalog's other 24 GB GDDR6 data-centre card (usable 23,034 MiB
# against the A10G's 23,028 MiB in nvidia-smi); only the memory is compared, which depends on the device through
# its capacity (the fits verdict) alone.
HARDWARE = (
    (r"rtx 4090", "rtx-4090", None),
    (r"a100.*not stated", "a100-80gb-sxm", "an A100 whose memory size the source does not state: the 80 GB SXM "
                                           "entry (tools/import_runs.py A100_UNSTATED); only the memory is compared"),
    (r"a10g", "l4", "the catalog has no A10G: predicted on the L4 entry, the other 24 GB GDDR6 card (usable 23,034 "
                    "MiB; the A10G 23,028 MiB); only the memory is compared, which the device sets through its "
                    "capacity alone"),
)
# Llama 3.2 1B/3B tie the input and output embeddings (tie_word_embeddings: true in their HF configs); litgpt
# unties them: its converter copies the embedding into lm_head when the HF checkpoint has none
# (litgpt/scripts/convert_hf_checkpoint.py: `state_dict["lm_head.weight"] = state_dict["transformer.wte.weight"]`)
# and its GPT keeps lm_head as its own Linear (litgpt/model.py), so a litgpt run trains both
TIED = r"llama 3\.2"
# torchtune's CEWithChunkedOutputLoss, litgpt's chunked_cross_entropy (lm_head_chunk_size 128 in its fine-tuning
# scripts): the 16-bit logits kept, the FP32 upcast per chunk
LITGPT_LOSS_NOTE = ("litgpt's fine-tuning scripts compute the logits in chunks (lm_head_chunk_size=128) and "
                    "chunked_cross_entropy upcasts one chunk at a time: loss chunked")

# The loss each torchtune recipe config the README tables name builds (torchtune 0.3.1, the release of the tables'
# commit: recipes/configs/llama3_1/*.yaml `loss: _component_`): CEWithChunkedOutputLoss but for 405B_qlora's
# torch.nn.CrossEntropyLoss
TORCHTUNE_CONFIG_LOSS = {"llama3_1/8b_full_single_device": "chunked", "llama3_1/8b_lora_single_device": "chunked",
                         "llama3_1/8b_qlora_single_device": "chunked", "llama3_1/70b_full": "chunked",
                         "llama3_1/70b_lora": "chunked", "llama3_1/405b_qlora": "standard"}


def config_loss(other: str) -> str | None:
    """The loss of the torchtune recipe config a record names ('recipe config llama3_1/70B_lora ...'), or None."""
    found = re.search(r"recipe config (\S+)", other)
    return None if found is None else TORCHTUNE_CONFIG_LOSS.get(found.group(1).rstrip(";"))


def hardware_of(text: str) -> tuple[str | None, str | None]:
    low = text.lower()
    for pattern, name, note in HARDWARE:
        if re.search(pattern, low):
            return name, note
    return None, None


def kind_of(text: str) -> str:
    low = text.lower()
    return next(kind for word, kind in KIND_WORDS if low.startswith(word))


def is_litgpt(rec: dict) -> bool:
    return "litgpt" in rec["source"].lower()


def model_of(m: dict, notes: list[str], litgpt: bool = False) -> OrderedDict:
    out = OrderedDict((k, m[k]) for k in ("name", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab",
                                          "mlp"))
    out["tied_embeddings"] = bool(re.search(TIED, m["name"].lower())) and not litgpt
    if litgpt and re.search(TIED, m["name"].lower()):
        notes.append("tied_embeddings false: litgpt's converter copies the tied embedding into its own lm_head")
    out["dropout"] = False
    out["positional"] = "rope"
    notes.append(f"tied_embeddings {str(out['tied_embeddings']).lower()} from the model's HF config; dropout "
                 f"false and rope positions (fine-tuning recipes of these decoder models)")
    return out


def finetune_of(ft: dict | None, notes: list[str]) -> OrderedDict | None:
    if not ft:
        return None
    method = ft["method"].lower()
    # litgpt's texts list what is off in parentheses ("query, value (lora_key/projection/mlp/head false)")
    targets_text = re.sub(r"\([^)]*\bfalse\)", "", str(ft.get("targets") or "").lower())
    mlp = "mlp" in targets_text
    targets = "all" if mlp else "attention"
    out = OrderedDict(method=method, rank=int(ft["rank"]), targets=targets, base_bits=4 if method == "qlora" else 16)
    notes.append(f"{method} rank {ft['rank']} on '{ft.get('targets')}': trainest's `{targets}` targets "
                 f"({'q, k, v, o and the MLP' if mlp else 'q, k, v and o'}; adapters are under 1 % of the memory)")
    return out


def double_quant_of(ft: dict) -> bool | None:
    """Whether a QLoRA's NF4 absmax is quantised again (litgpt's `--quantize bnb.nf4-dq`) or kept in FP32
    (`bnb.nf4`), where its base_format says; None where it does not."""
    m = re.search(r"quantize:\s*bnb\.nf4(-dq)?\b", str(ft.get("base_format") or "").lower())
    return None if m is None else m.group(1) is not None


def precision_of(text: str) -> tuple[str | None, dict, str | None]:
    """(precision, the dtype keys, why not expressible) of a precision text."""
    low = text.lower()
    if "bf16" in low and ("true" in low or "full bf16" in low):
        # pure BF16: BF16 weights, gradients and AdamW state (torch.optim keeps its state in the parameter's dtype)
        return "bf16", OrderedDict(master_weights="none"), None
    if low.startswith("fp16 mixed"):
        return "fp16", OrderedDict(), None
    if low.startswith("fp32"):
        return "fp32", OrderedDict(), None
    return None, {}, f"precision {text!r} not read"


def optimizer_of(text: str, notes: list[str]) -> OrderedDict:
    low = text.lower()
    out = OrderedDict(optimizer="adamw-8bit" if "8bit" in low or "8-bit" in low else "adamw")
    # "AdamW (not fused into backward)" says it is not: the negation is read before the phrase
    if "not fused" not in low and ("optimizer_in_bwd" in low or "fused into backward" in low):
        out["optimizer_in_backward"] = True
    if "paged" in low:
        notes.append("bitsandbytes' paged 8-bit AdamW: its state counted on the device (paging moves it to the host "
                     "only under memory pressure)")
    return out


def recompute_of(text: str, notes: list[str]) -> str | None:
    """The record's recompute; None where the source does not state it (left out of the run, so that trainest
    takes the framework's default and names `recompute` among the settings the record did not give)."""
    low = text.lower()
    if low.startswith(("full", "gradient checkpointing")):
        return "full"
    if low.startswith("none stated"):
        notes.append("recompute not stated by the source: left out (the framework's default, none, is taken and "
                     "named as unstated)")
        return None
    return "none"


def offload_of(text: str | None) -> str:
    low = (text or "").lower()
    if "activation offloading" in low:
        return "activations"
    if "fsdp cpu offload" in low:
        return "optimizer+weights"
    return "none"


def compiled_of(rec: dict) -> bool:
    """Whether the record says torch.compile was on ('torch.compile=True', or a bare 'torch.compile' item)."""
    other = str(rec.get("other_settings") or "").lower()
    return "torch.compile=true" in other or bool(re.search(r"torch\.compile\s*(;|$)", other))


def loss_of(rec: dict, notes: list[str]) -> str:
    other = str(rec.get("other_settings") or "").lower()
    if "chunked" in other:
        return "chunked"
    if is_litgpt(rec):
        notes.append(LITGPT_LOSS_NOTE)
        return "chunked"
    if config_loss(other) == "chunked":
        notes.append("loss chunked: the recipe config builds torchtune's CEWithChunkedOutputLoss (torchtune 0.3.1 "
                     "configs)" + (", its per-chunk cross-entropy compiled (training.compile_loss)"
                                   if compiled_of(rec) else ""))
        return "chunked"
    if "torchtune" in rec["source"].lower() and compiled_of(rec):
        notes.append("loss standard: torchtune's TransformerDecoder upcasts the whole logits to FP32 itself "
                     "(`self.output(h).float()`, torchtune 0.3.1 modules/transformer.py) outside the compiled "
                     "cross-entropy, which keeps the FP32 logits and writes their FP32 gradient: 4 + 4 B per logit, "
                     "not 'compiled' (16-bit logits upcast inside the kernel)")
        return "standard"
    if compiled_of(rec):
        if "cross-entropy" not in other:
            notes.append("loss compiled assumed: the source does not state the cross-entropy, and torch.compile "
                         "compiles the loss with the model")
        return "compiled"
    return "standard"


def parallel_of(rec: dict, notes: list[str]) -> OrderedDict:
    devices = int(rec["devices"])
    fsdp = bool(rec["parallel"].get("fsdp"))
    if fsdp:
        notes.append(f"FSDP over the {devices} devices: zero 3")
    return OrderedDict(tp=1, pp=1, dp=devices, cp=1, vpp=1, zero=3 if fsdp else 0, sequence_parallel=False)


def not_expressible(rec: dict) -> str | None:
    """Why trainest cannot express a record (None: it can): an encoder with a sequence-classification head (no
    per-token vocabulary logits, bidirectional attention), or a device the catalog does not have."""
    name = rec["model"]["name"].lower()
    if "classification" in name or "encoder" in name:
        return ("an encoder with a sequence-classification head: no per-token vocabulary logits and no causal LM "
                "loss, which trainest's decoder model counts")
    if "paged" in str(rec["optimizer"]).lower():
        return ("bitsandbytes' paged optimizer: its state lives in CUDA unified memory, outside PyTorch's allocator "
                "(not in a torch peak) and is paged to the host under memory pressure; trainest has no input for it")
    if hardware_of(rec["hardware"])[0] is None:
        return f"hardware {rec['hardware']!r}: no catalog entry"
    return None


def convert(rec: dict) -> OrderedDict:
    notes: list[str] = []
    precision, dtype_keys, why_precision = precision_of(rec["precision"])
    hardware, hw_note = hardware_of(rec["hardware"])
    if hw_note:
        notes.append(hw_note)
    out = OrderedDict(id=rec["id"], source=f"{rec['source']} ({rec['source_url']})")
    out["model"] = model_of(rec["model"], notes, is_litgpt(rec))
    out["seq_len"] = int(rec["seq_len"])
    out["hardware"] = hardware
    out["devices"] = int(rec["devices"])
    if out["devices"] > 1:
        out["devices_per_node"] = out["devices"]
        notes.append(f"devices_per_node {out['devices']}: the {out['devices']} GPUs of one machine (a single "
                     f"multi-GPU server or studio)")
    out["precision"] = precision
    out.update(dtype_keys)
    out["parallel"] = parallel_of(rec, notes)
    out["micro_batch"] = int(rec["micro_batch"])
    out["global_batch"] = int(rec["global_batch"])
    per_step = out["devices"] * out["micro_batch"]
    if out["global_batch"] % per_step:
        notes.append(f"global_batch {out['global_batch']} is not a multiple of devices x micro_batch = {per_step}: "
                     f"taken as {per_step} (one micro-batch per device; the memory does not depend on it)")
        out["global_batch"] = per_step
    recompute = recompute_of(str(rec["recompute"]), notes)
    if recompute is not None:
        out["recompute"] = recompute
    compiled = compiled_of(rec)
    out["attention"] = "flash2"
    out["framework"] = "litgpt" if is_litgpt(rec) else "hf-accelerate"
    out["kernels"] = "fused" if compiled else "eager"
    notes.append(("framework litgpt (its own loop and QLoRA stack: frameworks.py)" if is_litgpt(rec) else
                  "framework hf-accelerate: trainest's plain-PyTorch framework (torchtune runs PyTorch modules)")
                 + " with SDPA's FlashAttention-2 backend; kernels "
                 + ("fused (torch.compile)" if compiled else "eager (no torch.compile)"))
    out["loss"] = loss_of(rec, notes)
    out.update(optimizer_of(str(rec["optimizer"]), notes))
    out["offload"] = offload_of(rec.get("offload"))
    ft = finetune_of(rec.get("finetune"), notes)
    if ft is not None:
        out["finetune"] = ft
        dq = double_quant_of(rec["finetune"])
        if dq is not None:
            out["double_quant"] = dq
    if "512 is a cap" in str(rec.get("notes") or ""):
        notes.append("seq_len 512 is litgpt's cap: each batch is padded to its longest sample, so the activations "
                     "of a shorter batch are over-counted")
    gib = rec.get("measured_peak_memory_gib")
    kind = kind_of(str(rec["memory_kind"]))
    measured = OrderedDict()
    if gib is not None:
        measured["peak_memory_gib"] = float(gib)
        measured["peak_memory_kind"] = kind
    ran = str(rec.get("outcome")).lower() == "ran"
    reason = not_expressible(rec) or why_precision
    if not ran:
        reason = reason or f"outcome {rec['outcome']}: a boundary point with no measured memory"   # OOM_REASON_PREFIX
    out["measured"] = measured
    out["expressible"] = reason is None
    out["reason"] = reason
    out["confidence"] = rec.get("confidence") or "medium"
    source_notes = str(rec.get("notes") or "").strip()
    derived = "; ".join(str(x) for x in rec.get("derived_fields") or [])
    out["notes"] = (f"Source notes: {source_notes} Measured: {rec['measured_peak_memory_as_stated']} "
                    f"({rec['memory_kind']}). Transcriber-derived fields: {derived}. Import assumptions: "
                    + " ".join(f"({i}) {n}." for i, n in enumerate(notes, 1)))
    assumed = derived_settings(rec.get("derived_fields") or [], out)
    if assumed:
        out["assumed"] = assumed
    return out


# a transcriber-derived field (the record's `derived_fields`: copied from a second file, such as a recipe config
# at another commit, or assumed, not stated by the memory source) that names a memory setting -> its scenario key:
# the run's `assumed`, which validate names where the measured peak contradicts the run's settings or a run that
# ran is called "does not fit" (validate_memory.py)
DERIVED_SETTINGS = ((r"\boptimizer\b", "optimizer"), (r"\bmicro(/global)?[ _]batch\b", "micro_batch"),
                    (r"^recompute\b", "recompute"))


def derived_settings(fields: list, run: dict) -> list[str]:
    """The scenario keys of the memory settings the record's derived fields name (DERIVED_SETTINGS), of those
    the run sets, in that order."""
    text = [str(f).lower() for f in fields]
    return [key for pattern, key in DERIVED_SETTINGS
            if key in run and any(re.search(pattern, t) for t in text)]


# settings the records state that trainest's scenario has no key for yet: written into the notes, not the run
PENDING_KEYS: tuple[str, ...] = ()


def without_pending(run: OrderedDict) -> OrderedDict:
    """`run` with its PENDING_KEYS moved into its notes ('not yet expressible')."""
    pending = [f"{k}: {run[k]}" for k in PENDING_KEYS if k in run]
    out = OrderedDict((k, v) for k, v in run.items() if k not in PENDING_KEYS)
    if pending:
        out["notes"] += (f" Stated, not yet expressible (trainest has no such input; predicted without it): "
                         f"{', '.join(pending)}.")
    return out


def convert_all(records: list[dict]) -> list[OrderedDict]:
    return [without_pending(convert(r)) for r in records]
