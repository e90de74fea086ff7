"""The one assembly of a runnable program: settings -> compiled-program choice, the generator and
judge LMs, DSPy's configuration, and ``build_program`` with the choice loaded into it.

``ask``, ``demo``, the experiments pipeline (``eval``, ``ablate``, ``tune``), ``compile`` and
``judge-scale`` all assemble through ``assemble``; nothing else calls ``configure_lms`` or
``dspy.configure``. It lives here, the lowest room that may see ``programs`` and ``lm`` both.

The order is the contract: the program choice is resolved before any LM is built, so a refused
``--program`` costs no model load; then the LMs (or the caller's, e.g. scripted ones, or one pair
shared by every trial of a study); then DSPy's global configuration, which worker threads see
(``dspy.context`` would stay in the calling thread).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from reflect_sql.db.base import Engine
from reflect_sql.lm import factory as lm_factory  # the module, not the function: tests replace configure_lms
from reflect_sql.lm.adapters import make_adapter
from reflect_sql.programs.build import build_program
from reflect_sql.programs.retriever import ContextProvider
from reflect_sql.programs.shipped import ProgramChoice, apply_program, resolve_program
from reflect_sql.settings import Settings

LMs = tuple[dspy.BaseLM, dspy.BaseLM]


@dataclass(frozen=True)
class Assembly:
    """What every program of a run shares: its settings, compiled program and (generator, judge) LMs."""

    settings: Settings
    choice: ProgramChoice
    generator_lm: dspy.BaseLM
    judge_lm: dspy.BaseLM

    @property
    def lms(self) -> LMs:
        return self.generator_lm, self.judge_lm

    def program(self, engine: Engine, retriever: ContextProvider | None, mode: str = "reflect",
                settings: Settings | None = None) -> Any:
        """A program over ``engine`` and ``retriever`` with the compiled state loaded. ``settings``:
        a variant of the assembly's that leaves the LMs alone (a tuning trial's thresholds)."""
        program = build_program(settings or self.settings, engine, retriever, mode=mode,
                                generator_lm=self.generator_lm, judge_lm=self.judge_lm)
        return apply_program(program, self.choice, self.settings)


def assemble(settings: Settings, program: str | Path | ProgramChoice | None = None,
             lms: LMs | None = None) -> Assembly:
    """``program``: the ``--program`` value (None: the program shipped for the generator LM, "none":
    bare signatures, or a file) or a choice already resolved. ``lms``: use these instead of building
    the settings' LMs."""
    choice = program if isinstance(program, ProgramChoice) else resolve_program(program, settings.lm)
    generator_lm, judge_lm = lms or lm_factory.configure_lms(settings)
    dspy.configure(lm=generator_lm, adapter=make_adapter(settings))
    return Assembly(settings, choice, generator_lm, judge_lm)
