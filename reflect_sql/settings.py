"""The one source of truth for every knob of Reflect-SQL.

Sources, in rising precedence: the defaults below (the paper's Table 2) < a YAML file <
environment variables ``REFLECT_SQL_<KEY>`` < explicit overrides (CLI flags, ``--set key=value``).
Keys are flat so that the same name works in YAML, in the environment and on the command line.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reflect_sql.files import read_yaml_mapping
from reflect_sql.signatures.scales import ENTAILMENT_SCALE, RETRIEVAL_SCALE, SEMANTIC_SCALE

ENV_PREFIX = "REFLECT_SQL_"

SEMANTIC_WEIGHT_KEYS = ("w_c", "w_g", "w_j", "w_q")
RETRIEVAL_WEIGHT_PREFIX = "retrieval_"


def _default_cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "reflect-sql"


def _retrieval_weight(default: float, description: str, **bounds: float) -> Any:
    """A setting of kb/retrieve.py's scoring, marked so that ``RETRIEVAL_WEIGHT_KEYS`` finds it (other
    settings begin with ``retrieval_`` too, such as ``retrieval_judge_max_tokens``)."""
    return Field(default, description=description, json_schema_extra={"retrieval_weight": True}, **bounds)


class SettingsError(ValueError):
    """A configuration that cannot be used; the message names every offending key."""


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)

    # --- Retrieval loop (paper section 3) ---
    theta_r: float = Field(4.0, description="Retrieval threshold on Score_r (scale 1-10).")
    alpha: float = Field(0.6, ge=0.0, le=1.0, description="Score_r = alpha*R + (1-alpha)*C.")
    k_tables: int = Field(4, ge=1, description="Tables retrieved in the first step.")
    m_columns: int = Field(4, ge=1, description="Columns retrieved per table in the second step.")
    k_growth: int = Field(2, ge=0, description="Tables added to k each time retrieval is judged insufficient.")
    m_growth: int = Field(4, ge=0, description="Columns added to m each time retrieval is judged insufficient.")
    max_retrieval_iterations: int = Field(3, ge=1, description="Cap on retrieval-loop rounds.")
    keep_referenced_tables: bool = Field(
        True, description="Keep, beyond k, the tables the question or evidence references explicitly: as "
        "table.column, or by an identifier only that table has (its name or a column name with an underscore).")
    context_budget_tokens: int = Field(
        1536, ge=0, description="Prompt budget of a KB schema context, in estimated tokens. A database whose "
        "whole schema fits is passed whole (and the retrieval judge, with nothing to add, is not asked); else the "
        "retrieved tables with all their columns, when they fit; else k and m prune as in the paper. 0: always "
        "prune by k and m.")
    query_embedding_precision: Literal["bfloat16", "float32"] = Field(
        "bfloat16", description="Precision of the embedder's layers for a question (KB documents are always "
        "float32). bfloat16: 10-40% less time on a CPU with native bfloat16 (more for long questions), "
        "vectors within a cosine of 0.9999 of float32 (bench/query_embedding.py).")
    query_embedding_threads: int = Field(
        1, ge=0, description="torch threads that embed a question (0: torch's own count; KB documents keep it). "
        "With OMP_WAIT_POLICY=PASSIVE, which the embedded LM needs, a second thread sleeps between the "
        "hundreds of small operations of one short question and each wake-up costs more than it saves: one "
        "thread took 0.8x the time of two on an AMD EPYC VM, while an Intel one had favoured two "
        "(bench/query_embedding.py --threads 1 2 tells for a machine).")
    # How lexical, value and example evidence add to a table's or column's cosine similarity (which lies
    # in [-1, 1]) in kb/retrieve.py. Tuned on the BIRD and Spider dev databases (bench/retrieval_recall.py),
    # in round steps.
    retrieval_table_name: float = _retrieval_weight(0.35, "Times the share of a table's name the question spells.", ge=0)
    retrieval_table_column: float = _retrieval_weight(0.4, "Times the table's best column-name match, discounted when "
                                                      "many tables share the word.", ge=0)
    retrieval_table_value: float = _retrieval_weight(0.45, "Times the best match of a quoted value the table holds.", ge=0)
    retrieval_column_name: float = _retrieval_weight(0.5, "Times the share of a column's name the question spells.", ge=0)
    retrieval_column_value: float = _retrieval_weight(0.6, "Times the match of a quoted value the column holds.", ge=0)
    retrieval_label: float = _retrieval_weight(0.2, "Added to the label column (name, title) of a table the question "
                                               "names.", ge=0)
    retrieval_example: float = _retrieval_weight(0.3, "Times the similarity of a verified example that used the table "
                                                 "or column.", ge=0)
    retrieval_example_min_similarity: float = _retrieval_weight(0.7, "Least similarity of a verified example whose "
                                                                "tables and columns count as evidence.", ge=-1, le=1)
    retrieval_table_margin: float = _retrieval_weight(0.35, "A table of the top k without direct evidence is kept when "
                                                      "its score is within this of the best table's.", ge=0)
    retrieval_column_floor: float = _retrieval_weight(0.6, "Least score of a column kept by m (key and join columns "
                                                      "are kept anyway); cosine similarity alone rarely reaches it.")
    retrieval_strong_table_name: float = _retrieval_weight(0.5, "Share of a table's name the question must spell to "
                                                           "admit the table beyond the margin.", ge=0, le=1)
    retrieval_strong_column_name: float = _retrieval_weight(0.9, "Column-name match (times its specificity) that "
                                                            "admits its table beyond the margin.", ge=0)
    retrieval_strong_value: float = _retrieval_weight(0.7, "Value match that admits its table beyond the margin.", ge=0)
    retrieval_margin_per_step: float = _retrieval_weight(0.35, "How much each k_growth step beyond k_tables widens the "
                                                         "table margin.", ge=0)
    retrieval_floor_per_step: float = _retrieval_weight(0.15, "How much each m_growth step beyond m_columns lowers the "
                                                        "column floor.", ge=0)
    retrieval_examples_shown: int = _retrieval_weight(3, "Verified examples shown in the schema context at the most.",
                                                      ge=0)
    retrieval_example_show_similarity: float = _retrieval_weight(0.5, "Least similarity of a verified example shown in "
                                                                 "the schema context.", ge=-1, le=1)

    # --- Synthesis loop (paper section 4) ---
    theta_s: float = Field(5.0, description="Semantic threshold on S (scale 1-10).")
    w_c: float = Field(0.1, ge=0.0, description="Weight of column consistency C.")
    w_g: float = Field(0.3, ge=0.0, description="Weight of granularity/aggregation G.")
    w_j: float = Field(0.4, ge=0.0, description="Weight of join consistency J.")
    w_q: float = Field(0.2, ge=0.0, description="Weight of query logic Q.")
    max_syntax_repairs: int = Field(3, ge=0, description="Cap on compile-and-repair rounds per candidate.")
    max_semantic_iterations: int = Field(3, ge=1, description="Cap on generate-and-judge rounds.")
    # Schema-grounded repair (programs/schema_repair.py): deterministic, before any LM repair call.
    repair_requalify: bool = Field(True, description="Move a column qualified with a table or alias that lacks it "
                                   "onto the one table of the query that has it, and compile again, without an LM call.")
    repair_add_joins: bool = Field(True, description="For a column only one table outside the query has, reached by "
                                   "one chain of single foreign keys: join that chain in and qualify the column, without an LM call.")
    repair_pull_tables: bool = Field(True, description="For a column only a table outside the query has: name that "
                                     "table and its FK join path to the repairer, and add it to the schema context.")
    repair_suggest_names: bool = Field(True, description="For an unknown table, or a column no table has: the closest "
                                       "names go into the repairer's feedback.")
    repair_suggest_values: bool = Field(True, description="For a string literal a column never holds: the nearest "
                                        "stored values from the KB's value index go into the repairer's feedback.")
    check_evidence_columns: bool = Field(False, description="Before the semantic judge: SQL that uses none of the "
                                         "columns an evidence clause (\"X refers to col\") names goes back to the generator "
                                         "with those clauses, without a judge call (programs/evidence_columns.py).")

    # --- Candidate pool and selection (programs/selection.py) ---
    n_candidates: int = Field(1, ge=1, le=16, description="SQL samples drawn at the question's first generation "
                              "(they share its prompt); every one that compiles joins the candidate pool.")
    resample_temperature: float = Field(0.7, gt=0.0, le=2.0, description="Sampling temperature of a regeneration "
                                        "whose prompt was already sent or whose SQL repeats, and of the extra candidates.")
    max_resamples: int = Field(2, ge=0, description="Samples a generation may draw to get SQL the question has not seen.")
    selection: Literal["paper", "vote", "judge_vote"] = Field(
        "paper", description="How the answer is chosen from every compiled SQL of the question: paper (first to pass "
        "every threshold, else the best), vote (largest group of agreeing results), judge_vote (agreement and judge scores).")
    vote_weight_agreement: float = Field(0.5, ge=0.0, description="judge_vote: weight of a group's share of the voters.")
    vote_weight_semantic: float = Field(0.25, ge=0.0, description="judge_vote: weight of its members' mean S, scaled to 0-1.")
    vote_weight_entailment: float = Field(0.25, ge=0.0, description="judge_vote: weight of its members' mean E, scaled to 0-1.")
    judge_pool: bool = Field(False, description="Before a selection other than paper, the entailment judge scores the "
                             "best candidate of each result group none of whose members it scored (one call per such "
                             "group), so that judge_vote weighs every group by E.")

    # --- Entailment loop (paper section 5) ---
    theta_e: float = Field(3.0, description="Entailment threshold on E (scale 1-5).")
    beta: float = Field(0.2, ge=0.0, le=1.0, description="E = beta*E_schema + (1-beta)*E_data.")
    max_entailment_iterations: int = Field(2, ge=1, description="Cap on execute-and-judge rounds.")

    # --- Language of the question (programs/language.py) ---
    render_questions: bool = Field(True, description="A question not in English (detected by its letters, no LM "
                                   "call) is also said in English by the generator LM, once, and retrieval searches "
                                   "with both texts; an English question never costs the call.")

    # --- Ablation switches ---
    use_retrieval_loop: bool = True
    use_syntax_reflection: bool = True
    use_semantic_reflection: bool = True
    use_entailment: bool = True
    use_enrichment: bool = True

    # --- Language models ---
    lm: str = Field("local/qwen2.5-coder-1.5b", min_length=1, description="Generator LM (LiteLLM string or local/...).")
    judge_lm: str | None = Field(None, description="Judge LM; defaults to the generator's model.")
    # Model servers (vLLM, Ollama, llama.cpp's server, `reflect-sql models serve`): any OpenAI-compatible
    # one through LiteLLM, e.g. lm: openai/qwen2.5-coder-1.5b, lm_api_base: http://127.0.0.1:8080/v1.
    lm_api_base: str | None = Field(None, description="Base URL of the generator LM's server (LiteLLM api_base).")
    lm_api_key_env: str | None = Field(None, description="Environment variable holding the generator server's API "
                                       "key (the key itself never goes into a settings file).")
    judge_lm_api_base: str | None = Field(None, description="Base URL of the judge LM's server; defaults to "
                                          "lm_api_base when the judge runs the generator's model.")
    judge_lm_api_key_env: str | None = Field(None, description="Environment variable holding the judge server's API "
                                             "key; defaults to lm_api_key_env when the judge runs the generator's model.")
    lm_temperature: float = Field(0.0, ge=0.0, le=2.0)
    lm_max_tokens: int = Field(512, ge=16, description="Completion budget of any call without a role budget below.")
    # Completion budgets per role: a small model that loops (one rationale repeated four times) stops
    # here instead of paying ~7 tokens/s for text nobody reads. Generous enough for BIRD's longest SQL.
    generator_max_tokens: int = Field(384, ge=16, description="Completion budget of the SQL generator.")
    repairer_max_tokens: int = Field(384, ge=16, description="Completion budget of the syntax repairer.")
    retrieval_judge_max_tokens: int = Field(256, ge=16, description="Completion budget of the retrieval judge.")
    semantic_judge_max_tokens: int = Field(256, ge=16, description="Completion budget of the semantic judge.")
    entailment_judge_max_tokens: int = Field(192, ge=16, description="Completion budget of the entailment judge.")
    # expected by default: on 16 labelled BIRD cases with the embedded 1.5B it raised the entailment
    # judge's AUC from 0.69 to 0.78 and both judges' agreement at their thresholds
    # (experiments/results/judge_scale.md).
    judge_scores: Literal["stated", "expected"] = Field(
        "expected", description="stated: the integers a judge writes; expected: each score's expected value over the "
        "probabilities the model gave its digits (G-Eval style, read from the reply's token log-probabilities; a judge "
        "LM that cannot return them, such as Anthropic's, is read as stated).")
    judge_form: Literal["scores", "checks"] = Field(
        "scores", description="How the semantic and entailment judges answer: scores, a rationale and an integer per "
        "criterion (the paper's rubric); checks, a True/False question per criterion and no rationale, placed on the "
        "same scale (by the probability of True under judge_scores: expected). A compiled program's judges, "
        "compiled in the other form, are then left bare.")
    lm_timeout_s: float = Field(120.0, gt=0)
    lm_retries: int = Field(2, ge=0)
    lm_context_tokens: int = Field(4096, ge=512, description="Context size of the embedded LM.")
    lm_threads: int = Field(2, ge=1, description="CPU threads of the embedded LM.")
    lm_cache: bool = Field(True, description="Use the DSPy disk cache.")
    lm_record_dir: Path | None = Field(None, description="Record every LM call (request hash -> response) into this cassette dir.")
    lm_replay_dir: Path | None = Field(None, description="Serve LM calls only from this cassette dir; a missing call is an error.")
    json_adapter_fallback: bool = Field(True, description="Retry an unparsable ChatAdapter reply with JSONAdapter (one more LM call).")
    adapter: Literal["chat", "json"] = Field(
        "chat", description="How every predictor asks for its fields: chat, DSPy's ChatAdapter ([[ ## field ## ]] "
        "sections); json, DSPy's JSONAdapter, whose reply an LM with structured outputs (the embedded engine) is "
        "constrained to by the signature's JSON schema, so it always parses.")
    # dspy by default: measured with the 0.5B (experiments/results/pipeline_speed.md), the shared head
    # computed no fewer prompt tokens per call and broke ChatAdapter's format more often.
    prompt_layout: Literal["shared_head", "dspy"] = Field(
        "dspy", description="shared_head: every call for a question opens with the same question, evidence and "
        "schema context, so the embedded engine's prefix cache serves them; dspy: DSPy's layout, instructions first.")
    judge_diagnosis_chars: int | None = Field(
        None, ge=20, description="With adapter json: the longest diagnosis the semantic and entailment judges may "
        "write, enforced by the engine's JSON grammar (the diagnosis is the generator's feedback); none: unbounded.")
    prompt_template: Literal["dspy", "compact"] = Field(
        "dspy", description="With adapter json: dspy, DSPy's JSONAdapter template; compact, the output fields listed "
        "once and no JSON skeleton (the engine's schema constrains the reply): a fifth to a third fewer characters "
        "in each role's prompt tail (lm/adapters.py).")

    # --- Query execution ---
    query_timeout_s: float = Field(30.0, gt=0)
    max_rows: int = Field(1000, ge=1)
    sample_values_per_column: int = Field(5, ge=0)
    max_distinct_values_per_column: int = Field(
        20_000, ge=1, description="Distinct values of one column read into the KB's value index; a column at the cap "
        "may hold values the index lacks, and the KB build names it.")
    pg_max_plan_cost: float = Field(1e8, gt=0, description="PostgreSQL EXPLAIN cost above which a query is refused.")
    pg_allow_superuser: bool = Field(False, description="Query PostgreSQL as a superuser, or as a role that may read, "
                                     "write or run server files (--allow-superuser). Such a role reads server files "
                                     "even inside a READ ONLY transaction (pg_read_file, lo_import), and only the SQL "
                                     "gate would stop it; refused by default, warned about on every run when allowed.")
    max_value_bytes: int = Field(64 * 2**20, ge=2**20, le=10**9, description="Largest string or blob one SQLite value may "
                                 "grow to: a query that builds a bigger one (randomblob(1e9)) fails instead of taking the memory.")
    sqlite_busy_timeout_s: float = Field(5.0, ge=0, description="How long a SQLite read waits for another process's write lock.")

    # --- Paths ---
    kb_dir: Path = Field(default_factory=lambda: Path("kb_store"))
    kb_store: Literal["chroma", "pgvector"] = Field(
        "chroma", description="Where a KB build puts the KB's vectors: chroma (files in the KB directory) or pgvector "
        "(PostgreSQL, kb_store_url). A built KB is then read from the store its directory records.")
    kb_store_url: str | None = Field(None, description="PostgreSQL URL of the pgvector store; none: a local server "
                                     "(the pgserver package) in the cache directory.")
    cache_dir: Path = Field(default_factory=lambda: _default_cache_root() / "dspy")
    model_dir: Path = Field(default_factory=lambda: _default_cache_root() / "models")
    mlflow_uri: str = Field("sqlite:///mlruns.db")

    @model_validator(mode="after")
    def _check_scales_and_weights(self) -> "Settings":
        problems = []
        for key, scale in (("theta_r", RETRIEVAL_SCALE), ("theta_s", SEMANTIC_SCALE), ("theta_e", ENTAILMENT_SCALE)):
            value, lo, hi = getattr(self, key), scale.low, scale.high
            if not lo <= value <= hi:
                problems.append(f"{key}={value} lies outside its judge's scale [{lo:g}, {hi:g}]")
        weights = [getattr(self, k) for k in SEMANTIC_WEIGHT_KEYS]
        if not math.isclose(sum(weights), 1.0, abs_tol=1e-6):
            shown = ", ".join(f"{k}={w:g}" for k, w in zip(SEMANTIC_WEIGHT_KEYS, weights))
            problems.append(f"semantic weights must sum to 1 ({shown} sum to {sum(weights):g})")
        if self.judge_pool and (self.selection == "paper" or not self.use_entailment):
            problems.append("judge_pool needs selection vote or judge_vote and use_entailment: true "
                            f"(it judges the pool for selection; got selection={self.selection}, "
                            f"use_entailment={self.use_entailment})")
        if self.judge_diagnosis_chars is not None and self.adapter != "json":
            problems.append("judge_diagnosis_chars needs adapter json (the bound is part of the reply's JSON schema)")
        if self.prompt_template == "compact" and self.adapter != "json":
            problems.append("prompt_template compact needs adapter json (ChatAdapter parses the sections its own "
                            "template teaches)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def retrieval_weights(self) -> dict[str, float]:
        """The ``retrieval_*`` scoring settings, keyed without the prefix (``table_name``: 0.35, ...)."""
        return {key[len(RETRIEVAL_WEIGHT_PREFIX):]: getattr(self, key) for key in RETRIEVAL_WEIGHT_KEYS}

    @property
    def effective_judge_lm(self) -> str:
        return self.judge_lm or self.lm

    def api_of(self, role: str) -> tuple[str | None, str | None]:
        """(api_base, api_key_env) of the generator or the judge: a judge on the generator's model
        uses the generator's server unless it names its own."""
        if role == "generator":
            return self.lm_api_base, self.lm_api_key_env
        shared = self.judge_lm is None or self.judge_lm == self.lm
        return (self.judge_lm_api_base or (self.lm_api_base if shared else None),
                self.judge_lm_api_key_env or (self.lm_api_key_env if shared else None))

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


