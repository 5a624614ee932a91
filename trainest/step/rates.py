"""What one device achieves for a job and layout, and the layer's widths on it (docs/model.md §2.2–2.4):
the GEMM peak and its fraction, HBM bandwidth and fused attention's FLOP/s (`Rates`, `rates_of`), and
the tokens, heads and key/value width of one micro-batch on one rank (`LocalShape`, `local_shape`). The
layer's operations (layer.py), MLA (mla.py) and the adapters (finetune.py) all read these.
"""

from __future__ import annotations

from trainest import xp
from trainest.choices import LOW_PRECISIONS
from trainest.layout import Job, Layout, Num
from trainest.precision import module_precisions
from trainest.record import NamedTuple, replace
from trainest.step.roofline import Op, OpTime, dimension_factor, gemm_op, gemm_time, padded_dim, wave_efficiency

ATTENTION_HALF_SEQ = 512.0         # sequence length at which fused attention's length factor is 1/2
ATTENTION_HALF_HEAD_DIM = 32.0     # head dimension at which its head-width factor is 1/2
FORWARD, BACKWARD, RECOMPUTE = "forward", "backward", "recompute"    # the phases an op runs in


class Rates(NamedTuple):
    """What one device achieves for this job and layout: GEMM peak and its fraction, HBM bandwidth,
    fused-attention FLOP/s (it depends on the per-rank sequence s/c)."""

    peak_flops_per_s: float
    gemm_peak_fraction: Num
    gemm_half_dim: Num
    memory_bytes_per_s: Num
    attention_flops_per_s: Num
    gemm_input_bytes: float
    element_bytes: float                # e: bytes of the activations a GEMM writes (Job.element_bytes)
    units: int | None = None            # compute units (SMs/CUs) the GEMM tiles spread over
    tile: tuple[int, int] | None = None   # the output tile of one unit (t_m, t_n)
    # fused attention's FLOP/s in a windowed layer (its tiles loop over the window only: windowed_span);
    # None for a model without a window
    window_attention_flops_per_s: Num | None = None

    def gemm(self, m: Num, n: Num, k: Num, batch: Num = 1.0) -> OpTime:
        """An (m×k)·(k×n) GEMM (one of `batch` alike in one kernel) at these rates, writing
        activations of e bytes; its tiles spread over the device's units (wave_efficiency) where they are known."""
        wave = self.wave(m, n, k, batch)
        return gemm_time(m, n, k, peak_flops_per_s=self.peak_flops_per_s, peak_fraction=self.gemm_peak_fraction,
                         half_dim=self.gemm_half_dim, input_bytes=self.gemm_input_bytes,
                         output_bytes=self.element_bytes, memory_bytes_per_s=self.memory_bytes_per_s, wave=wave,
                         padded=self.padded(m, n))

    def wave(self, m: Num, n: Num, k: Num, batch: Num = 1.0) -> Num:
        """The share of the device's units the GEMM's tiles keep busy (1 where they are unknown)."""
        if self.units is None or self.tile is None:
            return 1.0
        return wave_efficiency(m, n, k, units=self.units, tile_m=self.tile[0], tile_n=self.tile[1], batch=batch)

    def padded(self, m: Num, n: Num) -> tuple[Num, Num] | None:
        """The output dimensions rounded up to whole tiles (padded_dim); None where the tiles are unknown."""
        if self.units is None or self.tile is None:
            return None
        return padded_dim(m, self.tile[0]), padded_dim(n, self.tile[1])

    def gemm_op(self, name: str, m: Num, n: Num, k: Num, phase: str = FORWARD, batch: Num = 1.0,
                grouped: bool = False) -> Op:
        """The same GEMM as a named op with its FLOPs (2mnk) and bytes (one of `batch` alike in one kernel)."""
        return gemm_op(name, phase, m, n, k, peak_flops_per_s=self.peak_flops_per_s,
                       peak_fraction=self.gemm_peak_fraction, half_dim=self.gemm_half_dim,
                       input_bytes=self.gemm_input_bytes, output_bytes=self.element_bytes,
                       memory_bytes_per_s=self.memory_bytes_per_s, wave=self.wave(m, n, k, batch),
                       padded=self.padded(m, n), grouped=grouped)


