"""Operations on the roofline: compute time, memory-traffic time, and the GEMM efficiency model.

Each operation takes `max(FLOPs / (C·η_c), bytes / (W_mem·η_m))` (Williams et al. 2009, roofline;
scaling-book "Rooflines"). η_c of a GEMM falls for small dimensions (tiles left partly empty,
too few tiles to fill the streaming multiprocessors): each dimension x contributes x/(x + x_½).
"""

from __future__ import annotations

from trainest import xp
from trainest.layout import Num
from trainest.record import NamedTuple


class OpTime(NamedTuple):
    """One operation's two roofline bounds [s]; `time_s` is the larger."""

    compute_s: Num
    memory_s: Num

    @property
    def time_s(self) -> Num:
        """max(compute, memory) [s]."""
        return xp.maximum(self.compute_s, self.memory_s)

    @property
    def compute_bound_s(self) -> Num:
        """The op's time where it is compute-bound, else 0 [s]."""
        return xp.where(self.compute_s >= self.memory_s, self.time_s, 0.0)

    @property
    def memory_bound_s(self) -> Num:
        """The op's time where it is memory-bound, else 0 [s]."""
        return self.time_s - self.compute_bound_s


class Op(NamedTuple):
    """One named operation (a kernel) of a layer pass or of the step, per micro-batch and device: its
    FLOPs and bytes and its two roofline bounds [s]. `phase` is forward, backward or recompute; the
    same name may appear in several phases (`qkv` forward, `qkv.dgrad` backward). A later kernel
    model can add a floor per op by its name; the layer pass sums ops, never anything else."""

    name: str
    phase: str
    flops: Num                  # [FLOP]
    bytes: Num                  # [B] moved to and from device memory
    compute_s: Num
    memory_s: Num

    @property
    def time_s(self) -> Num:
        """max(compute, memory) [s]."""
        return xp.maximum(self.compute_s, self.memory_s)

    @property
    def compute_bound_s(self) -> Num:
        """The op's time where it is compute-bound, else 0 [s]."""
        return xp.where(self.compute_s >= self.memory_s, self.time_s, 0.0)

    @property
    def memory_bound_s(self) -> Num:
        """The op's time where it is memory-bound, else 0 [s]."""
        return self.time_s - self.compute_bound_s

    def scaled(self, factor: Num, *, name: str | None = None, phase: str | None = None) -> Op:
        """The same kernel `factor` times (a backward GEMM at 1×, attention's at 2.5×; 0 masks it out)."""
        if isinstance(factor, float) and factor == 1.0:       # the same numbers, no array work
            return self._replace(name=self.name if name is None else name, phase=self.phase if phase is None else phase)
        return Op(name=self.name if name is None else name, phase=self.phase if phase is None else phase,
                  flops=self.flops * factor, bytes=self.bytes * factor, compute_s=self.compute_s * factor,
                  memory_s=self.memory_s * factor)


def op_of(name: str, phase: str, flops: Num, bytes_moved: Num, t: OpTime) -> Op:
    """A named op from its counts and its roofline bounds."""
    return Op(name=name, phase=phase, flops=flops, bytes=bytes_moved, compute_s=t.compute_s, memory_s=t.memory_s)


def bound_sums(times: list[OpTime] | list[Op]) -> tuple[Num, Num]:
    """(seconds of the compute-bound ops, seconds of the memory-bound ops) of a list of operations."""
    compute: Num = 0.0
    memory: Num = 0.0
    for t in times:
        # = compute_bound_s, memory_bound_s (max(c, m) is c where c ≥ m, else m), one comparison per op
        bound = t.compute_s >= t.memory_s
        compute = compute + xp.where(bound, t.compute_s, 0.0)
        memory = memory + xp.where(bound, 0.0, t.memory_s)
    return compute, memory


def dimension_factor(dim: Num, half_dim: Num) -> Num:
    """x / (x + x_½): 1/2 at x = x_½, → 1 for large x [dimensionless]."""
    return dim / (dim + half_dim)


def gemm_efficiency(m: Num, n: Num, k: Num, peak_fraction: Num, half_dim: Num) -> Num:
    """η_c(m, n, k) = η_max · Π_{x∈m,n,k} x/(x + x_½) [fraction of dense peak]."""
    return (peak_fraction * dimension_factor(m, half_dim) * dimension_factor(n, half_dim)
            * dimension_factor(k, half_dim))


