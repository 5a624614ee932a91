"""Operations on the roofline: compute time, memory-traffic time, and the GEMM efficiency model.

Each operation takes `max(FLOPs / (C·η_c), bytes / (W_mem·η_m))` (Williams et al. 2009, roofline;
scaling-book "Rooflines"). η_c of a GEMM falls for small dimensions (tiles left partly empty,
too few tiles to fill the streaming multiprocessors): each dimension x contributes x/(x + x_½).
"""

from __future__ import annotations

from typing import NamedTuple

from trainest import xp
from trainest.layout import Num


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


def bound_sums(times: list[OpTime]) -> tuple[Num, Num]:
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


def gemm_flops(m: Num, n: Num, k: Num) -> Num:
    """2·m·n·k [FLOP] for an (m×k)·(k×n) product."""
    return 2.0 * m * n * k


def gemm_bytes(m: Num, n: Num, k: Num, input_bytes: float, output_bytes: float) -> Num:
    """Bytes moved by a GEMM that reads both operands once and writes its output once [B]."""
    return (m * k + k * n) * input_bytes + m * n * output_bytes


def gemm_time(m: Num, n: Num, k: Num, *, peak_flops_per_s: float, peak_fraction: Num, half_dim: Num,
              input_bytes: float, output_bytes: float, memory_bytes_per_s: Num) -> OpTime:
    """A GEMM on the roofline. memory_bytes_per_s is the achievable HBM bandwidth [B/s]."""
    eff = gemm_efficiency(m, n, k, peak_fraction, half_dim)
    return OpTime(compute_s=gemm_flops(m, n, k) / (peak_flops_per_s * eff),
                  memory_s=gemm_bytes(m, n, k, input_bytes, output_bytes) / memory_bytes_per_s)


def streaming_time(bytes_moved: Num, memory_bytes_per_s: Num) -> OpTime:
    """An element-wise (memory-bound) kernel: bytes / achievable bandwidth; no compute term."""
    return OpTime(compute_s=0.0 * bytes_moved, memory_s=bytes_moved / memory_bytes_per_s)


def fused_time(flops: Num, bytes_moved: Num, flops_per_s: Num, memory_bytes_per_s: Num) -> OpTime:
    """A fused kernel (e.g. flash attention) with its own achievable FLOP/s and bandwidth."""
    return OpTime(compute_s=flops / flops_per_s, memory_s=bytes_moved / memory_bytes_per_s)