RETRIEVAL_WEIGHT_KEYS = tuple(key for key, field in Settings.model_fields.items()
                              if (field.json_schema_extra or {}).get("retrieval_weight"))


def _format_validation_error(err: ValidationError, origin: Mapping[str, str]) -> str:
    lines = []
    for item in err.errors():
        key = ".".join(str(p) for p in item["loc"]) or "settings"
        where = f" (from {origin[key]})" if key in origin else ""
        msg = item["msg"]
        if item["type"] == "extra_forbidden":
            msg = "unknown setting"
        lines.append(f"{key}{where}: {msg}")
    return "invalid settings: " + "; ".join(lines)


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    data = read_yaml_mapping(path, "config file", SettingsError)
    # Experiment configs may carry other sections (dataset, variants); settings live under `settings:`
    # there, or at the top level in a plain settings file.
    if "settings" in data and isinstance(data["settings"], dict):
        return dict(data["settings"])
    return data


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    fields = Settings.model_fields
    out = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX):].lower()
        if key in fields:
            out[key] = value
    return out


def parse_assignments(pairs: list[str] | None) -> dict[str, Any]:
    """``["theta_r=5", "lm=openai/gpt-4o"]`` -> dict, values parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SettingsError(f"--set expects key=value, got {pair!r}")
        key, raw = pair.split("=", 1)
        key = key.strip()
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            out[key] = raw
    return out


def load_settings(
    config: str | os.PathLike | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merge defaults < YAML < environment < overrides, and validate the result."""
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if config is not None:
        for k, v in read_yaml(config).items():
            merged[k] = v
            origin[k] = f"config {config}"
    for k, v in env_overrides(environ).items():
        merged[k] = v
        origin[k] = f"environment {ENV_PREFIX}{k.upper()}"
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        merged[k] = v
        origin[k] = "command line"
    try:
        return Settings(**merged)
    except ValidationError as err:
        raise SettingsError(_format_validation_error(err, origin)) from None