SPLIT_K = (1.0, 2.0, 4.0, 8.0)     # split-K factors a GEMM library may choose for short, wide problems
MIN_K_PER_SPLIT = 256.0            # each split keeps at least this much of K (cuBLAS/CUTLASS split-K)


MIN_TILE = 16.0                    # the narrowest tile edge a GEMM library uses
# a dimension this narrow gets a tile of its own width: LoRA ranks, and attention's head dimension of 64 in the
# batched score/context GEMMs (CUTLASS's sm80 configurations and cuBLAS's heuristics carry 64-wide tiles,
# e.g. 128×64 and 64×64 threadblocks, for N ≤ 64)
SKINNY_EDGE = 64.0


def narrow_tile(dim: Num, tile: Num) -> Num:
    """The tile edge used along a dimension: the device's tile, or, for a skinny matrix (a dimension
    ≤ SKINNY_EDGE, e.g. a LoRA adapter of rank 16 or a 64-wide attention head), the power of two ≥ the
    dimension (≥ MIN_TILE):
    libraries carry skinny-GEMM kernels for such shapes (cuBLASLt, CUTLASS); wider matrices keep the
    device's tile and pay its padding."""
    if xp.is_array(dim) and not xp.any_true(dim <= SKINNY_EDGE):
        return tile              # no plan of the array is skinny here: the same tiles, without the arithmetic
    fit = xp.maximum(MIN_TILE, 2.0 ** xp.ceil(xp.log2(xp.maximum(dim, 1.0))))
    return xp.where(dim <= SKINNY_EDGE, xp.minimum(tile, fit), tile)


def wave_efficiency(m: Num, n: Num, k: Num, *, units: float, tile_m: Num, tile_n: Num,
                    batch: Num = 1.0) -> Num:
    """Share of the device's compute units a GEMM keeps busy [fraction]: its output is cut into
    ceil(m/t_m)·ceil(n/t_n)·batch tiles, one per unit at a time, so they run in ceil(tiles/U) waves
    and the last wave is partly empty; edge tiles are partly filled (m·n over the padded area).
    Split-K (s pieces of K, each ≥ MIN_K_PER_SPLIT) multiplies the tiles of a short, wide GEMM; the
    best s is taken, as library heuristics do (NVIDIA, "Matrix Multiplication Background" user guide:
    tile and wave quantization)."""
    # a skinny matrix gets a tile of its own width (a rank-16 LoRA adapter is not padded to 256)
    tile_m, tile_n = narrow_tile(m, tile_m), narrow_tile(n, tile_n)
    rows, cols = xp.ceil(m / tile_m), xp.ceil(n / tile_n)
    fill = m * n / (rows * tile_m * cols * tile_n)
    tiles = rows * cols * batch
    best: Num = 0.0
    for s in SPLIT_K:
        waves = xp.ceil(tiles * s / units)
        allowed = 1.0 if s == 1.0 else xp.mask(k >= s * MIN_K_PER_SPLIT)
        best = xp.maximum(best, tiles * s / (waves * units) * allowed)
    return fill * best


def padded_dim(dim: Num, tile: Num) -> Num:
    """A GEMM output dimension rounded up to whole tiles along it, ⌈x/t⌉·t with t = narrow_tile(x, tile)
    [elements]: the work the tiles do whatever part of them is filled."""
    edge = narrow_tile(dim, tile)
    return xp.ceil(dim / edge) * edge


def gemm_flops(m: Num, n: Num, k: Num) -> Num:
    """2·m·n·k [FLOP] for an (m×k)·(k×n) product."""
    return 2.0 * m * n * k


def gemm_bytes(m: Num, n: Num, k: Num, input_bytes: float, output_bytes: float) -> Num:
    """Bytes moved by a GEMM that reads both operands once and writes its output once [B]."""
    return (m * k + k * n) * input_bytes + m * n * output_bytes


