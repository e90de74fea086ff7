"""The real program for each question: engine, knowledge base and ``build_program``, per database.

Knowledge bases are built once per database into a cache directory and reused by later runs
(``kb.cache``; the build is incremental and skips unchanged work). A run that may enrich its KB
(``use_enrichment``) works on its own copy under ``<out>/kb/<db_id>``: what one run learns never
leaks into another run or ablation variant, and a resumed run continues with what it had learned.

Engines, retrievers and programs are not shared between threads: each worker thread gets its own
per database. LMs are built once (their engines serialise access to the embedded model). Every
program gets the compiled state the run resolved (``programs.shipped``: by default the program
shipped for the generator LM).
"""
from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any, Callable

from reflect_sql.db import open_engine
from reflect_sql.experiments.assembly import LMs, assemble
from reflect_sql.experiments.config import EvalConfig
from reflect_sql.experiments.datasets import Question
from reflect_sql.kb.build import build_kb
from reflect_sql.kb.retrieve import Retriever
from reflect_sql.programs.retriever import SchemaRetriever
from reflect_sql.programs.shipped import ProgramChoice


class PipelineFactory:
    def __init__(self, config: EvalConfig, out: str | Path, program: str | Path | ProgramChoice | None = None,
                 lms: LMs | None = None):
        """``program``: the ``--program`` value (None: the program shipped for the generator LM,
        "none": bare signatures, or a file), or a choice already resolved (``programs.shipped``)."""
        self.config = config
        self.settings = config.settings
        self.out = Path(out)
        self.assembly = assemble(self.settings, program, lms)
        self.program = self.assembly.choice
        self.generator_lm, self.judge_lm = self.assembly.lms
        self._local = threading.local()
        self._kb_lock = threading.Lock()
        self._kb_ready: dict[str, Path] = {}
        self._opened: list[Any] = []
        self._opened_lock = threading.Lock()

    # --- knowledge bases ------------------------------------------------------------------

    def kb_dir(self, q: Question) -> Path:
        """Build (or refresh) the cached KB of q's database once per run; copy it for this run if it may learn."""
        with self._kb_lock:
            if q.db_id in self._kb_ready:
                return self._kb_ready[q.db_id]
            cache = self.config.kb_cache / self.config.dataset.format / q.db_id
            run_copy = self.out / "kb" / q.db_id
            if not (self.settings.use_enrichment and run_copy.exists()):
                build_kb(str(q.db_path), cache, self.settings,
                         descriptions=q.descriptions_dir, tables_json=q.tables_json, glossary=q.glossary,
                         db_id=q.db_id)
            target = cache
            if self.settings.use_enrichment:
                if not run_copy.exists():
                    shutil.copytree(cache, run_copy)
                target = run_copy
            self._kb_ready[q.db_id] = target
            return target

    # --- per-thread programs --------------------------------------------------------------

    def _build(self, q: Question) -> Callable[..., Any]:
        engine = open_engine(q.db_path, self.settings)
        if self.config.kb_enabled:
            retriever = Retriever(self.kb_dir(q), self.settings)
        else:
            retriever = SchemaRetriever(engine.introspect(str(q.tables_json) if q.tables_json else None, q.db_id))
        with self._opened_lock:
            self._opened += [engine, retriever]
        return self.assembly.program(engine, retriever, self.config.mode)

    def __call__(self, q: Question) -> Callable[..., Any]:
        programs = getattr(self._local, "programs", None)
        if programs is None:
            programs = self._local.programs = {}
        if q.db_id not in programs:
            programs[q.db_id] = self._build(q)
        return programs[q.db_id]

    def close(self) -> None:
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for thing in opened:
            close = getattr(thing, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - closing is best effort at the end of a run
                    pass
