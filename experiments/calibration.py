"""Judge calibration: how well each judge's final score predicts that the answer is actually right.

The paper's section 7 worries that LLM judges may be biased. Here each judge score of the
evaluated questions (Score_r of the retrieval judge, S of the semantic judge, E of the entailment
judge) is set against execution correctness:
  - AUC, the probability that a correct answer scores above a wrong one (Mann-Whitney U with
    mid-ranks for ties; 0.5 is chance);
  - precision and recall at the judge's threshold (theta_r, theta_s, theta_e): of the answers the
    judge let through, how many were right; of the right answers, how many it let through.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

# (key in the program's scores, paper symbol, settings threshold)
JUDGES = (("retrieval", "Score_r", "theta_r"), ("semantic", "S", "theta_s"), ("entailment", "E", "theta_e"))


def auc(scores: list[float], labels: list[bool]) -> float | None:
    """Area under the ROC curve via the Mann-Whitney U statistic; None without both classes."""
    n_pos = sum(labels)
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        mid = (i + j) / 2 + 1  # ranks are 1-based; ties share their mean rank
        for k in range(i, j + 1):
            ranks[order[k]] = mid
        i = j + 1
    rank_sum = sum(r for r, label in zip(ranks, labels) if label)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def at_threshold(scores: list[float], labels: list[bool], threshold: float) -> dict[str, float | int | None]:
    accepted = [s >= threshold for s in scores]
    tp = sum(a and y for a, y in zip(accepted, labels))
    n_accepted = sum(accepted)
    n_pos = sum(labels)
    return {
        "accepted": n_accepted,
        "precision": tp / n_accepted if n_accepted else None,
        "recall": tp / n_pos if n_pos else None,
    }


def calibrate(records: Iterable[Mapping[str, Any]], thresholds: Mapping[str, float]) -> list[dict[str, Any]]:
    records = list(records)
    rows = []
    for key, symbol, theta in JUDGES:
        pairs = [(float(r["scores"][key]), bool(r["correct"])) for r in records
                 if isinstance(r.get("scores"), Mapping) and isinstance(r["scores"].get(key), (int, float))]
        scores = [s for s, _ in pairs]
        labels = [y for _, y in pairs]
        row: dict[str, Any] = {
            "judge": key, "symbol": symbol, "threshold": thresholds[theta], "n": len(pairs),
            "correct": sum(labels), "base_rate": sum(labels) / len(labels) if labels else None,
            "auc": auc(scores, labels),
        }
        row.update(at_threshold(scores, labels, thresholds[theta]))
        rows.append(row)
    return rows


def _f(value: Any, digits: int = 3) -> str:
    return "-" if value is None else (f"{value:.{digits}f}" if isinstance(value, float) else str(value))


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| Judge | θ | n | correct | AUC | accepted | precision@θ | recall@θ |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['symbol']} ({r['judge']}) | {_f(r['threshold'], 1)} | {r['n']} | {r['correct']} | "
                     f"{_f(r['auc'])} | {r['accepted']} | {_f(r['precision'])} | {_f(r['recall'])} |")
    return "\n".join(lines) + "\n"


def _roc(scores: list[float], labels: list[bool]) -> tuple[list[float], list[float]]:
    n_pos, n_neg = sum(labels), len(labels) - sum(labels)
    xs, ys = [0.0], [0.0]
    for t in sorted(set(scores), reverse=True):
        accepted = [s >= t for s in scores]
        ys.append(sum(a and y for a, y in zip(accepted, labels)) / n_pos)
        xs.append(sum(a and not y for a, y in zip(accepted, labels)) / n_neg)
    return xs, ys


def chart(records: list[Mapping[str, Any]], rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Per judge: its ROC curve (left) and its score distribution for right and wrong answers (right)."""
    from reflect_sql.experiments.report import _pyplot  # report imports this module: one of the two must wait

    plt = _pyplot()
    fig, (roc_ax, hist_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    roc_ax.plot([0, 1], [0, 1], linestyle=":", color="grey")
    for row in rows:
        key = row["judge"]
        pairs = [(float(r["scores"][key]), bool(r["correct"])) for r in records
                 if isinstance(r.get("scores"), Mapping) and isinstance(r["scores"].get(key), (int, float))]
        if row["auc"] is not None:
            xs, ys = _roc([s for s, _ in pairs], [y for _, y in pairs])
            roc_ax.plot(xs, ys, marker=".", label=f"{row['symbol']} (AUC {row['auc']:.2f})")
        for correct, style in ((True, "-"), (False, "--")):
            values = [s for s, y in pairs if y is correct]
            if values:
                hist_ax.hist(values, bins=20, histtype="step", linestyle=style,
                             label=f"{row['symbol']} {'right' if correct else 'wrong'}")
    roc_ax.set_xlabel("false positive rate")
    roc_ax.set_ylabel("true positive rate")
    roc_ax.set_title("Judge score as a predictor of correctness")
    if roc_ax.get_legend_handles_labels()[0]:
        roc_ax.legend(fontsize="small")
    hist_ax.set_xlabel("judge score")
    hist_ax.set_ylabel("questions")
    hist_ax.set_title("Scores of right and wrong answers")
    if hist_ax.get_legend_handles_labels()[0]:
        hist_ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def report(records: list[Mapping[str, Any]], thresholds: Mapping[str, float], out_dir: str | Path) -> list[dict[str, Any]]:
    """Write calibration.md, calibration.json and charts/calibration.png into ``out_dir``."""
    out_dir = Path(out_dir)
    rows = calibrate(records, thresholds)
    (out_dir / "calibration.md").write_text("# Judge calibration\n\n" + markdown(rows), encoding="utf-8")
    (out_dir / "calibration.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    if any(r["n"] for r in rows):
        (out_dir / "charts").mkdir(exist_ok=True)
        chart(records, rows, out_dir / "charts" / "calibration.png")
    return rows