def attention_span(job: Job, layout: Layout) -> Num:
    """The query length a fused-attention kernel's tiles see on one rank: the per-rank sequence s/c,
    or the mean document length L of packed sequences when shorter (varlen kernels tile each document
    on its own) [tokens]."""
    per_rank = job.seq_len / layout.cp
    return per_rank if job.packed_length <= 0 else xp.minimum(per_rank, job.packed_length)


def packed_fraction(job: Job) -> float:
    """The share of a full causal mask's score elements that packed sequences compute: each document
    of L tokens attends only within itself, Σ L²/2 over s²/2 = L/s for documents of mean length L
    (1 unpacked)."""
    return 1.0 if job.packed_length <= 0 else min(1.0, job.packed_length / job.seq_len)


def sliding_window_fraction(window: float, seq_len: float) -> float:
    """The share of a causal mask's score elements a sliding window of w keys computes over s tokens:
    query i (0-based) sees min(i + 1, w) keys, Σ = w·s − w(w − 1)/2 of the causal triangle's s(s + 1)/2,

        φ_w = (w·s − w(w − 1)/2) / (s(s + 1)/2) ≈ (2w/s)·(1 − w/(2s))   for w < s;   1 for w ≥ s

    (Beltagy et al. 2020, Longformer §3.1; Jiang et al. 2023, Mistral 7B §2) [w, s: tokens; φ: 1]."""
    if window >= seq_len:
        return 1.0
    return (window * seq_len - window * (window - 1.0) / 2.0) / (seq_len * (seq_len + 1.0) / 2.0)


