"""``reflect-sql ARGS...`` in a process of its own, every LM call answered by the oracle LM of the
config's questions (``experiments/scripted.py``) after ``pace`` seconds, as a slow model would; the
process exits with the command's exit code. For the SIGTERM / Ctrl-C tests of eval, ablate and tune:

    python shutdown_driver.py EXPERIMENT.yaml PACE_S eval EXPERIMENT.yaml --out DIR ...
"""
import sys
import time

from reflect_sql.cli import main
from reflect_sql.experiments.config import load_config
from reflect_sql.experiments.scripted import oracle_script
from reflect_sql.lm import factory
from reflect_sql.lm.scripted import ScriptedLM

experiment, pace = sys.argv[1], float(sys.argv[2])
script = oracle_script(load_config(experiment).dataset.load())


def paced(name, inputs):
    time.sleep(pace)
    return script(name, inputs)


factory.configure_lms = lambda settings: (ScriptedLM(paced, role="generator"), ScriptedLM(paced, role="judge"))
sys.exit(main(sys.argv[3:]))
