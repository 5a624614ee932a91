"""A scenario that does not fit: the fixes as complete `trainest estimate` commands (the options given, with one
change, or with the layout of the fastest plan that fits), for the first lines of the tables, `-q` included, and
the JSON's `fit_advice` (trainest.advice finds and estimates the fixes)."""

from __future__ import annotations

from typing import Any

from trainest.knobs import KNOBS, LAYOUT_ARGS, given_args

# a change of tp or pp moves the data-parallel size with it: a --dp given would contradict it
_MOVES_WITH = {"tp": ("dp", "dp_shard"), "pp": ("dp", "dp_shard", "pipeline_layout", "pipeline_split")}
_FLAG_NAME = {flag.split("/")[0]: k.name for k in KNOBS for flag in k.flags} | \
    {flag.split("/")[1]: k.name for k in KNOBS for flag in k.flags if "/" in flag}


def _given_words(values: dict[str, Any], leave_out: set[str]) -> list[str]:
    """The options given (the config file and every scenario knob), but those in `leave_out`."""
    names = tuple(k.name for k in KNOBS if k.name not in leave_out)
    return given_args(values, ("config",)) + given_args(values, names)


def changed_names(change: list[str]) -> set[str]:
    """The knobs a change's words set, and those that move with them (tp and pp move dp)."""
    names = {_FLAG_NAME[w] for w in change if w in _FLAG_NAME}
    for name in list(names):
        names |= set(_MOVES_WITH.get(name, ()))
    return names


def change_command(values: dict[str, Any], change: str) -> list[str]:
    """`estimate` with the options given and one change (its words replace the options they set)."""
    words = change.split()
    return ["estimate", *_given_words(values, changed_names(words)), *words]


def layout_command(values: dict[str, Any], layout_args: list[str]) -> list[str]:
    """`estimate` with the job options given and a plan's device count and layout."""
    leave_out = set(LAYOUT_ARGS) | {"dp", "dp_shard", "pipeline_layout", "pipeline_split", "global_batch_tokens"}
    if "--framework" in layout_args:
        leave_out.add("framework")
    return ["estimate", *_given_words(values, leave_out), *layout_args]


def best_args(advice: Any) -> list[str]:
    """The options of the advice's fastest plan that fits: its layout, and the shorter sequence it runs where the
    default one fits nowhere (`FitAdvice.seq_len`)."""
    from trainest.advice import reproduce_args
    return reproduce_args(advice.best) + (["--seq-len", str(advice.seq_len)] if advice.seq_len else [])


def fit_advice_dict(values: dict[str, Any], advice: Any) -> dict[str, Any]:
    """The JSON's `fit_advice`: what does not fit, each single change that fits and the fastest plan that fits,
    each with its command's words (after `trainest`)."""
    best = advice.best
    return {
        "fits": False, "per_device_bytes": advice.need_bytes, "capacity_bytes": advice.capacity_bytes,
        "single_changes": [{"change": c, "command": change_command(values, c)} for c in advice.changes],
        "fastest_that_fits": None if best is None else {
            "devices": best.scenario.devices, "same_devices": advice.same_devices, "step_s": best.step.time_s,
            "per_device_bytes": best.memory.per_device_bytes, "seq_len": best.scenario.seq_len,
            "command": layout_command(values, best_args(advice))},
        "summary": advice.text,
    }



def print_no_fit(values: dict[str, Any], advice: Any) -> None:
    """The first lines of the tables when the scenario does not fit: what it needs, then each fix as a complete
    command (one line each, never wrapped, quoted for the shell)."""
    from trainest.advice import plan_words
    from trainest.report import console, print_command
    from trainest.units import GiB
    con = console()
    best = advice.best
    where = ("" if best is None else
             f"; the fastest layout that fits "
             f"{'on these devices' if advice.same_devices else f'on the fewest devices, {best.scenario.devices:,}'}"
             f"{f' with a shorter sequence than the default, --seq-len {advice.seq_len:,}' if advice.seq_len else ''}: "
             f"{plan_words(best)}")
    changes = f"; fits with one change: {', '.join(advice.changes)}" if advice.changes else ""
    need = (f" in host memory: {advice.host_words} (the device part, {advice.need_bytes / GiB:.1f} GiB of "
            f"{advice.capacity_bytes / GiB:.1f} GiB, fits)" if advice.host_words else
            f": needs {advice.need_bytes / GiB:.1f} GiB per device of {advice.capacity_bytes / GiB:.1f} GiB")
    con.print(f"[bold]DOES NOT FIT[/bold]{need}{changes}{where}"
              + ("" if advice.changes or best is not None else f"; {advice.text}"), soft_wrap=True, highlight=False)
    for c in advice.changes:
        print_command(con, f"  with {c}", change_command(values, c))
    if best is not None:
        print_command(con, f"  on {best.scenario.devices:,} devices" if not advice.same_devices
                      else "  fastest layout", layout_command(values, best_args(advice)))