def chunked_fraction(chunk: float, seq_len: float) -> float:
    """The share of a causal mask's score elements chunked attention computes over s tokens: the
    sequence is cut into n = ⌊s/c⌋ chunks of c tokens and a last one of r = s − n·c, each query attends
    causally within its own chunk (block diagonal, Meta 2025, Llama 4 `attention_chunk_size`):

        φ_c = (n·c(c + 1)/2 + r(r + 1)/2) / (s(s + 1)/2) ≈ c/s   for c < s;   1 for c ≥ s

    (the same as packed documents of length c, `packed_fraction`) [c, s: tokens; φ: 1]."""
    if chunk >= seq_len:
        return 1.0
    n = float(int(seq_len // chunk))
    rest = seq_len - n * chunk
    return (n * chunk * (chunk + 1.0) / 2.0 + rest * (rest + 1.0) / 2.0) / (seq_len * (seq_len + 1.0) / 2.0)


def window_fraction(kind: str, size: float, seq_len: float) -> float:
    """φ of a `kind` window (sliding_window_fraction, chunked_fraction) of `size` tokens over s tokens [1]."""
    return sliding_window_fraction(size, seq_len) if kind == "sliding" else chunked_fraction(size, seq_len)


def windowed_layer_fraction(job: Job) -> float:
    """The share of a full causal mask's score elements that one windowed layer computes, packing
    included: documents of mean length L attend within themselves (packed_fraction, L/s) and the window
    restarts in each document, so the window's share is taken over the document, φ_w(w, L):

        φ = packed_fraction · φ_w(w, min(L, s))

    A document no longer than the window is unaffected (φ_w = 1); unpacked, L = s. For chunked attention
    chunks sit at fixed positions, not per document, so this is its approximation (≈ min(c, L)/s) [1]."""
    window = job.model.attention_window
    if window is None:
        return packed_fraction(job)
    length = float(job.seq_len if job.packed_length <= 0 else min(job.packed_length, job.seq_len))
    return packed_fraction(job) * window_fraction(window.kind, float(window.size), length)


def windowed_span(job: Job, layout: Layout) -> Num:
    """The key length a fused-attention kernel's tiles loop over in a windowed layer: the layer's span
    (`attention_span`), at most the window or chunk w: a query tile visits only the key tiles of its
    window [tokens] (what sets the length factor of `attention_flops_per_s`)."""
    span = attention_span(job, layout)
    window = job.model.attention_window
    return span if window is None else xp.minimum(span, float(window.size))


# FP8 fused attention's fraction of its (FP8) peak over the 16-bit kernel's fraction of its own: FlashAttention-3 on
# H100 SXM5 reaches up to 740 TFLOP/s in BF16 (75 % of 989) and close to 1.2 PFLOP/s in FP8 (61 % of 1979) (Shah et
# al. 2024, abstract and §4): the FP8 kernel is more bound by the softmax's exponentials, which FP8 does not speed up
FP8_ATTENTION_RELATIVE = (1200.0 / 1979.0) / (740.0 / 989.0)


def attention_peak_flops_per_s(job: Job) -> float:
    """The peak the fused attention's products run at [FLOP/s]: the 16-bit tensor peak, or the run's own when
    lower (FP32/TF32); with `fp8_attention` (an FP8/FP4 recipe's FP8 dot-product attention) the FP8 peak times
    FP8_ATTENTION_RELATIVE (the FP8 kernel reaches a smaller fraction of its peak than the 16-bit one)."""
    hw = job.hardware
    if job.fp8_attention and hw.peak_flops_per_s.get("fp8"):
        return hw.peak("fp8") * FP8_ATTENTION_RELATIVE
    return min(hw.peak_16bit_flops_per_s, hw.peak(job.precision))


def attention_flops_per_s(job: Job, layout: Layout, span: Num | None = None) -> Num:
    """Fused attention's achievable FLOP/s: min(16-bit peak, run's peak) · η_attn · s_c/(s_c + 512) ·
    d_h/(d_h + 32) (· η_flash2 for FlashAttention-2), with s_c = s/c the per-rank sequence
    (FlashAttention-2 benchmarks, Dao 2023 Fig. 4-6) [FLOP/s]. Over a context-parallel ring the same
    factor at s/c: the ring's later steps pair one side of s/(2c) but run unmasked blocks, which tile
    better than a causal kernel of the same length (docs/model.md §4.2). Attention runs in 16 bit
    (FP8/FP4 recipes keep it there), or at the run's own peak when lower (FP32/TF32), so MFU stays <= 1;
    FP8 dot-product attention (`fp8_attention`) at the FP8 peak (`attention_peak_flops_per_s`).
    Packed sequences: the length factor takes the document length (`attention_span`); a windowed layer
    gives its own `span` (`windowed_span`)."""
    eff, m = job.hardware.efficiency, job.model
    # MLA: the query/key and value widths differ (d_n + d_r, d_v); the kernel's two products use one each
    head_width = m.head_dim if m.mla is None else (m.qk_head_dim + m.v_head_dim) / 2.0
    return (attention_peak_flops_per_s(job) * eff.attention
            * dimension_factor(attention_span(job, layout) if span is None else span, ATTENTION_HALF_SEQ)
            * dimension_factor(head_width, ATTENTION_HALF_HEAD_DIM)
            * (eff.flash2_attention if job.attention == "flash2" else 1.0))


def gemm_peak_fraction(job: Job) -> float:
    """η_max of the job's GEMMs as a fraction of its precision's peak: η_gemm (16 bit); FP8/FP4 η_lp·η_gemm, and
    with `bf16_layers` B of the L layers kept in BF16 the rate whose time per FLOP is the layers' mean,
    1 / ((1 − B/L)/(P_lp·η_lp·η_gemm) + (B/L)/(P_16·η_gemm)), over P_lp (docs/model.md §2.2)."""
    hw, eff = job.hardware, job.hardware.efficiency
    if not job.low_precision:
        return eff.gemm
    low = eff.gemm * eff.low_precision_gemm
    kept = min(job.bf16_layers / job.model.layers, 1.0)
    if not kept:
        return low
    peak_low, peak_16 = hw.peak(job.precision), hw.peak("bf16")
    return 1.0 / ((1.0 - kept) / (peak_low * low) + kept / (peak_16 * eff.gemm)) / peak_low


def rates_of(job: Job, layout: Layout) -> Rates:
    """The device's achievable rates (hardware efficiencies applied; FP8/FP4 GEMMs at η_lp·η_gemm, or the
    layers' mean with BF16 layers: `gemm_peak_fraction`)."""
    hw, eff = job.hardware, job.hardware.efficiency
    return Rates(peak_flops_per_s=hw.peak(job.precision),
                 gemm_peak_fraction=gemm_peak_fraction(job),
                 gemm_half_dim=eff.gemm_half_dim, memory_bytes_per_s=hw.memory_bytes_per_s * eff.memory,
                 attention_flops_per_s=attention_flops_per_s(job, layout), gemm_input_bytes=job.gemm_input_bytes,
                 element_bytes=job.element_bytes,
                 units=hw.compute_units,
                 tile=None if hw.gemm_tile_m is None or hw.gemm_tile_n is None else (hw.gemm_tile_m, hw.gemm_tile_n),
                 window_attention_flops_per_s=None if job.model.attention_window is None
                 else attention_flops_per_s(job, layout, windowed_span(job, layout)))


def module_precision(job: Job, module: str) -> str:
    """The precision `module`'s GEMMs run at (precision.MODULE_PRECISION_MODULES): the job's own, or under an
    FP8/FP4 recipe the one `module_precision` keeps it in (docs/model.md §2.2)."""
    if not job.low_precision:
        return job.precision
    return module_precisions(job.module_precision).get(module, job.precision)


def module_job(job: Job, module: str) -> Job:
    """The job as `module` runs it: at its `module_precision`, the layers kept in BF16 still kept where the module
    stays in low precision (a BF16 module has none to keep); the other modules' overrides kept, so that a module
    within it (an MTP module's attention) keeps its own (docs/model.md §2.2)."""
    precision = module_precision(job, module)
    if precision == job.precision:
        return job
    kept = job.bf16_layers if precision in LOW_PRECISIONS else 0.0
    return replace(job, precision=precision, bf16_layers=kept)


def module_rates(job: Job, r: Rates, module: str) -> Rates:
    """`r` for `module`'s GEMMs: the same rates, at the peak, η_max (`gemm_peak_fraction`) and input bytes of the
    precision `module_precision` keeps it in (r itself where it keeps none) (docs/model.md §2.2)."""
    at = module_job(job, module)
    if at is job:
        return r
    return r._replace(peak_flops_per_s=at.hardware.peak(at.precision), gemm_peak_fraction=gemm_peak_fraction(at),
                      gemm_input_bytes=at.gemm_input_bytes)


class LocalShape(NamedTuple):
    """The layer's widths on one device: T tokens of a micro-batch, the query width a·d_h, the KV
    width per TP rank (g < t replicates KV heads, so each rank keeps at least one; MLA: the mean of
    the key and value widths, a/t·(d_qk + d_v)/2, so that K and V take 2·kv_local)."""

    tokens: Num                 # T = b·s/c
    q_width: float              # a·d_h
    heads_local: Num            # a/t
    kv_local: Num               # max(g, t)·d_h/t
    score_elements: Num         # b·(a/t)·(s/c)·s


def local_shape(job: Job, layout: Layout) -> LocalShape:
    """The layer's widths on one device (see LocalShape)."""
    m = job.model
    kv_local = (xp.maximum(m.kv_heads, layout.tp) * m.head_dim / layout.tp if m.mla is None
                else m.heads / layout.tp * (m.qk_head_dim + m.v_head_dim) / 2.0)
    return LocalShape(tokens=layout.tokens(job), q_width=float(m.heads * m.head_dim), heads_local=m.heads / layout.tp,
                      kv_local=kv_local,
                      score_elements=layout.micro_batch * (m.heads / layout.tp) * (job.seq_len / layout.cp)
                      * job.seq_len)


def grouped_gemm(r: Rates, name: str, groups: Num, m: Num, n: Num, k: Num, efficiency: Num = 1.0) -> Op:
    """A grouped GEMM: `groups` GEMMs of (m×k)·(k×n) in one kernel, their tiles spread over the
    device's units together (wave_efficiency with batch = groups), each group's small m lowering the
    rate as a small GEMM does, times `efficiency` (`efficiency.grouped_gemm`: the grouped kernel
    against a dense GEMM)."""
    one = r.gemm_op(name, m, n, k, batch=groups, grouped=True)
    return Op(name=name, phase=FORWARD, flops=groups * one.flops, bytes=groups * one.bytes,
              compute_s=groups * one.compute_s / efficiency, memory_s=groups * one.memory_s)
