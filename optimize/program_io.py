"""Saving and loading compiled programs.

A compiled program file is DSPy's own ``program.save()`` JSON (instructions and demos per
predictor), so ``eval --program`` loads it into the program it builds for each database with
``program.load()``. Loading needs the program's skeleton: the module tree and its predictors, which
do not depend on a database, so a skeleton is built with no engine. The mode (reflect or
single-pass) is read from the file's ``metadata.reflect_sql`` (written by ``compile``) or, for a
file saved by hand, recognised from its predictor names.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy

from reflect_sql.errors import UserError
from reflect_sql.programs.build import MODES
from reflect_sql.programs.shipped import keep_signature_names, load_state, skeleton  # noqa: F401 - re-exported
from reflect_sql.settings import Settings

# The roles a compiled program can carry, by the signature their predictor runs.
ROLE_SIGNATURES = {
    "generator": "GenerateSQL",
    "repairer": "RepairSQL",
    "semantic_judge": "SemanticJudge",
    "entailment_judge": "EntailmentJudge",
    "retrieval_judge": "RetrievalJudge",
}


def predictor_names(mode: str) -> list[str]:
    return sorted(name for name, _ in skeleton(mode).named_predictors())


def predictor_for(program: dspy.Module, role: str) -> dspy.Predict | None:
    """The program's predictor playing ``role`` (None when the program has no such role)."""
    wanted = ROLE_SIGNATURES[role]
    found = [p for _, p in program.named_predictors() if p.signature.__name__ == wanted]
    return found[0] if found else None


def read_state(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.suffix != ".json":
        raise UserError(f"a compiled program is a .json file saved by `reflect-sql compile`, not {path}")
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"compiled program not found: {path}") from None
    except ValueError as exc:
        raise UserError(f"compiled program {path} is not valid JSON: {exc}") from None
    if not isinstance(state, dict) or "metadata" not in state:
        raise UserError(f"{path} is not a saved DSPy program (no 'metadata' key)")
    return state


def detect_mode(state: dict[str, Any], path: str | Path = "program") -> str:
    recorded = (state.get("metadata") or {}).get("reflect_sql", {}).get("mode")
    if recorded in MODES:
        return recorded
    saved = sorted(k for k in state if k != "metadata")
    for mode in MODES:
        if predictor_names(mode) == saved:
            return mode
    raise UserError(f"{path}: its predictors ({', '.join(saved) or 'none'}) match no program mode "
                    f"({'; '.join(f'{m}: ' + ', '.join(predictor_names(m)) for m in MODES)})")


def load_into(program: dspy.Module, path: str | Path) -> dspy.Module:
    """Load the program saved at ``path`` into ``program``, keeping the signatures' names."""
    load_state(program, read_state(path), where=path)
    return program


def load_program(path: str | Path, settings: Settings | None = None) -> tuple[dspy.Module, str]:
    """(skeleton with the saved state loaded, mode)."""
    state = read_state(path)
    mode = detect_mode(state, path)
    return load_into(skeleton(mode, settings), path), mode


def save_program(program: dspy.Module, path: str | Path, metadata: dict[str, Any]) -> Path:
    """``program.save(path)`` plus ``metadata.reflect_sql`` (mode, optimizer, split, agreement)."""
    path = Path(path)
    if path.suffix != ".json":
        raise UserError(f"--out must name a .json file, not {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    state = json.loads(path.read_text(encoding="utf-8"))
    state["metadata"]["reflect_sql"] = metadata
    path.write_text(json.dumps(state, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