def gemm_compute_efficiency(m: Num, n: Num, k: Num, *, peak_fraction: Num, half_dim: Num, wave: Num = 1.0,
                            padded: tuple[Num, Num] | None = None, grouped: bool = False) -> Num:
    """η_c of a GEMM with its tiles: η_max · K/(K + x_½) · w [fraction of dense peak], with w = `wave`
    (wave_efficiency: the tiles' fill times the share of units busy), where the device's tiles are known
    (`padded`, the output rounded up to whole tiles by `padded_dim`, is given); else η_max · f(M)·f(N)·f(K)
    (`gemm_efficiency`).

    Why only K with tiles: each unit computes one t_m×t_n output tile by looping over K, and pays a fixed
    cost per tile (filling the load pipeline, writing the tile back), so a tile's efficiency is K/(K + x_½)
    whatever M and N are; M and N set how many tiles there are, and what that costs (partly filled edge tiles,
    a last wave partly empty) is w. A factor M/(M + x_½) on top charged a 4,096-wide GEMM 3 % once more for
    a cost that does not grow with M. The compute time is that of the padded M̃×Ñ×K GEMM (w's fill), which
    never grows when M or N shrinks (docs/model.md §2.2). `grouped`: a grouped GEMM's group (MoE experts, LoRA
    adapters) keeps the factor of all three dimensions, M̃ and Ñ padded (not measured otherwise)."""
    if padded is None:          # the device's tiles unknown: M and N carry the shape factor too
        return gemm_efficiency(m, n, k, peak_fraction, half_dim) * wave
    if grouped:
        return gemm_efficiency(padded[0], padded[1], k, peak_fraction, half_dim) * wave
    return peak_fraction * dimension_factor(k, half_dim) * wave


def gemm_time(m: Num, n: Num, k: Num, *, peak_flops_per_s: float, peak_fraction: Num, half_dim: Num,
              input_bytes: float, output_bytes: float, memory_bytes_per_s: Num, wave: Num = 1.0,
              padded: tuple[Num, Num] | None = None) -> OpTime:
    """A GEMM on the roofline. memory_bytes_per_s is the achievable HBM bandwidth [B/s]; `wave` the
    share of the units its tiles keep busy (wave_efficiency; 1 where the device's tiles are unknown);
    `padded` the output dimensions the shape factor sees (see `gemm_compute_efficiency`)."""
    eff = gemm_compute_efficiency(m, n, k, peak_fraction=peak_fraction, half_dim=half_dim, wave=wave, padded=padded)
    return OpTime(compute_s=gemm_flops(m, n, k) / (peak_flops_per_s * eff),
                  memory_s=gemm_bytes(m, n, k, input_bytes, output_bytes) / memory_bytes_per_s)


def gemm_op(name: str, phase: str, m: Num, n: Num, k: Num, *, peak_flops_per_s: float, peak_fraction: Num,
            half_dim: Num, input_bytes: float, output_bytes: float, memory_bytes_per_s: Num, wave: Num = 1.0,
            padded: tuple[Num, Num] | None = None, grouped: bool = False) -> Op:
    """`gemm_time` as a named op with its FLOPs (2mnk) and bytes (the same expressions, computed once)."""
    eff = gemm_compute_efficiency(m, n, k, peak_fraction=peak_fraction, half_dim=half_dim, wave=wave, padded=padded,
                                  grouped=grouped)
    flops, bytes_moved = gemm_flops(m, n, k), gemm_bytes(m, n, k, input_bytes, output_bytes)
    return Op(name=name, phase=phase, flops=flops, bytes=bytes_moved, compute_s=flops / (peak_flops_per_s * eff),
              memory_s=bytes_moved / memory_bytes_per_s)


def streaming_time(bytes_moved: Num, memory_bytes_per_s: Num) -> OpTime:
    """An element-wise (memory-bound) kernel: bytes / achievable bandwidth; no compute term."""
    return OpTime(compute_s=0.0 * bytes_moved, memory_s=bytes_moved / memory_bytes_per_s)


def fused_time(flops: Num, bytes_moved: Num, flops_per_s: Num, memory_bytes_per_s: Num) -> OpTime:
    """A fused kernel (e.g. flash attention) with its own achievable FLOP/s and bandwidth."""
    return OpTime(compute_s=flops / flops_per_s, memory_s=bytes_moved / memory_bytes_per_s)
