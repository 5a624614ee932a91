"""trainest.compute: the roofline and the GEMM efficiency model (limit cases by name)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainest.step.roofline import (OpTime, dimension_factor, fused_time, gemm_bytes, gemm_efficiency, gemm_flops,
                              gemm_time, streaming_time)

PEAK = 989e12          # [FLOP/s] H100/H200 dense BF16
HBM = 4.8e12 * 0.9     # [B/s] achievable HBM bandwidth
ETA = 0.8              # large-GEMM fraction of peak
HALF = 128.0           # x_½ [elements]

dims = st.floats(min_value=1.0, max_value=1e6, allow_nan=False)


def _gemm(m, n, k, **kw):
    args = dict(peak_flops_per_s=PEAK, peak_fraction=ETA, half_dim=HALF, input_bytes=2.0, output_bytes=2.0,
                memory_bytes_per_s=HBM)
    args.update(kw)
    return gemm_time(m, n, k, **args)


def test_gemm_flops_is_two_m_n_k():
    assert gemm_flops(3, 5, 7) == 2 * 3 * 5 * 7


def test_gemm_bytes_reads_operands_once_writes_output_once():
    # (m×k) + (k×n) inputs at 2 B, (m×n) output at 4 B
    assert gemm_bytes(3, 5, 7, 2.0, 4.0) == (3 * 7 + 7 * 5) * 2 + 3 * 5 * 4


def test_dimension_factor_is_half_at_half_dim():
    assert dimension_factor(HALF, HALF) == 0.5


def test_gemm_efficiency_at_half_dim_in_every_dimension_is_one_eighth_of_peak_fraction():
    assert gemm_efficiency(HALF, HALF, HALF, ETA, HALF) == pytest.approx(ETA / 8)


def test_gemm_efficiency_with_zero_half_dim_is_the_peak_fraction():
    assert gemm_efficiency(16, 16, 16, ETA, 0.0) == ETA


def test_gemm_efficiency_tends_to_the_peak_fraction_for_huge_gemms():
    assert gemm_efficiency(1e12, 1e12, 1e12, ETA, HALF) == pytest.approx(ETA, rel=1e-9)
    assert gemm_efficiency(1e12, 1e12, 1e12, ETA, HALF) < ETA


@given(m=dims, n=dims, k=dims, grow=st.floats(min_value=1.01, max_value=100.0))
def test_gemm_efficiency_rises_monotonically_with_each_dimension(m, n, k, grow):
    base = gemm_efficiency(m, n, k, ETA, HALF)
    assert gemm_efficiency(m * grow, n, k, ETA, HALF) > base
    assert gemm_efficiency(m, n * grow, k, ETA, HALF) > base
    assert gemm_efficiency(m, n, k * grow, ETA, HALF) > base
    assert 0.0 < base < ETA


def test_gemm_efficiency_is_symmetric_in_its_dimensions():
    assert gemm_efficiency(100, 2000, 30000, ETA, HALF) == pytest.approx(gemm_efficiency(30000, 100, 2000, ETA, HALF))


def test_compute_bound_gemm_time_is_flops_over_achievable_flops():
    m = n = k = 8192.0
    t = _gemm(m, n, k)
    achievable = PEAK * gemm_efficiency(m, n, k, ETA, HALF)
    assert t.compute_s == pytest.approx(2 * m * n * k / achievable)
    assert t.memory_s < t.compute_s
    assert t.time_s == t.compute_s
    assert t.compute_bound_s == t.time_s
    assert t.memory_bound_s == 0.0


def test_matrix_vector_product_is_memory_bound():
    """m = 1 (a GEMV): arithmetic intensity ~1 FLOP/B, far below the ridge point."""
    t = _gemm(1.0, 8192.0, 8192.0)
    assert t.memory_s > t.compute_s
    assert t.time_s == pytest.approx(gemm_bytes(1.0, 8192.0, 8192.0, 2.0, 2.0) / HBM)
    assert t.memory_bound_s == t.time_s
    assert t.compute_bound_s == 0.0


def test_roofline_time_is_the_larger_bound():
    assert OpTime(2.0, 3.0).time_s == 3.0
    assert OpTime(5.0, 3.0).time_s == 5.0
    op = OpTime(2.0, 3.0)
    assert op.compute_bound_s + op.memory_bound_s == op.time_s


def test_infinite_memory_bandwidth_leaves_only_compute():
    t = _gemm(64.0, 64.0, 64.0, memory_bytes_per_s=1e300)
    assert t.time_s == t.compute_s


def test_streaming_kernel_has_no_compute_term():
    t = streaming_time(1e9, HBM)
    assert t.compute_s == 0.0
    assert t.time_s == pytest.approx(1e9 / HBM)


def test_fused_kernel_takes_its_own_rates():
    t = fused_time(1e12, 1e6, 5e14, 1e12)
    assert t.compute_s == pytest.approx(2e-3)
    assert t.memory_s == pytest.approx(1e-6)
    assert t.time_s == t.compute_s


def test_arrays_give_the_same_answer_as_floats():
    ms = np.array([1.0, 64.0, 8192.0])
    t = _gemm(ms, 4096.0, 4096.0)
    for i, m in enumerate(ms):
        one = _gemm(float(m), 4096.0, 4096.0)
        assert t.time_s[i] == pytest.approx(one.time_s)
        assert t.compute_bound_s[i] == pytest.approx(one.compute_bound_s)
    s = streaming_time(np.array([1.0, 2.0]), HBM)
    assert np.all(s.compute_s == 0.0) and s.memory_s[1] == pytest.approx(2 * s.memory_s[0])


H100_UNITS, H100_TILE = 132, (128, 256)
SKINNY = 64               # roofline.SKINNY_EDGE: a dimension this narrow gets a tile of its own width


def _tiled(m, n, k):
    """A GEMM on an H100-like device whose tiles are known (128×256, 132 units)."""
    from trainest.step.rates import Rates
    r = Rates(peak_flops_per_s=PEAK, gemm_peak_fraction=ETA, gemm_half_dim=HALF, memory_bytes_per_s=HBM,
              attention_flops_per_s=PEAK, gemm_input_bytes=2.0, element_bytes=2.0, units=H100_UNITS, tile=H100_TILE)
    return r.gemm(m, n, k)


@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 20000), shrink=st.floats(0.01, 1.0))
def test_a_gemm_never_gets_slower_as_a_dimension_shrinks(m, n, k, shrink):
    """Shrinking M or N within its padded tiles, or a skinny one (≤ 64, a LoRA rank or a head width) to
    anything smaller, or K below the split-K threshold (2·256), never raises a GEMM's time: the tile
    padding is charged once (the fill), not again through the shape factor of the unfilled width (a
    rank-1 LoRA adapter was 8× slower than a rank-16 one). (Across tile counts, the wave quantisation
    and the smooth shape factor of the whole GEMM are not monotone together: docs/model.md §2.2.)"""
    from trainest.step.roofline import padded_dim
    base = _tiled(m, n, k)
    for dim, tile, at in ((m, H100_TILE[0], 0), (n, H100_TILE[1], 1)):
        small = max(1, int(dim * shrink))
        if dim > SKINNY and padded_dim(small, tile) != padded_dim(dim, tile):
            continue
        shape = [m, n, k]
        shape[at] = small
        assert _tiled(*shape).compute_s <= base.compute_s * (1 + 1e-12)
        assert _tiled(*shape).time_s <= base.time_s * (1 + 1e-12)
    small_k = min(k, 511)
    assert _tiled(m, n, max(1, int(small_k * shrink))).time_s <= _tiled(m, n, small_k).time_s * (1 + 1e-12)


def test_a_skinny_gemm_costs_at_most_its_padded_tile_and_is_memory_bound():
    """A rank-1 adapter GEMM (T×1 by 1×out, or T×in by in×1) costs no more compute than the rank-16 GEMM
    its tile is padded to, and reading its T×in input takes longer: it is memory-bound."""
    t, width = 16384.0, 14336.0
    for r in (1.0, 2.0, 4.0, 8.0):
        for skinny, padded in ((_tiled(t, r, width), _tiled(t, 16.0, width)), (_tiled(t, width, r), _tiled(t, width, 16.0))):
            assert skinny.compute_s <= padded.compute_s * (1 + 1e-12)
            assert skinny.memory_s > skinny.compute_s


@given(k=st.integers(1, 20000), waves=st.integers(1, 40), more=st.integers(2, 8))
def test_with_its_tiles_known_a_gemm_of_more_whole_waves_runs_at_the_same_rate(k, waves, more):
    """The fixed cost of a GEMM is paid per output tile (filling the load pipeline, writing the tile back), so
    with the device's tiles counted, a GEMM of `more` times as many whole waves of full tiles (M grows) runs
    at the same fraction of peak and takes `more` times as long: no factor M/(M + x_½) on top (it charged a
    4,096-token GEMM 3 % for a cost no tile pays; docs/model.md §2.2)."""
    m = waves * H100_UNITS * H100_TILE[0]          # whole waves of full tiles, one tile column
    one, bigger = _tiled(m, H100_TILE[1], k), _tiled(more * m, H100_TILE[1], k)
    assert bigger.compute_s == pytest.approx(more * one.compute_s, rel=1e-12)


def test_with_its_tiles_known_only_k_carries_the_shape_factor():
    """η_c = η_max · K/(K + x_½) · w with the tiles known; the whole-GEMM factor of each of M, N, K without them."""
    from trainest.step.roofline import gemm_compute_efficiency
    m, n, k = 4096.0, 4096.0, 1024.0
    tiled = gemm_compute_efficiency(m, n, k, peak_fraction=ETA, half_dim=HALF, wave=0.9, padded=(m, n))
    assert tiled == pytest.approx(ETA * k / (k + HALF) * 0.9)
    untiled = gemm_compute_efficiency(m, n, k, peak_fraction=ETA, half_dim=HALF, wave=0.9)
    assert untiled == pytest.approx(gemm_efficiency(m, n, k, ETA, HALF) * 0.9)
    assert untiled < tiled
