"""A ``reflect-sql tune`` worker on a scripted LM, for the distributed tuning test: the real command
and assembly, with ``configure_lms`` giving the optimisation tests' scripted LM (each call slowed
by DELAY seconds, so that a trial lasts long enough to be killed in the middle).

    python tune_worker.py DELAY tune CONFIG --storage URL ...
"""
from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import reflect_sql.lm.factory as lm_factory
from reflect_sql.cli import main
from reflect_sql.experiments import runner
from reflect_sql.lm.scripted import ScriptedLM

# The fixtures module by its path: importing "conftest" by name could find another room's.
_spec = importlib.util.spec_from_file_location("optimize_fixtures", Path(__file__).with_name("conftest.py"))
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)

DELAY = float(sys.argv[1])


def slow_reply(name: str, inputs: dict) -> dict:
    time.sleep(DELAY)
    return fixtures._scripted_reply(name, inputs)


# As in the fixtures (no_run_charts): per-run charts cost seconds a trial and show nothing of tuning.
runner.write_run_reports = lambda *args, **kwargs: None
lm_factory.configure_lms = lambda settings: (ScriptedLM(slow_reply, role="generator"), ScriptedLM(slow_reply, role="judge"))
sys.exit(main(sys.argv[2:]))
