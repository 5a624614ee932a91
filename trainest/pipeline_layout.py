"""Megatron-Core's pipeline layout string (`--pipeline-model-parallel-layout`, docs/model.md §5.1): which
layers each pipeline stage holds, e.g. DeepSeek-V3's "Et*4|(t*4|)*14tmL" in Megatron-Bridge (pp 16: the
embedding and four layers on the first stage, four on each of the next fourteen, one layer, the
multi-token-prediction module and the loss on the last).

Syntax (Megatron-Core `PipelineParallelLayerLayout`): stages separated by `|`, p·v of them in the order
virtual stage 0 of every rank, then virtual stage 1, ... (stage i runs on pipeline rank i mod p); in a
stage, `E` the embedding, `t` a decoder layer, `m` a multi-token-prediction module, `L` the loss; `x*n`
repeats one token, `(...)*n` a group; commas and spaces are ignored. Standard library only (the
scenario reads it on every estimate).
"""

from __future__ import annotations

import re

from trainest.errors import SpecError, head

TOKENS = {"E": "the embedding", "t": "a decoder layer", "m": "a multi-token-prediction module", "L": "the loss"}
# patterns as text: compiled on first use through re's cache, not at import (start-up time, issue 36)
_GROUP = r"\(([^()]*)\)\*(\d+)"
_ONE = r"(.)\*(\d+)"
MAX_EXPANDED = 100_000          # characters of the unrolled layout (a typo such as t*99999999 is an error)


def expand(text: str, where: str) -> list[str]:
    """The stages of a layout string, each unrolled to its tokens (module docstring)."""
    s = re.sub(r"[\s,]", "", text)
    if not s:
        raise SpecError(f"{head(where)}an empty pipeline layout; write its stages, e.g. 'Et*4|(t*4|)*14tmL'")

    shown = text if len(text) <= 80 else text[:60] + "..."
    too_long = f"{head(where)}{shown!r} unrolls to more than {MAX_EXPANDED:,} tokens"
    grown = 0          # characters the repeats of the current pass add to s

    def repeat(m: re.Match) -> str:
        # the size is checked before the repeat is built (t*999999999999 would exhaust memory), and over
        # every repeat of the pass (12,000 repeats of t*99999 are each short, together 1.2 GB)
        nonlocal grown
        digits = m.group(2).lstrip("0") or "0"
        if len(digits) > len(str(MAX_EXPANDED)):
            raise SpecError(too_long)
        size = len(m.group(1)) * int(digits)
        grown += size - len(m.group(0))
        if size > MAX_EXPANDED or len(s) + grown > MAX_EXPANDED:
            raise SpecError(too_long)
        return m.group(1) * int(digits)
    while re.search(_GROUP, s):
        grown = 0
        s = re.sub(_GROUP, repeat, s)
    grown = 0
    s = re.sub(_ONE, repeat, s)
    bad = sorted(set(s) - set(TOKENS) - {"|"})
    if bad:
        raise SpecError(f"{head(where)}{text!r} has {', '.join(repr(c) for c in bad)}; a layout is stages separated "
                        f"by '|' of " + ", ".join(f"{k} ({v})" for k, v in TOKENS.items())
                        + ", with x*n and (...)*n repeats")
    return s.split("|")


def stage_count(text: str, where: str) -> int:
    """How many stages (p·v) a layout string has: pp when it is not given is this over vpp."""
    return len(expand(text, where))


def rank_layers(text: str, pp: int, vpp: int, layers: int, mtp_depth: int, where: str) -> tuple[int, ...]:
    """Decoder layers on each pipeline rank (rank 0 first) of a layout string, checked against the
    layout (p·v stages) and the model (its L layers, its MTP depth): the embedding opens the first stage,
    the loss closes the last, the MTP modules sit on the last rank (where trainest times them, §15.10)."""
    stages = expand(text, where)
    if len(stages) != pp * vpp:
        raise SpecError(f"{head(where)}{text!r} has {len(stages)} stages; the layout needs pp·vpp = {pp}·{vpp} = "
                        f"{pp * vpp} (one per virtual stage, separated by '|')")
    joined = "".join(stages)
    if joined.count("E") != 1 or not stages[0].startswith("E"):
        raise SpecError(f"{head(where)}{text!r}: the embedding 'E' must open the first stage, once")
    if joined.count("L") != 1 or not stages[-1].endswith("L"):
        raise SpecError(f"{head(where)}{text!r}: the loss 'L' must close the last stage, once")
    if joined.count("t") != layers:
        raise SpecError(f"{head(where)}{text!r} places {joined.count('t')} decoder layers 't'; the model has "
                        f"layers={layers}")
    if joined.count("m") != mtp_depth:
        has = f"multi-token prediction of depth {mtp_depth}" if mtp_depth else "no multi-token prediction"
        raise SpecError(f"{head(where)}{text!r} places {joined.count('m')} MTP modules 'm'; the model has {has}")
    last = {i for i in range(len(stages)) if i % pp == pp - 1}
    if any("m" in st for i, st in enumerate(stages) if i not in last):
        raise SpecError(f"{head(where)}{text!r}: an MTP module 'm' on a stage of a rank other than the last is not "
                        f"modelled (trainest times the modules with the loss, on the last rank)")
    counts = [0] * pp
    for i, st in enumerate(stages):
        counts[i % pp] += st.count("t")
    return tuple(counts)


def layout_string(counts: tuple[int, ...], vpp: int, mtp_depth: int) -> str:
    """The layout string of `counts` decoder layers per rank, each rank's layers spread over its `vpp`
    virtual stages (the first ones one more where they do not divide), the MTP modules and the loss on
    the last stage; runs of equal middle stages written as (x|)*n."""
    pp = len(counts)
    chunks = [[c // vpp + (j < c % vpp) for j in range(vpp)] for c in counts]
    stages = [chunks[i % pp][i // pp] for i in range(pp * vpp)]

    def layers(n: int) -> str:
        return "" if n == 0 else "t" if n == 1 else f"t*{n}"
    body = [layers(n) for n in stages]
    body[0] = "E" + body[0]
    body[-1] = body[-1] + "m" * mtp_depth + "L"
    if len(body) == 1:
        return body[0]
    text, i = body[0] + "|", 1
    while i < len(body) - 1:             # the middle stages, each followed by its '|'
        n = 1
        while i + n < len(body) - 1 and body[i + n] == body[i]:
            n += 1
        text += f"({body[i]}|)*{n}" if n > 1 and body[i] else (body[i] + "|") * n
        i += n
    return text + body[-1]


def rank_layers_text(counts: tuple[int, ...]) -> str:
    """Layers per pipeline rank in few words: runs of equal counts as n×k ("5, 4×14, 2")."""
    runs: list[list[int]] = []
    for c in counts:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    return ", ".join(f"{c}" if n == 1 else f"{c}×{n}" for c, n in runs)
