"""Ablation sets: run several configs on the same questions and tabulate them as the paper does.

    name: paper-ablation
    baseline: full                 # the variant Δ is measured against (default: the first)
    variants: [full.yaml, no_sql_reflection.yaml, no_entailment.yaml, no_retrieval_loop.yaml, single_pass.yaml]

Variant paths are relative to the set file. ``--set``/``--limit`` apply to every variant, so the
variants always see the same questions. Each variant evaluates into ``<out>/<variant name>`` (and
so resumes there), and is a live MLflow run nested under the set's run, which starts before the
first variant and ends with the set (``experiments.tracking``; a resumed set continues the same
runs). The set writes
``ablation.md`` (Simple / Moderate / Challenging / Overall / Δ vs full), ``ablation.json``,
``charts/ablation.png`` and ``charts/accuracy_vs_cost.png``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable


from reflect_sql.errors import UserError
from reflect_sql.files import read_yaml_mapping
from reflect_sql.experiments import tracking
from reflect_sql.experiments.config import EvalConfig, load_config
from reflect_sql.experiments.report import ablation_bar_chart, ablation_markdown, accuracy_cost_chart
from reflect_sql.experiments.runner import run_eval


def load_ablation(path: str | Path, sets: list[str] | None = None, limit: int | None = None) -> tuple[str, str, list[EvalConfig]]:
    path = Path(path)
    data = read_yaml_mapping(path, "ablation file")
    if not isinstance(data.get("variants"), list) or not data["variants"]:
        raise UserError(f"{path}: an ablation set needs a non-empty 'variants' list of config files")
    unknown = set(data) - {"name", "baseline", "variants", "description"}
    if unknown:
        raise UserError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    configs = [load_config(path.parent / str(v), sets, limit=limit) for v in data["variants"]]
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise UserError(f"{path}: variant names repeat ({', '.join(names)}); give each config its own name")
    baseline = str(data.get("baseline") or names[0])
    if baseline not in names:
        raise UserError(f"{path}: baseline {baseline!r} is not one of the variants ({', '.join(names)})")
    selections = {json.dumps(c.dataset.to_json(), sort_keys=True) for c in configs}
    if len(selections) != 1:
        raise UserError(f"{path}: the variants select different questions; an ablation compares them on the same ones")
    return str(data.get("name") or path.stem), baseline, configs


def run_ablation(
    path: str | Path,
    out: str | Path,
    *,
    sets: list[str] | None = None,
    limit: int | None = None,
    mlflow: bool = True,
    progress: bool = True,
    factory_for: Callable[[EvalConfig, Path], Any] | None = None,
    program: str | Path | None = None,
    step: int | None = None,
) -> dict[str, Any]:
    """Run every variant (resuming any finished part) and write the table and charts. Each variant
    runs the compiled ``program`` (``--program``; None: the one shipped for its generator LM).

    ``step``: run the variants ``step`` questions at a time (the first ``step`` questions in every
    variant, then the next ``step``, ...) and rewrite the table after each round, so that an
    ablation stopped after hours has every variant on the same questions and a table of them."""
    name, baseline, configs = load_ablation(path, sets, limit)
    if step is not None and step < 1:
        raise UserError(f"--step must be a positive number of questions, not {step}")
    rounds: list[int | None] = [limit]
    if step is not None:
        total = len(configs[0].dataset.load())
        rounds = [*range(step, total, step), total]
    out = Path(out)
    (out / "charts").mkdir(parents=True, exist_ok=True)
    use_mlflow = mlflow and configs[0].mlflow_enabled
    parent = None
    if use_mlflow:
        tracking.enable_autolog(configs[0])
        parent = tracking.AblationRun(configs[0], name, out)
        parent.begin({"baseline": baseline, "variants": ",".join(c.name for c in configs)})
    reopened = False
    try:
        for round_limit in rounds:
            if step is not None:
                configs = load_ablation(path, sets, round_limit)[2]
            rows: list[tuple[str, dict[str, Any]]] = []
            for config in configs:
                run_dir = out / config.name
                factory = factory_for(config, run_dir) if factory_for else None
                tracker = parent.variant(config) if parent is not None else None
                rows.append((config.name, run_eval(config, run_dir, factory, progress=progress,
                                                   program=None if factory else program, tracker=tracker)))
                reopened = reopened or (tracker is not None and tracker.opened)
            table = _write_table(out, name, baseline, rows)
        if parent is not None:
            parent.finish(reopened)
    except BaseException as exc:
        if parent is not None:
            parent.abort(exc)
        raise
    return {"name": name, "baseline": baseline, "table": table, "variants": dict(rows)}


def _write_table(out: Path, name: str, baseline: str, rows: list[tuple[str, dict[str, Any]]]) -> str:
    table = ablation_markdown(rows, baseline)
    (out / "ablation.md").write_text(f"# {name}\n\n{table}", encoding="utf-8")
    (out / "ablation.json").write_text(json.dumps({"name": name, "baseline": baseline, "variants": dict(rows)},
                                                  indent=2) + "\n", encoding="utf-8")
    ablation_bar_chart(rows, out / "charts" / "ablation.png")
    accuracy_cost_chart(rows, out / "charts" / "accuracy_vs_cost.png")
    return table
