"""Reflect-SQL: text-to-SQL with three LLM-judged feedback loops (retrieval, synthesis, entailment)."""
import os as _os

# Offline by default: no hub look-ups, no cost-map fetch, no telemetry. setdefault keeps a user's choice.
for _name, _value in (
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
    ("MLFLOW_DISABLE_TELEMETRY", "true"),
    ("ANONYMIZED_TELEMETRY", "False"),
    ("OMP_WAIT_POLICY", "PASSIVE"),
    ("TOKENIZERS_PARALLELISM", "false"),
):
    _os.environ.setdefault(_name, _value)

__version__ = "0.1.0"
