"""Regenerate specs/bands.json, the error band of every estimate, from the validation residuals.

    python tools/fit_bands.py            # write specs/bands.json (tools/fit_defaults.py runs this after a refit)
    python tools/fit_bands.py --check    # compute and compare with the shipped file: exit 1 when it is stale

Method (trainest/band.py): each public run's residual r = measured / predicted step time, in two pools:
`holdout` (runs not used to fit the shipped efficiencies, crc32(id) mod 100 >= 60, on hardware whose
efficiencies are fitted) and `prior` (every public run predicted with the prior its device would ship with
had it no runs: the median of the other fitted devices of its group, `fit_priors.unseen_prior_hardware`,
else the importer's generic prior; what an uncalibrated device's estimate uses). Per group of runs (hardware, its family, scale, dense/MoE; every level of
band.LEVELS with at least band.MIN_GROUP_RUNS runs) the split-conformal 80 % interval of r.

It also measures what the band claims, out of sample: leave-one-out coverage (each run's band built
without it; the figure tests/test_band.py checks), leave-one-source-out coverage (each source's runs
judged by bands built without that source: a framework the band has not seen), for the prior pool
leave-one-family-out (a hardware generation trainest has no run of), and the coverage of the
shipped bands on the vTrain single-node rows (a set of small GEMMs no efficiency was fitted on).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from trainest import band as B  # noqa: E402
from trainest.catalog import specs_dir  # noqa: E402
from trainest.validate import PUBLIC_SET, Case, compare, load_runs  # noqa: E402

COMMAND = "python tools/fit_bands.py"
VTRAIN_SET = "vtrain-single-node"
# Hardware of one architecture generation: a group of their runs together says how the model does on it.
FAMILIES = {
    "nvidia-volta": ("v100-sxm2-32gb",),
    "nvidia-ampere": ("a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie"),
    "nvidia-hopper": ("h100-sxm", "h100-pcie", "h100-96gb-500w", "h200-sxm", "h800-sxm", "gh200"),
    "nvidia-blackwell": ("b200", "b300", "gb200", "gb300"),
    "google-tpu": ("tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x"),
    "amd-cdna": ("mi250x", "mi300x", "mi325x", "mi355x"),
    "intel-gaudi": ("gaudi2", "gaudi3"),
    "aws-trainium": ("trainium1", "trainium2", "trainium3"),
}
FAMILY_OF = {hw: family for family, names in FAMILIES.items() for hw in names}
REL_TOL = 2e-3            # --check: the ratios are written to 4 decimals; last-digit noise of numpy is fine


def residual(case: Case, predicted_step_s: float) -> B.Residual:
    s = case.scenario
    return B.Residual(run_id=case.id, hardware=s.hardware.name, family=FAMILY_OF.get(s.hardware.name, ""),
                      scale=B.scale_bucket(s.devices, s.devices_per_node),
                      arch=B.arch_of(s.model),
                      ratio=_measured_step_s(case) / predicted_step_s)


def _measured_step_s(case: Case) -> float:
    from trainest.validate import step_time_s_from_metric
    return step_time_s_from_metric(case)


def pools() -> tuple[dict[str, list[B.Residual]], dict[str, str]]:
    """({pool: residuals}, {run id: source}) of the public runs."""
    import fit_priors as fd

    import import_hardware as ih

    cases = load_runs(run_set=PUBLIC_SET).cases
    own_blocks = ih.fitted_blocks(specs_dir() / "hardware")
    holdout, prior = [], []
    priors: dict[str, object] = {}
    for c in cases:
        hw = c.scenario.hardware
        if hw.efficiency.fitted and not fd.in_fit_set(c.id):
            holdout.append(residual(c, compare(c).predicted_step_s))
        # the prior an uncalibrated device ships with: the median of the other fitted devices of its group
        if hw.name not in priors:         # (not setdefault: its default would be built for every run)
            priors[hw.name] = fd.unseen_prior_hardware(hw, own_blocks)
        prior_hw = priors[hw.name]
        prior.append(residual(c, compare(c, prior_hw).predicted_step_s))   # type: ignore[arg-type]
    return {"holdout": holdout, "prior": prior}, {c.id: c.source for c in cases}


def _covered(r: B.Residual, groups: dict[str, list[float]], calibrated: bool) -> tuple[bool, float] | None:
    pool = "holdout" if calibrated else "prior"
    b = B.lookup({pool: groups}, hardware=r.hardware, family=r.family, scale=r.scale, arch=r.arch,
                 calibrated=calibrated)
    if b.runs == 0:
        return None
    return b.low_ratio <= r.ratio <= b.high_ratio, b.coverage


def held_out_coverage(residuals: list[B.Residual], calibrated: bool,
                      left_out: Callable[[B.Residual], object]) -> dict[str, float]:
    """Coverage of bands built without the runs that share `left_out(r)` with each run r (its id:
    leave-one-out; its source: leave-one-source-out): {runs, covered, coverage, claimed}."""
    hits, claims = [], []
    keys = {left_out(r) for r in residuals}
    for key in sorted(keys, key=str):
        rest = [r for r in residuals if left_out(r) != key]
        groups = B.build_groups(rest)
        for r in residuals:
            if left_out(r) != key:
                continue
            got = _covered(r, groups, calibrated)
            if got is not None:
                hits.append(got[0])
                claims.append(got[1])
    n = len(hits)
    return {"runs": n, "covered": sum(hits), "coverage": round(sum(hits) / n, 4) if n else 0.0,
            "claimed": round(sum(claims) / n, 4) if n else 0.0}


WIDENINGS = tuple(1.0 + 0.05 * k for k in range(81))   # candidate factors, 1 to 5


def unseen_widening(residuals: list[B.Residual]) -> tuple[float, float]:
    """(factor, coverage): the smallest factor of WIDENINGS by which the prior pool's broad bands
    (band.BROAD_LEVELS) must widen to cover COVERAGE of the runs of a family left out of them (each
    family judged by bands built from the others), and the coverage it reaches."""
    family = {r.run_id: r.family or r.hardware for r in residuals}
    trials = []
    for f in sorted(set(family.values())):
        rest = B.build_groups([r for r in residuals if family[r.run_id] != f])
        broad = {k: v for k, v in rest.items() if k.startswith(f"{B.ANY}|{B.ANY}|")}
        trials.append((broad, [r for r in residuals if family[r.run_id] == f]))
    coverage = 0.0
    for w in WIDENINGS:
        hits = []
        for broad, runs in trials:
            table = {k: B.widened(v, w) for k, v in broad.items()}
            for r in runs:
                got = _covered(r, table, calibrated=False)
                if got is not None:
                    hits.append(got[0])
        coverage = sum(hits) / len(hits)
        if coverage >= B.COVERAGE:
            return w, coverage
    return WIDENINGS[-1], coverage


def vtrain_coverage(doc: dict) -> dict[str, float]:
    """Coverage of the shipped bands on the vTrain single-node rows (outside the public pools)."""
    cases = load_runs(run_set=VTRAIN_SET).cases
    hits = []
    for c in cases:
        r = residual(c, compare(c).predicted_step_s)
        b = B.lookup(doc["groups"], hardware=r.hardware, family=doc["families"].get(r.hardware, ""), scale=r.scale,
                     arch=r.arch, calibrated=bool(c.scenario.hardware.efficiency.fitted))
        hits.append(b.low_ratio <= r.ratio <= b.high_ratio)
    return {"runs": len(hits), "covered": sum(hits), "coverage": round(sum(hits) / len(hits), 4) if hits else 0.0}


def document() -> dict:
    """The specs/bands.json document for the current model, runs and efficiencies."""
    residuals, source_of = pools()
    doc: dict = {
        "format": B.BANDS_FORMAT,
        "generated_by": COMMAND,
        "method": "split-conformal interval of measured/predicted step time per group (trainest/band.py)",
        "coverage": B.COVERAGE,
        "min_group_runs": B.MIN_GROUP_RUNS,
        "pools": {k: {"about": B.POOLS[k], "runs": len(v)} for k, v in residuals.items()},
        "families": dict(sorted(FAMILY_OF.items())),
        "groups": {pool: B.build_groups(rs) for pool, rs in residuals.items()},
    }
    checks: dict = {}
    for pool, rs in residuals.items():
        calibrated = pool == "holdout"
        checks[pool] = {"leave_one_out": held_out_coverage(rs, calibrated, lambda r: r.run_id),
                        "leave_one_source_out": held_out_coverage(rs, calibrated, lambda r: source_of[r.run_id])}
    # an uncalibrated hardware with no run of its family: bands built without its family's runs (the
    # transformer runs: the hybrid Mamba-2 runs are all of one source and family, predicted not fitted, and
    # their own groups carry their errors)
    transformer = [r for r in residuals["prior"] if r.arch != "hybrid"]
    checks["prior"]["leave_one_family_out"] = held_out_coverage(transformer, False, lambda r: r.family or r.hardware)
    factor, reached = unseen_widening(transformer)
    doc["unseen_family_widening"] = round(factor, 2)
    doc["groups"][B.UNSEEN] = {k: [*B.widened(v, factor)[:2], round(reached, 4), v[3]]
                               for k, v in doc["groups"]["prior"].items() if k.startswith(f"{B.ANY}|{B.ANY}|")}
    checks["prior"]["leave_one_family_out_widened"] = {"factor": round(factor, 2), "coverage": round(reached, 4)}
    checks[VTRAIN_SET] = vtrain_coverage(doc)
    doc["checks"] = checks
    return doc


def markdown(doc: dict) -> str:
    """The error-band section of docs/validation.md: the pools, the groups, what they cover out of sample."""
    c = doc.get("checks", {})
    if not c:
        return f"specs/bands.json is missing: run `{COMMAND}`."
    h, p = c["holdout"], c["prior"]
    lines = [
        f"Every estimate carries an error band (`trainest/band.py`): the split-conformal {doc['coverage']:.0%} "
        f"interval of measured/predicted step time of validated runs like it, from `specs/bands.json` "
        f"(written by `{COMMAND}`, which `{'python tools/fit_defaults.py'}` runs after a refit). Calibrated hardware "
        f"takes its band from the {doc['pools']['holdout']['runs']} held-out runs, uncalibrated hardware from "
        f"all {doc['pools']['prior']['runs']} runs predicted with the prior efficiencies; a group needs "
        f"{doc['min_group_runs']} runs, else the next broader one (hardware and scale, hardware, family and "
        f"scale, family, scale, all).",
        "",
        "| what the band is checked on | runs | inside the band | the band claims |",
        "|---|---:|---:|---:|",
        f"| held-out runs, each left out of its own band (leave-one-out) | {h['leave_one_out']['runs']} | "
        f"{h['leave_one_out']['coverage']:.1%} | {h['leave_one_out']['claimed']:.1%} |",
        f"| held-out runs, each source left out of the bands (a framework the band has not seen) | "
        f"{h['leave_one_source_out']['runs']} | {h['leave_one_source_out']['coverage']:.1%} | "
        f"{h['leave_one_source_out']['claimed']:.1%} |",
        f"| prior efficiencies (uncalibrated hardware), leave-one-out | {p['leave_one_out']['runs']} | "
        f"{p['leave_one_out']['coverage']:.1%} | {p['leave_one_out']['claimed']:.1%} |",
        f"| prior, each source left out | {p['leave_one_source_out']['runs']} | "
        f"{p['leave_one_source_out']['coverage']:.1%} | {p['leave_one_source_out']['claimed']:.1%} |",
        f"| prior, each hardware family left out (unwidened) | {p['leave_one_family_out']['runs']} | "
        f"{p['leave_one_family_out']['coverage']:.1%} | {p['leave_one_family_out']['claimed']:.1%} |",
        f"| prior, each family left out, broad bands widened ×{doc['unseen_family_widening']:g} | "
        f"{p['leave_one_family_out']['runs']} | {p['leave_one_family_out_widened']['coverage']:.1%} | 80% |",
        f"| vTrain single-node rows (not in either pool) | {c[VTRAIN_SET]['runs']} | "
        f"{c[VTRAIN_SET]['coverage']:.1%} | ~80% |",
        "",
        "The band holds for runs like the published ones. An uncalibrated hardware of a family with no run "
        "gets the broad prior bands widened so that they cover 80 % of a left-out family's runs. The vTrain "
        f"rows (small GEMMs no published run resembles, in neither pool; see below) fall inside the A100's band "
        f"in {c[VTRAIN_SET]['coverage']:.0%} of the runs: their errors are smaller than the public runs' now, but "
        "the band is no guarantee for a regime that is not in its pools.",
        "",
        "| pool | group (hardware · family · scale · architecture) | runs | low | high | expected coverage |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for pool, groups in doc["groups"].items():
        for key, (low, high, cov, runs) in groups.items():
            lines.append(f"| {pool} | {key.replace('|', ' · ')} | {runs} | {low:.3f} | {high:.3f} | {cov:.1%} |")
    return "\n".join(lines)


def text_of(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def _numbers(node: object) -> Iterable[float]:
    if isinstance(node, dict):
        for v in node.values():
            yield from _numbers(v)
    elif isinstance(node, list):
        for v in node:
            yield from _numbers(v)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield float(node)


def same(a: dict, b: dict) -> bool:
    """Equal structure and numbers within REL_TOL (ratios are rounded to 4 decimals)."""
    def shape(node: object) -> object:
        if isinstance(node, dict):
            return {k: shape(v) for k, v in node.items()}
        if isinstance(node, list):
            return [shape(v) for v in node]
        return "#" if isinstance(node, (int, float)) and not isinstance(node, bool) else node

    if shape(a) != shape(b):
        return False
    pairs = zip(_numbers(a), _numbers(b), strict=True)
    return all(abs(x - y) <= REL_TOL * max(abs(x), abs(y), 1e-12) for x, y in pairs)


def stale_paths(shipped: object, fresh: object, path: str = "") -> list[str]:
    """Where `fresh` differs from `shipped` (numbers beyond REL_TOL, anything else exactly): what
    --check prints when the shipped file is stale."""
    if isinstance(shipped, dict) and isinstance(fresh, dict):
        out = [f"{path}.{k}: {'missing' if k not in fresh else 'new'}" for k in sorted(set(shipped) ^ set(fresh))]
        for k in [k for k in shipped if k in fresh]:
            out += stale_paths(shipped[k], fresh[k], f"{path}.{k}")
        return out
    if isinstance(shipped, list) and isinstance(fresh, list):
        if len(shipped) != len(fresh):
            return [f"{path}: {len(shipped)} items -> {len(fresh)}"]
        pairs = enumerate(zip(shipped, fresh, strict=True))
        return [d for i, (a, b) in pairs for d in stale_paths(a, b, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(shipped, numbers) and isinstance(fresh, numbers) and not isinstance(shipped, bool) \
            and not isinstance(fresh, bool):
        close = abs(shipped - fresh) <= REL_TOL * max(abs(shipped), abs(fresh), 1e-12)
        return [] if close else [f"{path}: {shipped!r} -> {fresh!r}"]
    return [] if shipped == fresh else [f"{path}: {shipped!r} -> {fresh!r}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with specs/bands.json; write nothing")
    args = ap.parse_args(argv)
    doc = document()
    target = specs_dir() / B.BANDS_FILE
    for pool in ("holdout", "prior"):
        loo = doc["checks"][pool]["leave_one_out"]
        lso = doc["checks"][pool]["leave_one_source_out"]
        print(f"{pool:8s}: {doc['pools'][pool]['runs']} runs, {len(doc['groups'][pool])} groups; leave-one-out "
              f"coverage {loo['coverage']:.1%} (claimed {loo['claimed']:.1%}, {loo['runs']} runs); "
              f"leave-one-source-out {lso['coverage']:.1%}"
              + (f"; leave-one-family-out {doc['checks'][pool]['leave_one_family_out']['coverage']:.1%}"
                 if pool == "prior" else ""), file=sys.stderr)
    print(f"unseen family: prior broad bands widened x{doc['unseen_family_widening']} -> leave-one-family-out "
          f"coverage {doc['checks']['prior']['leave_one_family_out_widened']['coverage']:.1%}", file=sys.stderr)
    v = doc["checks"][VTRAIN_SET]
    print(f"{VTRAIN_SET}: {v['coverage']:.1%} of {v['runs']} rows inside their band", file=sys.stderr)
    if args.check:
        current = json.loads(target.read_text(encoding="utf-8")) if target.exists() else {}
        if not same(current, doc):
            diffs = stale_paths(current, doc) if current else ["the file is missing"]
            print(f"{target} is stale ({len(diffs)} differences, e.g. {'; '.join(diffs[:3])}): the error bands no "
                  f"longer match the model and the runs; run {COMMAND} and commit specs/bands.json", file=sys.stderr)
            return 1
        print(f"{target}: up to date", file=sys.stderr)
        return 0
    target.write_text(text_of(doc), encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
