"""The matplotlib figure of a sweep (the plot extra); `draw` is given pyplot by report.sweep.write_figure,
so this module imports no plotting library itself."""

from __future__ import annotations

from typing import Any

from trainest.sweep import SweepResult


def draw(plt: Any, r: SweepResult) -> Any:
    """Three panels against the knob: step time with its error band, throughput (per device with the
    ideal when the device count is swept), MFU. Categorical knobs (precision...) on an even axis."""
    ok = [p for p in r.points if p.estimate is not None]
    numeric = all(isinstance(p.value, (int, float)) for p in r.points)
    xs: list[Any] = [p.value for p in ok] if numeric else [str(p.value) for p in ok]
    est = [p.estimate for p in ok if p.estimate is not None]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    step, rate, mfu = axes
    t = [e.step.time_s for e in est]
    step.plot(xs, t, marker="o", label="estimate")
    step.fill_between(xs, [e.step.time_s_low for e in est], [e.step.time_s_high for e in est], alpha=0.25,
                      label=f"{est[0].band.coverage:.0%} error band" if est else "band")
    step.set_ylabel("step time [s]")
    step.set_ylim(bottom=0)
    step.legend(fontsize=8)
    devices = r.knob == "devices"
    y = [e.throughput.tokens_per_s_per_device if devices else e.throughput.tokens_per_s for e in est]
    rate.plot(xs, y, marker="o", label="estimate")
    if devices and y:
        rate.plot(xs, [y[0]] * len(xs), linestyle="--", color="gray", label="ideal (linear scaling)")
        rate.legend(fontsize=8)
    rate.set_ylabel("tokens/s per device" if devices else "tokens/s")
    rate.set_ylim(bottom=0)
    mfu.plot(xs, [100 * e.throughput.mfu for e in est], marker="o", color="tab:green")
    mfu.set_ylabel("MFU [%]")
    mfu.set_ylim(bottom=0)
    for ax in axes:
        ax.set_xlabel(r.knob)
        ax.grid(True, alpha=0.3)
        if numeric and len(xs) > 1 and max(xs) / max(min(xs), 1e-9) >= 16:
            ax.set_xscale("log", base=2)
    s = est[0].scenario if est else None
    title = f"{s.model.name} on {s.hardware.name}" if s else "sweep"
    fig.suptitle(f"{title}: {'best plan' if r.plan else 'estimate'} vs {r.knob}")
    fig.tight_layout()
    return fig
