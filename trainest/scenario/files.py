"""A scenario file loaded: YAML read strictly, a runs file refused, relative paths made the file's own, an
`inputs` echo's derived values dropped so that they are derived again (`underive`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainest import fields as F
from trainest.errors import SpecError, at
from trainest.scenario.checks import check_scenario_keys


def load_scenario_file(path: str) -> dict[str, Any]:
    """Read a scenario YAML (a mapping of scenario keys); validation happens in scenario_from_mapping. A
    runs file (its `runs:` list) is refused with the command that reads it. Paths in it (model, hardware)
    are the file's (`relative_to_file`); an `inputs` echo's derived values are derived again (`underive`)."""
    if not path.strip():     # Path('') is the directory '.'
        raise SpecError(f"scenario file {path!r} is an empty name; give a scenario YAML file")
    data = F.load_yaml_mapping(Path(path), "scenario")
    if isinstance(data.get("runs"), list):
        raise SpecError(f"scenario {path!r} is a runs file (a `runs:` list of measured runs); an estimate takes one "
                        f"scenario: compare them all with `trainest validate --runs {path}`, or give one run's keys")
    check_scenario_keys(data, f"scenario {path!r}")     # every command that reads it alike
    return underive(relative_to_file(data, Path(path).parent), f"scenario {path!r}")


# an echo's derived values kept as given on a reload: the echo carries the resolved model (its shape overrides
# included) and the hardware's file, which an option (--model, --hardware) replaces anyway
KEPT_WHEN_DERIVED = ("model", "hardware")


BATCH_KEYS = ("global_batch", "micro_batch", "parallel.dp")   # what micro_batches = B / (d·b) is derived from


def underive(data: dict[str, Any], where: str) -> dict[str, Any]:
    """A scenario mapping without the values its `derived` list names (an `inputs` echo of `--json`), so that
    they are derived again for the scenario loaded, with its overrides: an echo reloaded alone gives the same
    scenario; with `--hardware b200` its price, node size and framework are b200's, with `--model` its tokens
    the new model's, with `--devices` its dp. A listed value that is not what the file's other values derive
    (an edited echo: `devices: 16`, `seq_len: 4096`) is the user's: it is kept, validated and no longer derived
    (`edited_values`). The echoed micro_batches must still agree with the file's own batch, and go with the
    values it is derived from."""
    listed = data.get("derived")
    if listed is None:
        return data
    if not isinstance(listed, list) or not all(isinstance(k, str) for k in listed):
        raise SpecError(f"{at(where, 'derived')}: {F.show(listed)} must be a list of the names of derived values (the "
                        f"`inputs.derived` of --json), e.g. [tokens, price_per_hour]")
    given_par = data.get("parallel")
    par: dict[str, Any] = given_par if isinstance(given_par, dict) else {}
    echoed = data.get("micro_batches")
    if echoed is not None and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                  for v in (data.get("global_batch"), data.get("micro_batch"), par.get("dp"))):
        expected = data["global_batch"] // (par["dp"] * data["micro_batch"])
        if F.integer(echoed, at(where, "micro_batches")) != expected:
            raise SpecError(f"{at(where, 'micro_batches')}: {echoed!r} is derived and must equal global_batch / "
                            f"(dp · micro_batch) = {expected}; remove it")
    derivable = [k for k in listed if k not in KEPT_WHEN_DERIVED]
    plain = _without(data, derivable, full_shard=True)
    edited = edited_values(data, plain, derivable, where)
    return plain if not edited else _without(data, [k for k in derivable if k not in edited],
                                             full_shard=not any(k.startswith("parallel.") for k in edited))


def _without(data: dict[str, Any], dropped: list[str], *, full_shard: bool) -> dict[str, Any]:
    """`data` without `derived` and the values `dropped` names (`parallel.<key>` inside `parallel`,
    `finetune.<key>` inside `finetune`: any dotted name inside its section); dp_shard, echoed as dp when the ZeRO
    state is sharded over all of dp, goes with dp (`full_shard`); micro_batches with the values it is derived
    from (BATCH_KEYS)."""
    out = {k: v for k, v in data.items() if k != "derived" and k not in dropped}
    nested: dict[str, set[str]] = {}
    for name in dropped:
        section, dot, key = name.partition(".")
        if dot:
            nested.setdefault(section, set()).add(key)
    for section, keys in nested.items():
        inner = data.get(section)
        if not isinstance(inner, dict):
            continue
        if section == "parallel":
            whole = full_shard and "dp" in keys and inner.get("dp_shard") == inner.get("dp")
            keys = keys | ({"dp_shard"} if whole else set())
        out[section] = {k: v for k, v in inner.items() if k not in keys}
    if any(k in dropped for k in BATCH_KEYS):
        out.pop("micro_batches", None)
    return out


_ABSENT = object()


def _value_at(mapping: dict[str, Any], name: str) -> Any:
    """The value of a derived name (`devices`, `parallel.dp`, `finetune.rank`) in a scenario mapping."""
    value: Any = mapping
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def edited_values(data: dict[str, Any], plain: dict[str, Any], derivable: list[str], where: str) -> list[str]:
    """The names in `derivable` whose value in `data` is not the one the rest of the file derives (the scenario
    of `plain`, `data` without them): values edited after the echo was written. When the rest does not make a
    scenario on its own, none can be told from an edit: every value given is kept (and validated)."""
    from trainest.scenario.build import scenario_from_mapping
    from trainest.scenario.echo import scenario_mapping
    given = [k for k in derivable if _value_at(data, k) is not _ABSENT]
    try:
        again = scenario_mapping(scenario_from_mapping(plain, where))
    except SpecError:
        return given
    return [k for k in given if _value_at(data, k) != _value_at(again, k)]


PATH_KEYS = ("model", "hardware")


def relative_to_file(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """`data` with its relative model and hardware paths (`prof.yaml`, `../cfg/config.json`) made relative to
    `folder`, the folder of the file that holds them, so that the file means the same from any working
    directory. Catalog names (`h100-sxm`, `llama3-8b`) and absolute paths stay."""
    from trainest.catalog import is_catalog_name, is_hub_name
    out = dict(data)
    for key in PATH_KEYS:
        value = data.get(key)
        if not isinstance(value, str) or not value.strip() or is_catalog_name(key, value):
            continue
        path = Path(value.strip()).expanduser()
        named_as_path = "/" in value or value.lower().endswith((".yaml", ".yml", ".json")) or (folder / path).exists()
        if path.is_absolute() or not named_as_path:    # (a mistyped name keeps its did-you-mean error)
            continue
        if key == "model" and is_hub_name(value.strip()) and not (folder / path).exists():
            continue     # a Hugging Face Hub id (meta-llama/Meta-Llama-3-8B): load_model says what to give
        if (folder / path).exists() or not path.exists():   # (a path that only the working directory has: as given)
            out[key] = str(folder / path)
    return out
