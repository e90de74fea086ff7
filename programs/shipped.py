"""Which compiled program a command runs, and loading it: the one resolution of ``--program``.

Compiled programs ship in ``programs/compiled/``, one per embedded model, named by the model:
``local/<name>`` -> ``compiled/<name>.json``. ``ask``, ``eval``, ``ablate``, ``tune`` and ``demo``
all resolve their program with ``resolve_program``:

- no ``--program``: the shipped program of the generator LM (``settings.lm``), or the bare
  signatures when none ships for that LM;
- ``--program none``: the bare signatures;
- ``--program FILE``: that file.

A file records the LM it was compiled for (``metadata.reflect_sql.lm``, written by ``compile``).
A file compiled for another generator LM is refused (``UserError``: one line, exit code 2); a file
that records no LM (compiled before LMs were recorded) is loaded with a warning on stderr.

The file is read once, at resolution: its sha256 is of the bytes whose state is loaded. A program
of another mode (a reflect program in a single-pass run, or the reverse) gives each predictor of
the run the state of the file's predictor of the same role (signature); the run's predictors that
have no counterpart in the file stay bare.
"""
from __future__ import annotations

import copy
import hashlib
import json
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Collection

from reflect_sql.db.schema import Schema
from reflect_sql.errors import UserError
from reflect_sql.lm.local_engine import LOCAL_PREFIX
from reflect_sql.lm.models import DEFAULT_MODEL
from reflect_sql.programs.build import MODES, build_program
from reflect_sql.programs.retriever import SchemaRetriever
from reflect_sql.settings import Settings

COMPILED_DIR = Path(__file__).resolve().parent / "compiled"
# The optimizers of ``reflect-sql compile`` (optimize/config.py) that rewrite a predictor's instructions.
WRITES_INSTRUCTIONS = ("mipro",)
NONE = "none"


@dataclass(frozen=True)
class ProgramChoice:
    """What a run loads: a file (``path``) or the bare signatures (``path`` None)."""

    source: str  # "default" (shipped for the LM), "file" (--program FILE), "none" (--program none), "no default"
    lm: str  # the generator LM the choice was resolved for
    path: Path | None = None
    sha256: str | None = None
    compiled_for: str | None = None  # the LM the file records (None: it records none)
    mode: str | None = None  # the file's program mode
    warning: str | None = None
    state: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def bare(self) -> bool:
        return self.path is None

    def describe(self) -> str:
        """One line for a terminal."""
        if self.bare:
            if self.source == NONE:
                return "bare signatures (--program none)"
            default = default_program_file(self.lm)
            why = f"{default} does not exist" if default else "not an embedded model"
            return f"bare signatures (no compiled program ships for {self.lm}: {why})"
        what = "shipped for " + self.lm if self.source == "default" else f"compiled for {self.compiled_for or 'an unrecorded LM'}"
        return f"{self.path} ({what}, sha256 {self.sha256[:12]})"

    def to_json(self) -> dict[str, Any]:
        """What run.json, summary.json and MLflow record: the path ("none" when bare) and sha256."""
        return {"path": str(self.path) if self.path else NONE, "sha256": self.sha256, "source": self.source,
                "lm": self.lm, "compiled_for": self.compiled_for, "mode": self.mode, "description": self.describe()}


def default_program_file(lm: str) -> Path | None:
    """The file a compiled program for ``lm`` ships as (it may not exist); None for an LM that is
    not an embedded model."""
    if not lm.startswith(LOCAL_PREFIX):
        return None
    name = lm[len(LOCAL_PREFIX):] or DEFAULT_MODEL
    if "/" in name or name.startswith("."):
        return None
    return COMPILED_DIR / f"{name}.json"


