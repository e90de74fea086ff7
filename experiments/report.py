"""Tables and charts: the EX table, the paper-style ablation table, and the charts beside them."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Mapping, Sequence

COLUMNS = ("simple", "moderate", "challenging", "overall")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_accuracy_table(table: Mapping[str, Any]) -> str:
    """Plain-text EX table in the layout the official BIRD evaluator prints."""
    names = [c for c in COLUMNS if c in table]
    counts = table.get("counts", {})
    width = 14
    lines = [
        "".join(f"{h:>{width}}" for h in ["", *names]),
        "".join(f"{v:>{width}}" for v in ["count", *[str(counts.get(n, 0)) for n in names]]),
        "".join(f"{v:>{width}}" for v in ["EX (%)", *[_pct(table.get(n)) for n in names]]),
    ]
    return "\n".join(lines)


def _own_cost(per_question: Mapping[str, Any], key: str, digits: int) -> str:
    """A variant's own cost per question: its ``alone_`` figure where the record has one."""
    value = per_question.get(f"alone_{key}", per_question.get(key))
    return "-" if value is None else f"{value:,.{digits}f}"


def ablation_markdown(rows: Sequence[tuple[str, Mapping[str, Any]]], baseline: str | None = None) -> str:
    """Paper-style table: one row per variant, EX per difficulty, and Δ of overall vs the baseline."""
    baseline = baseline or (rows[0][0] if rows else "")
    base = dict(rows).get(baseline)
    rows = sorted(rows, key=lambda r: r[0] != baseline)  # the reference row first, the rest in given order
    names = [c for c in COLUMNS if any(r.get(c) is not None for _, r in rows)] or ["overall"]
    head = ["Variant", *[n.capitalize() for n in names], f"Δ vs {baseline}", "LM calls/q",
            "prompt tok/q", "completion tok/q", "s/q"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    shared = unknown = 0.0
    for name, summary in rows:
        overall, ref = summary.get("overall"), (base or {}).get("overall")
        delta = "-" if overall is None or ref is None or summary is base else f"{overall - ref:+.2f}"
        cost = summary.get("cost") or {}
        per_q = cost.get("per_question") or {}
        shared += cost.get("cache_hits") or 0
        unknown += cost.get("cache_hits_of_unknown_cost") or 0
        calls = per_q.get("lm_calls")
        cells = [name, *[_pct(summary.get(n)) for n in names], delta, "-" if calls is None else f"{calls:.1f}",
                 _own_cost(per_q, "prompt_tokens", 0), _own_cost(per_q, "completion_tokens", 0),
                 _own_cost(per_q, "seconds", 1)]
        lines.append("| " + " | ".join(cells) + " |")
    if shared:
        note = (f"\nTokens and seconds are each variant's own: the {int(shared)} calls a response cache shared "
                "with another run served are counted at what they cost when first computed")
        note += (f" ({int(unknown)} of them at zero: computed before the cost ledger).\n" if unknown else ".\n")
        lines.append(note)
    return "\n".join(lines) + "\n"


def _pyplot():
    # matplotlib costs a second: ``reflect-sql score`` prints this module's tables and draws nothing.
    import matplotlib

    matplotlib.use("Agg")  # headless: never needs a display
    import matplotlib.pyplot as plt

    return plt


def ablation_bar_chart(rows: Sequence[tuple[str, Mapping[str, Any]]], path: str | Path) -> Path:
    plt = _pyplot()
    names = [c for c in COLUMNS if any(r.get(c) is not None for _, r in rows)] or ["overall"]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows) + 2), 4))
    width = 0.8 / max(1, len(rows))
    for i, (variant, summary) in enumerate(rows):
        xs = [j + i * width for j in range(len(names))]
        ax.bar(xs, [summary.get(n) or 0.0 for n in names], width, label=variant)
    ax.set_xticks([j + width * (len(rows) - 1) / 2 for j in range(len(names))])
    ax.set_xticklabels([n.capitalize() for n in names])
    ax.set_ylabel("EX (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize="small")
    ax.set_title("Execution accuracy by difficulty")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def accuracy_cost_chart(rows: Sequence[tuple[str, Mapping[str, Any]]], path: str | Path) -> Path:
    """Overall EX against LM calls per question: what each loop costs and what it buys."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "lm_calls", "LM calls per question"), (axes[1], "seconds", "seconds per question")):
        for variant, summary in rows:
            per_q = (summary.get("cost") or {}).get("per_question") or {}
            x, y = per_q.get(key), summary.get("overall")
            if x is None or y is None:
                continue
            ax.scatter([x], [y])
            ax.annotate(variant, (x, y), textcoords="offset points", xytext=(4, 4), fontsize="small")
        ax.set_xlabel(label)
        ax.set_ylabel("overall EX (%)")
        ax.grid(alpha=0.3)
    fig.suptitle("Accuracy vs cost")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def difficulty_chart(summary: Mapping[str, Any], path: str | Path, title: str = "") -> Path:
    return ablation_bar_chart([(title or summary.get("name") or "run", summary)], path)


PER_QUESTION_FIELDS = ("question_id", "db_id", "difficulty", "correct", "status", "score_retrieval", "score_semantic",
                       "score_entailment", "lm_calls", "prompt_tokens", "completion_tokens", "seconds",
                       "table_recall", "column_recall", "error", "sql")


def per_question_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in records:
        scores, cost, recall = r.get("scores") or {}, r.get("cost") or {}, r.get("recall") or {}
        rows.append({
            "question_id": r["question_id"], "db_id": r["db_id"], "difficulty": r.get("difficulty"),
            "correct": r["correct"], "status": r["status"],
            **{f"score_{k}": scores.get(k) for k in ("retrieval", "semantic", "entailment")},
            **{k: cost.get(k) for k in ("lm_calls", "prompt_tokens", "completion_tokens", "seconds")},
            "table_recall": recall.get("table_recall"), "column_recall": recall.get("column_recall"),
            "error": r.get("error"), "sql": r.get("sql"),
        })
    return rows


def write_run_reports(out: str | Path, records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any],
                      thresholds: Mapping[str, float]) -> None:
    """per_question.csv, the EX chart and the judge calibration of one evaluation."""
    from reflect_sql.experiments import calibration  # calibration imports this module: one of the two must wait

    out = Path(out)
    with open(out / "per_question.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=PER_QUESTION_FIELDS)
        writer.writeheader()
        writer.writerows(per_question_rows(records))
    (out / "charts").mkdir(exist_ok=True)
    difficulty_chart(summary, out / "charts" / "ex_by_difficulty.png")
    calibration.report(list(records), thresholds, out)
