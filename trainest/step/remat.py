"""MaxText's activation checkpointing policies (its config `remat_policy`, docs/model.md §7.11): what each keeps on
the device for the backward, what it moves to host memory, and which trainest recompute mode times its re-run.

Facts (google/maxtext, the decoder's remat policy choice in layers/decoders.py, layers/models.py before it, and
configs/base.yml, whose default is `remat_policy: 'full'`). The decoder layer runs under `jax.checkpoint` with:
  full                 no policy: nothing saved but the layer input (the scanned layers' carry);
  minimal              `checkpoint_dots_with_no_batch_dims`: the outputs of the matmuls without a batch
                       dimension, i.e. the weight projections (query/key/value, out, the MLP's wi_0/wi_1 and wo);
                       the attention core's products (batched over heads) and the element-wise ops are re-run;
  minimal_flash        minimal and the tensor named `context` (the attention output): only element-wise ops re-run;
  minimal_offloaded    `save_and_offload_only_these_names` with nothing saved on the device and the projections'
                       outputs (query/key/value/qkv, out, mlpwi_0/1, mlpwo) offloaded to pinned host memory;
  qkv_proj_offloaded   the same with only query_proj/key_proj/value_proj offloaded: the rest re-run.
What the backward needs of the saved outputs (JAX keeps a saveable value only where the backward reads it): the
Q, K, V projections (the attention's inputs), the out projection's output (the residual sum the second norm
reads is rebuilt from it and the layer input), the MLP's up projections' outputs (the down projection's input
is rebuilt from them); the down projection's output is the next layer's input, kept there.
Here only the bytes and the mode: the time of the re-run is the mode's (step/layer.py, step/flops.py)."""

from __future__ import annotations

from trainest import xp
from trainest.layout import Job, Layout, Num

# policy → (trainest recompute mode, what selective recompute re-runs): minimal re-runs the attention core and the
# element-wise ops (norms), minimal_flash only the element-wise ops; qkv_proj_offloaded re-runs the whole forward
# but its Q, K, V projections (timed as full: the three projections' re-run is counted, docs/model.md §7.11)
REMAT_MODES: dict[str, tuple[str, tuple[str, ...]]] = {
    "full": ("full", ("core_attn",)),
    "minimal": ("selective", ("core_attn", "layernorm")),
    "minimal_flash": ("selective", ("layernorm",)),
    "minimal_offloaded": ("selective", ("core_attn", "layernorm")),
    "qkv_proj_offloaded": ("full", ("core_attn",)),
}


def qkv_bytes(job: Job, layout: Layout) -> Num:
    """The Q, K and V projections' outputs of one layer for one micro-batch: e·T·(a·d_h + 2·max(g, t)·d_h)/t [B]
    (KV heads replicated when g < t)."""
    m = job.model
    kv_width = 2.0 * xp.maximum(m.kv_heads, layout.tp) * m.head_dim
    return job.element_bytes * layout.tokens(job) * (m.heads * m.head_dim + kv_width) / layout.tp


def minimal_saved_bytes(job: Job, layout: Layout) -> Num:
    """What `minimal` saves beyond the layer input: Q, K, V, the out projection's h-wide output and the MLP's up
    projections' outputs: qkv + e·T·(h/sp + (k−1)·f/t) with k = 2 (GeLU) or 3 (SwiGLU) [B]."""
    m, e, tokens = job.model, job.element_bytes, layout.tokens(job)
    return qkv_bytes(job, layout) + e * tokens * (m.hidden / layout.sp_div
                                                  + (m.mlp_matrices - 1.0) * m.ffn_hidden / layout.tp)


def context_bytes(job: Job, layout: Layout) -> Num:
    """The attention output `context` minimal_flash saves too: e·T·a·d_h/t [B]."""
    m = job.model
    return job.element_bytes * layout.tokens(job) * m.heads * m.head_dim / layout.tp


def remat_kept_bytes(job: Job, layout: Layout, full_input: Num) -> Num:
    """What one layer keeps on the device for one micro-batch under the job's MaxText policy [B]: the layer input
    (`full_input`), with minimal its saved outputs, with minimal_flash the context as well; the offloaded
    policies keep only the input on the device (their tensors are in host memory)."""
    policy = job.remat_policy
    if policy == "minimal":
        return full_input + minimal_saved_bytes(job, layout)
    if policy == "minimal_flash":
        return full_input + minimal_saved_bytes(job, layout) + context_bytes(job, layout)
    return full_input


def remat_offload_bytes(job: Job, layout: Layout) -> Num:
    """Bytes one layer copies to host memory in the forward of one micro-batch, and back in its backward, under
    the job's policy: qkv_proj_offloaded its Q, K, V, minimal_offloaded minimal's saved outputs, else 0 [B]."""
    if job.remat_policy == "qkv_proj_offloaded":
        return qkv_bytes(job, layout)
    if job.remat_policy == "minimal_offloaded":
        return minimal_saved_bytes(job, layout)
    return 0.0 * layout.tp
