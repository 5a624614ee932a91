"""docs/model.md (an index) and its chapters docs/model/*.md against the code: every `Code:` pointer names
something that exists, and every public function of the model's modules is documented there (and has a docstring)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest
from helpers import model_doc

ROOT = Path(__file__).resolve().parent.parent
# the model documentation: docs/model.md's introduction and the chapters it indexes (docs/model/*.md), concatenated
MODEL_DOC = model_doc().text()
# the modules that hold the model's formulas: each public function must appear in docs/model.md
MODEL_MODULES = ("trainest.step.flops", "trainest.step.roofline", "trainest.step.rates", "trainest.step.layer", "trainest.step.collectives",
                 "trainest.step.traffic", "trainest.step.overlap", "trainest.step.schedule", "trainest.step.optimizer",
                 "trainest.step.compose", "trainest.step.finetune", "trainest.step.offload", "trainest.step.activations",
                 "trainest.step.ops", "trainest.step.moe", "trainest.step.mla", "trainest.memory", "trainest.precision",
                 "trainest.training")
PATH = re.compile(r"`(trainest/[\w/]+\.py)(?::\s*([A-Za-z_][\w.]*))?[^`]*`")
NEXT = re.compile(r"\s*(?:,|\(|\)|→|and\b)?\s*`([A-Za-z_][\w.]*)(?:\([^`]*\))?`")


def code_pointers() -> list[tuple[str, str]]:
    """(module path, name) for every name a `Code:` bullet of docs/model.md points at: the name in
    the path's own backticks and the names chained after it (`a`, `b` (`c`) → `D`), until other text."""
    bullets, current = [], None
    for line in MODEL_DOC.splitlines():
        if "Code:" in line:
            current = [line[line.index("Code:"):]]
            bullets.append(current)
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line)
        else:
            current = None
    pointers = []
    for bullet in (" ".join(b) for b in bullets):
        for match in PATH.finditer(bullet):
            path, pos = match.group(1), match.end()
            names = [match.group(2)] if match.group(2) else []
            while (more := NEXT.match(bullet, pos)) is not None:
                names.append(more.group(1))
                pos = more.end()
            pointers += [(path, n) for n in names]
    return pointers


def resolve(path: str, name: str) -> bool:
    module = importlib.import_module(path[:-3].replace("/", "."))
    obj: object = module
    for part in name.split("."):
        if not hasattr(obj, part):
            fields = getattr(obj, "__dataclass_fields__", {})
            return part in fields
        obj = getattr(obj, part)
    return True


def test_code_pointers_are_found():
    assert len(code_pointers()) > 40


@pytest.mark.parametrize(("path", "name"), code_pointers(), ids=lambda x: str(x))
def test_every_code_pointer_names_something_that_exists(path, name):
    assert (ROOT / path).is_file(), f"docs/model.md names {path}, which does not exist"
    assert resolve(path, name), f"docs/model.md names {path}: {name}, which does not exist"


def public_functions() -> list[tuple[str, str, object]]:
    out = []
    for module_name in MODEL_MODULES:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if getattr(obj, "__module__", None) != module_name:
                continue      # imported, documented where it is defined
            out.append((module_name, name, obj))
    return out