def _read(path: Path) -> tuple[bytes, dict[str, Any]]:
    if path.suffix != ".json":
        raise UserError(f"--program: a compiled program is a .json file saved by `reflect-sql compile` "
                        f"(or `none` for the bare signatures), not {path}")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"compiled program not found: {path}") from None
    except OSError as exc:
        raise UserError(f"cannot read compiled program {path}: {exc.strerror or exc}") from None
    try:
        state = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"compiled program {path} is not valid JSON: {exc}") from None
    if not isinstance(state, dict) or not isinstance(state.get("metadata"), dict):
        raise UserError(f"{path} is not a saved DSPy program (no 'metadata' key)")
    return data, state


def resolve_program(program: str | Path | None, lm: str) -> ProgramChoice:
    """The program a run on generator LM ``lm`` loads: ``program`` is the ``--program`` value
    (None: the default for ``lm``; ``"none"``: bare; else a file)."""
    if program is not None and str(program).strip() == NONE:
        return ProgramChoice(source=NONE, lm=lm)
    if program is None or not str(program).strip():
        path = default_program_file(lm)
        if path is None or not path.is_file():
            return ProgramChoice(source="no default", lm=lm)
        source = "default"
    else:
        path, source = Path(program), "file"
    path = path.resolve()
    data, state = _read(path)
    meta = state["metadata"].get("reflect_sql") or {}
    compiled_for = meta.get("lm") if isinstance(meta, dict) else None
    mode = _file_mode(state, path)
    warning = None
    if compiled_for is None:
        warning = (f"{path} records no LM it was compiled for (compiled before LMs were recorded); "
                   f"loading it for {lm}")
        print(f"reflect-sql: warning: {warning}", file=sys.stderr)
    elif compiled_for != lm:
        raise UserError(f"{path} was compiled for {compiled_for}, not for the generator LM {lm}: "
                        f"pass --program none, or a program compiled for {lm}")
    return ProgramChoice(source=source, lm=lm, path=path, sha256=hashlib.sha256(data).hexdigest(),
                         compiled_for=compiled_for, mode=mode, warning=warning, state=state)


# --- loading ------------------------------------------------------------------------------------


def skeleton(mode: str, settings: Settings | None = None) -> Any:
    """The program of ``mode`` with its predictors and no database behind it (not runnable)."""
    return build_program(settings or Settings(), None, SchemaRetriever(Schema("sqlite", [])), mode=mode)


@lru_cache(maxsize=None)
def roles(mode: str) -> dict[str, str]:
    """Predictor path -> signature name of the program of ``mode`` (built without a database)."""
    program = skeleton(mode)
    return {path: p.signature.__name__ for path, p in program.named_predictors()}


def _file_mode(state: dict[str, Any], path: Path) -> str:
    meta = state["metadata"].get("reflect_sql")
    recorded = meta.get("mode") if isinstance(meta, dict) else None
    if recorded in MODES:
        return recorded
    saved = sorted(k for k in state if k != "metadata")
    for mode in MODES:
        if sorted(roles(mode)) == saved:
            return mode
    raise UserError(f"{path}: its predictors ({', '.join(saved) or 'none'}) match no program mode "
                    f"({'; '.join(f'{m}: ' + ', '.join(sorted(roles(m))) for m in MODES)})")


def keep_signature_names(program: Any, names: dict[str, str]) -> None:
    """Give each predictor's signature back its class name (``names``: predictor path -> name).

    DSPy rebuilds a signature whenever its instructions are set (``load``, MIPROv2), and the
    rebuilt class is called ``StringSignature``; cost accounting and scripted LMs tell the
    predictors apart by that name.
    """
    for path, predictor in program.named_predictors():
        name = names.get(path)
        if name and predictor.signature.__name__ != name:
            predictor.signature.__name__ = name
            predictor.signature.__qualname__ = name


def on_judge_lm(path: str) -> bool:
    """Whether the predictor at ``path`` runs on the judge LM: each loop asks its ``judge`` there."""
    return path.rsplit(".", 1)[-1] == "judge"


