"""The optimizer step (docs/model.md §6): memory-bound Adam over the local parameters."""

from __future__ import annotations

from trainest import xp
from trainest.layout import Layout, Num

OPTIMIZER_BYTES_PER_PARAM = 34.0   # Adam: r/w FP32 master, m, v (24) + read grad (4) + norm (4) + write weights (2)


def optimizer_s(layout: Layout, params_local: Num, memory_bytes_per_s: Num, expert_local: Num = 0.0) -> Num:
    """Adam over the parameters this device updates (ZeRO ≥ 1: a 1/(d_shard·c) shard, and of the
    routed experts `expert_local` a 1/expert-shard share), 34 bytes each at the achievable memory
    bandwidth [s]."""
    opt_params = params_local / xp.where(layout.zero >= 1, layout.shard * layout.cp, 1.0)
    opt_params = opt_params + expert_local / xp.where(layout.zero >= 1, layout.expert_shard, 1.0)
    return opt_params * OPTIMIZER_BYTES_PER_PARAM / memory_bytes_per_s