@pytest.mark.parametrize(("module", "name", "obj"), public_functions(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_public_model_function_is_documented(module, name, obj):
    assert re.search(rf"`[^`]*\b{name}\b[^`]*`", MODEL_DOC), f"{module}.{name} is not named in docs/model.md"
    assert inspect.getdoc(obj), f"{module}.{name} has no docstring"


def test_no_stale_references():
    assert "DESIGN.md" not in MODEL_DOC
    assert "trainest/step.py" not in MODEL_DOC and "trainest/comm.py" not in MODEL_DOC
    assert "recompute code 0/1/2" not in MODEL_DOC


def test_inputs_reference_is_generated_from_the_knob_table():
    """docs/inputs.md is what `python tools/knobs_doc.py` writes from trainest/knobs.py."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("knobs_doc", ROOT / "tools" / "knobs_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "inputs.md").read_text(encoding="utf-8") == module.document(), \
        "docs/inputs.md is stale: run python tools/knobs_doc.py"
    for file, text in module.schema_texts().items():
        assert file.read_text(encoding="utf-8") == text, f"{file.name}'s knob properties are stale: run " \
                                                         f"python tools/knobs_doc.py"


def test_the_inputs_echo_has_a_knob_for_every_key():
    """The JSON `inputs` echo (scenario_mapping) writes only keys of the knob table (and the model and
    the derived list), so it loads again as a scenario."""
    from trainest.knobs import FINETUNE, KNOBS, PARALLEL, SCENARIO
    from trainest.scenario import scenario_from_mapping, scenario_mapping
    for finetune in ("full", "qlora"):
        echo = scenario_mapping(scenario_from_mapping({"model": "llama3-8b", "devices": 8, "finetune": finetune}, "t"))
        top = {k.yaml_key for k in KNOBS if k.group == SCENARIO} | {"parallel", "finetune", "derived", "micro_batches"}
        assert set(echo) <= top, set(echo) - top
        assert set(echo["parallel"]) <= {k.yaml_key for k in KNOBS if k.group == PARALLEL}
        assert set(echo["finetune"]) <= {k.yaml_key for k in KNOBS if k.group == FINETUNE}


# --------------------------------------------------------------- every file pointer, everywhere in model.md

# files docs/model.md names that are not this repository's (the sources' code it cites)
EXTERNAL_FILES = {"prepare_packed_ft_dataset.py", "megatron/core/pipeline_parallel/schedules.py", "parallelize_llama.py",
                  "theoretical_memory_usage.py", "tensor_parallel/cross_entropy.py", "train.py",
                  "models/mpt/modeling_mpt.py", "losses/cross_entropy.py", "transformer/moe/experts.py",
                  "fusions/fused_bias_geglu.py", "ops/fused/grouped_mlp.py", "pytorch/ops/fused/grouped_mlp.py",
                  "transformer/moe/token_dispatcher.py", "transformer/moe/fused_a2a.py", "multi_token_prediction.py", "moe.py",
                  "transformer_engine/pytorch/attention.py", "ssd_combined.py", "ssm/mamba_mixer.py", "models/gpt/gpt_model.py",
                  "models/mamba/mamba_model.py", "transformer/transformer_block.py",
                  "internlm/solver/optimizer/hybrid_zero_optim.py", "configs/7B_sft.py",
                  "models/gpt_oss/gpt_oss_bridge.py", "attention/dot_product_attention/utils.py",
                  "models/llama/modeling_llama.py", "recipes/full_finetune_single_device.py", "trainer.py",
                  "modules/transformer.py", "torch/distributed/tensor/parallel/style.py",
                  "torch/distributed/tensor/parallel/loss.py",
                  "torch/distributed/pipelining/stage.py", "torch/distributed/pipelining/schedules.py",
                  "torch/distributed/tensor/experimental/_attention.py", "models/llama3/model/model.py",
                  "torchtitan/config_manager.py",
                  # megatron-core 0.14.0/0.16.1 and Transformer Engine 2.8.0/2.14.0, read for the MoE padding count
                  "megatron/core/transformer/moe/experts.py", "pytorch/module/fp8_padding.py", "fp8_unpadding.py",
                  "grouped_linear.py", "distributed_data_parallel.py"}
REPO_FILES = sorted(str(p.relative_to(ROOT)) for folder in ("trainest", "tools", "bench", "tests")
                    for p in (ROOT / folder).rglob("*.py"))
FILE_POINTER = re.compile(r"`([\w/]+\.py)(?::\s*([^`]*))?`")


def _defined_names(path: Path) -> set[str]:
    """The top-level names a module defines or imports (functions, classes, assignments)."""
    import ast
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def file_pointers() -> list[tuple[str, str, str | None]]:
    """(chapter file:line, file, name or None) for every `file.py` and `file.py: name, name (...)` in docs/model.md,
    inside or outside a `Code:` bullet."""
    out = []
    for match in FILE_POINTER.finditer(MODEL_DOC):
        line = model_doc().locate(match.start())
        names = re.findall(r"[A-Za-z_][\w.]*", re.sub(r"\([^)]*\)", "", match.group(2) or ""))
        out += [(line, match.group(1), n) for n in names if n != "and"] or [(line, match.group(1), None)]
    return out


def test_every_file_docs_model_names_exists_and_defines_what_it_names():
    bad = []
    for line, path, name in file_pointers():
        found = [f for f in REPO_FILES if f == path or f.endswith("/" + path)]
        if not found:
            if path not in EXTERNAL_FILES:
                bad.append(f"{line}: {path} is no file of this repository (nor a known source's)")
            continue
        if name is None:
            continue
        file = found[0]
        if file.startswith("trainest/"):
            ok = resolve(file, name)
        else:
            ok = name.split(".")[0] in _defined_names(ROOT / file)
        if not ok:
            bad.append(f"{line}: {file} has no {name}")
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------ sections referenced by number exist

SECTIONS = set(re.findall(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", MODEL_DOC, re.M))


def test_the_step_package_map_names_every_module_and_a_section_that_exists():
    """trainest/step/__init__.py maps each module of the package to its part of docs/model.md."""
    import trainest.step
    doc = inspect.getdoc(trainest.step) or ""
    mapped = dict(re.findall(r"^\s*(\w+)\.py\s+§(\d+(?:\.\d+)*)", doc, re.M))
    modules = {p.stem for p in (ROOT / "trainest" / "step").glob("*.py") if p.stem != "__init__"}
    assert set(mapped) == modules, f"missing {sorted(modules - set(mapped))}, stale {sorted(set(mapped) - modules)}"
    assert not {s for s in mapped.values() if s not in SECTIONS}, "a section the map names is not in docs/model.md"


def test_every_docs_model_section_reference_exists():
    """`docs/model.md §x.y` anywhere in the code, the tests, the tools and the other docs names a section of it."""
    bad = []
    files = [ROOT / f for f in REPO_FILES] + [ROOT / "README.md", ROOT / "specs" / "README.md",
                                             *sorted((ROOT / "docs").glob("*.md")), *model_doc().chapter_files()]
    for path in files:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"docs/model\.md,? (§[\d.]+(?:(?:,| and) §[\d.]+)*)", text):
            for section in re.findall(r"§(\d+(?:\.\d+)*)", match.group(1)):
                if section not in SECTIONS:
                    bad.append(f"{path.relative_to(ROOT)}: docs/model.md §{section}")
    assert not bad, bad



# ------------------------------------------------ docs/model.md: an index of the chapter files docs/model/*.md

INDEX_LINK = re.compile(r"^(\s*)- \[(.+)\]\(model/([\w.-]+\.md)#([\w-]+)\)$", re.M)


def test_the_model_index_is_what_its_tool_writes():
    """docs/model.md's table of contents is what `python tools/model_doc.py` writes from the chapters."""
    assert (ROOT / "docs" / "model.md").read_text(encoding="utf-8") == model_doc().document(), \
        "docs/model.md's contents are stale: run python tools/model_doc.py"


def test_the_model_index_links_every_chapter_and_section_to_its_file_and_anchor():
    """Every heading of every chapter file (`## N.`, `### N.M`, `#### N.M.K` and the unnumbered ones) has its line
    in docs/model.md, linking its file and anchor; every link there names a heading that exists; section N.M
    lives in the file of chapter N (`NN-*.md`), so "docs/model.md §15.11" is one click from the index."""
    index = (ROOT / "docs" / "model.md").read_text(encoding="utf-8")
    listed = {(m.group(3), m.group(4)): m.group(2) for m in INDEX_LINK.finditer(index)}
    headings = {(p.name, slug): title for p in model_doc().chapter_files()
                for _, title, slug in model_doc().headings(p)}
    assert len(headings) > 80
    assert set(headings) == set(listed), (sorted(set(headings) - set(listed)), sorted(set(listed) - set(headings)))
    for (file, _), title in headings.items():
        number = re.match(r"(\d+)(?:\.\d+)*\.? ", title)
        assert number is None or file.startswith(f"{int(number.group(1)):02d}-"), f"{title} is in {file}"
    assert SECTIONS <= {re.match(r"[\d.]*", t).group(0).rstrip(".") for t in headings.values()}


def test_every_relative_link_of_the_model_documentation_resolves():
    """Links from docs/model.md and its chapters to other files of the repository (and to their headings) resolve."""
    bad = []
    for path in (ROOT / "docs" / "model.md", *model_doc().chapter_files()):
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, slug = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            if not resolved.exists():
                bad.append(f"{path.relative_to(ROOT)}: {target}")
            elif slug and slug not in {s for _, _, s in model_doc().headings(resolved)}:
                bad.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not bad, bad


# ------------------------------------------------------- specs/README.md's schemas against the loaders

def _schema_blocks() -> dict[str, tuple[str, dict]]:
    """specs/README.md's three YAML examples, by file kind: (the section's text, the parsed example)."""
    import yaml
    text = (ROOT / "specs" / "README.md").read_text(encoding="utf-8")
    heads = [m.start() for m in re.finditer(r"^## ", text, re.M)] + [len(text)]
    out = {}
    for start, end in zip(heads, heads[1:]):
        section = text[start:end]
        kind = re.match(r"## (\w+)/", section)
        block = re.search(r"```yaml\n(.*?)```", section, re.S)
        if kind and block:
            out[kind.group(1)] = (section, yaml.safe_load(block.group(1)))
    return out


def _schema_pairs():
    from trainest import hardware as H
    from trainest import models as M
    from trainest.knobs import FINETUNE_KEYS, PARALLEL_KEYS
    from trainest.scenario import RUN_ONLY_KEYS, SCENARIO_KEYS
    from trainest.validate import MEASURED_KEYS, RUNS_FILE_KEYS, RUNS_FILE_OPTIONAL_KEYS
    blocks = _schema_blocks()
    hw_text, hw = blocks["hardware"]
    md_text, md = blocks["models"]
    runs_text, runs = blocks["runs"]
    run = runs["runs"][0]
    return [
        ("hardware", hw_text, hw, H.HW_REQUIRED + H.HW_OPTIONAL),
        ("hardware.peak_tflops", hw_text, hw["peak_tflops"], H.PRECISIONS),
        ("hardware.memory", hw_text, hw["memory"], H.MEMORY_REQUIRED + H.MEMORY_OPTIONAL),
        ("hardware.compute", hw_text, hw["compute"], H.COMPUTE_KEYS),
        ("hardware.system", hw_text, hw["system"], H.SYSTEM_KEYS),
        ("hardware.system.intra_node", hw_text, hw["system"]["intra_node"], H.INTRA_NODE_KEYS),
        ("hardware.host", hw_text, hw["host"], H.HOST_KEYS),
        ("hardware.host.link", hw_text, hw["host"]["link"], H.HOST_LINK_KEYS),
        ("hardware.efficiency", hw_text, hw["efficiency"], H.EFFICIENCY_KEYS + H.EFFICIENCY_OPTIONAL),
        ("model", md_text, md, M.MODEL_REQUIRED + M.MODEL_OPTIONAL),
        ("model.moe", md_text, md["moe"], M.MOE_REQUIRED + M.MOE_OPTIONAL),
        ("model.mla", md_text, md["mla"], M.MLA_REQUIRED + M.MLA_OPTIONAL),
        ("model.mtp", md_text, md["mtp"], M.MTP_REQUIRED + M.MTP_OPTIONAL),
        ("model.hybrid", md_text, md["hybrid"], M.HYBRID_REQUIRED + M.HYBRID_OPTIONAL),
        ("model.attention_window", md_text, md["attention_window"], M.WINDOW_REQUIRED + M.WINDOW_OPTIONAL),
        ("runs file", runs_text, runs, RUNS_FILE_KEYS + RUNS_FILE_OPTIONAL_KEYS),
        ("run / scenario", runs_text, run, SCENARIO_KEYS + RUN_ONLY_KEYS),
        ("run.parallel", runs_text, run["parallel"], PARALLEL_KEYS),
        ("run.finetune", runs_text, run["finetune"], FINETUNE_KEYS),
        ("run.measured", runs_text, run["measured"], MEASURED_KEYS),
    ]


@pytest.mark.parametrize(("what", "section", "example", "accepted"), _schema_pairs(), ids=lambda x: x if isinstance(x, str) and "\n" not in x else "")
def test_specs_readme_shows_only_keys_the_loader_accepts_and_names_every_key_it_accepts(what, section, example,
                                                                                           accepted):
    """Each YAML example of specs/README.md: a key it shows is one its loader (trainest/hardware.py,
    models.py, scenario.py, validate.py) accepts, and a key the loader accepts is named in that file
    kind's section (in the example, in its comments or in the text)."""
    shown = set(example)
    assert shown <= set(accepted), f"specs/README.md shows {what} keys the loader rejects: {sorted(shown - set(accepted))}"
    words = set(re.findall(r"\b\w+\b", section))
    unnamed = sorted(k for k in accepted if k not in words)
    assert not unnamed, f"{what} keys the loader accepts that specs/README.md does not name: {unnamed}"


def test_every_yaml_key_docs_inputs_lists_is_one_the_loaders_accept():
    """docs/inputs.md's YAML column: a scenario key, a parallel or finetune key, or (a shape override) the
    model mapping's own key, `model.moe.<key>` and `model.attention_window.size` included; and every
    scenario key the loader accepts is listed."""
    from trainest import models as M
    from trainest.knobs import FINETUNE_KEYS, PARALLEL_KEYS
    from trainest.scenario import SCENARIO_KEYS
    inputs = (ROOT / "docs" / "inputs.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `--[^|]*\| `([\w.]+)` \|", inputs, re.M)
    assert len(listed) > 40
    accepted = ({k for k in SCENARIO_KEYS if k not in ("parallel", "finetune")} | {"finetune"}
                | {f"parallel.{k}" for k in PARALLEL_KEYS} | {f"finetune.{k}" for k in FINETUNE_KEYS}
                | {f"model.{k}" for k in M.MODEL_REQUIRED + M.MODEL_OPTIONAL}
                | {f"model.moe.{k}" for k in M.MOE_REQUIRED + M.MOE_OPTIONAL}
                | {f"model.attention_window.{k}" for k in M.WINDOW_REQUIRED + M.WINDOW_OPTIONAL})
    assert not [k for k in listed if k not in accepted], "docs/inputs.md lists keys no loader accepts"
    assert not [k for k in SCENARIO_KEYS if k not in ("parallel", "finetune") and k not in listed]
    assert not [k for k in PARALLEL_KEYS if f"parallel.{k}" not in listed]


def test_every_module_constant_and_class_docs_model_names_exists():
    """`module.CONSTANT` and `module.Class[.attr]` in docs/model.md (`calibrate.BOUNDS`, `catalog.Efficiency`,
    `choices.ATTENTIONS`) name what the module has (lower-case `a.b` are JSON and YAML paths, not checked)."""
    modules = {p.stem: str(p.relative_to(ROOT)) for folder in ("step", ".")      # trainest/x.py before step/x.py
               for p in (ROOT / "trainest" / folder).glob("*.py") if p.stem != "__init__"}
    bad = []
    for match in re.finditer(r"`([a-z_]+)\.([A-Z][\w.]*)`", MODEL_DOC):
        module, name = match.groups()
        if module in modules and not resolve(modules[module], name):
            bad.append(f"{model_doc().locate(match.start())}: {module}.{name}")
    assert not bad, bad


def test_every_test_docs_model_cites_exists():
    """The `Tests:` of docs/model.md name test functions (or test modules) that exist."""
    defined = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        defined.add(path.stem)
        defined |= set(re.findall(r"^\s*def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    cited = set(re.findall(r"\b(test_[a-z0-9_]+)", MODEL_DOC))
    assert len(cited) > 100
    assert not sorted(cited - defined), "docs/model.md cites tests that do not exist"


def test_cli_reference_is_current():
    """docs/cli.md is what `python tools/cli_doc.py` writes from the command line (its options from the knob
    table, grouped by the table's panels)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("cli_doc", ROOT / "tools" / "cli_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == module.document(), \
        "docs/cli.md is stale: run python tools/cli_doc.py"


def test_every_knob_is_in_a_help_panel():
    from trainest.knobs import COMPARE_OPTIONS, ESTIMATE_OPTIONS, PANEL_OF, PANELS, PLAN_OPTIONS, SWEEP_OPTIONS
    knobs = [k for table in (ESTIMATE_OPTIONS, PLAN_OPTIONS, COMPARE_OPTIONS, SWEEP_OPTIONS) for k in table]
    names = {k.name for k in knobs if not k.help_panel}      # a knob's own help_panel is its panel
    assert not names - set(PANEL_OF), f"knobs in no panel: {sorted(names - set(PANEL_OF))}"
    assert len(PANEL_OF) == sum(len(v) for v in PANELS.values()), "a knob in two panels"
    assert not {k.name for k in knobs if k.help_panel} & set(PANEL_OF), "a knob in two panels"
    assert {k.help_panel for k in knobs if k.help_panel} <= set(PANELS)