def other_lm_predictors(choice: ProgramChoice, settings: Settings, program: Any) -> set[str]:
    """The predictors of ``program`` that ``settings`` run on another LM than the one ``choice`` was
    compiled for: a judge LM of its own. Demos a model chose for itself do not carry to another
    (the 1.5B's entailment anchors took the 0.5B's AUC from 0.73 to 0.45, compiled_default.md)."""
    if choice.bare or choice.compiled_for is None or settings.effective_judge_lm == choice.compiled_for:
        return set()
    return {path for path, _ in program.named_predictors() if on_judge_lm(path)}


def load_state(program: Any, state: dict[str, Any], mode: str | None = None, where: str | Path = "program",
               leave_bare: Collection[str] = ()) -> list[str]:
    """Load a saved program's ``state`` into ``program``, keeping the signatures' names; returns
    the paths of the predictors left bare (none when the file is of the program's own mode and
    its predictors ask in the same form). The predictors in ``leave_bare`` are not loaded.

    Predictors are matched by path, and, for a file of another ``mode``, by role (signature name).
    A file written by ``reflect-sql compile`` brings demos (and a MIPROv2 compile its instructions);
    the field descriptions are always the code's.
    """
    names = {path: p.signature.__name__ for path, p in program.named_predictors()}
    saved = {k: v for k, v in state.items() if k != "metadata"}
    # Files from ``reflect-sql compile`` name their optimizer; any other saved DSPy program loads as DSPy loads it.
    optimizer = ((state.get("metadata") or {}).get("reflect_sql") or {}).get("optimizer")
    other_mode = mode is not None and set(roles(mode)) != set(names)
    by_role = {name: path for path, name in roles(mode).items() if path in saved} if other_mode else {}
    left = []
    saved_roles = roles(mode) if mode is not None else {}
    for path, predictor in program.named_predictors():
        source = path if path in saved else by_role.get(names[path])
        if path in leave_bare:
            left.append(path)
            continue
        if source is not None and saved_roles.get(source, names[path]) != names[path]:
            # The same role asked in another form (``judge_form``): the saved instructions and demos
            # are for fields this predictor does not have, so it stays bare.
            left.append(path)
            continue
        if source is None:
            if not other_mode:
                raise UserError(f"{where} lacks the state of predictor '{path}' of the {type(program).__name__} program")
            left.append(path)
            continue
        written = predictor.signature
        predictor.load_state(copy.deepcopy(saved[source]))
        if optimizer is not None:
            # A file saves each signature as the code had it on the day of the compile, and DSPy's
            # load puts that text back: the shipped program kept the retrieval judge's old field
            # descriptions after the code changed them. The code's signature stays; a file brings
            # its demos, and its instructions only from an optimizer that writes instructions.
            instructions = predictor.signature.instructions
            predictor.signature = written.with_instructions(instructions) if optimizer in WRITES_INSTRUCTIONS \
                else written
    if len(left) == len(names):
        raise UserError(f"{where} ({mode} program) has no predictor of the {type(program).__name__} program")
    keep_signature_names(program, names)
    return left


def bare_predictors(choice: ProgramChoice, settings: Settings, mode: str) -> list[str]:
    """The predictors of the ``mode`` program under ``settings`` that run bare although ``choice``
    is a file: a role it saved in another form (scored judges under ``judge_form: checks``), one
    a file of another mode lacks, or a judge run on another LM than the file's. Empty when the
    choice is bare altogether, or loads everywhere."""
    if choice.bare:
        return []
    program = skeleton(mode, settings)
    return sorted(load_state(program, choice.state, choice.mode, choice.path,
                             other_lm_predictors(choice, settings, program)))


def apply_program(program: Any, choice: ProgramChoice, settings: Settings | None = None) -> Any:
    """``program`` with ``choice`` loaded into it (unchanged when the choice is bare); with
    ``settings``, its judges stay bare when they run on another LM than the file's."""
    if not choice.bare:
        leave = other_lm_predictors(choice, settings, program) if settings is not None else set()
        load_state(program, choice.state, choice.mode, choice.path, leave)
    return program
