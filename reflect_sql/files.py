"""Reading the project's input files (configs, datasets, predictions, glossaries, tables.json) with
one set of clear errors: every problem names the file and is one ``error``, never a traceback; and
writing a file all at once (``atomic_file``), so a reader or a crash never meets half of it."""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from reflect_sql.errors import UserError


def read_text_file(path: str | Path, what: str, error: type[Exception] = UserError) -> str:
    """The UTF-8 text of ``path``; ``what`` names the file in messages ("config file", "glossary")."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8-sig")  # editors on Windows add a BOM
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a directory, not a file") from None
    except PermissionError:
        raise error(f"{what} {path} cannot be read: permission denied") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text: byte {exc.object[exc.start]:#04x} at position {exc.start}") from None


def read_json_file(path: str | Path, what: str, *, json_lines: bool = False, error: type[Exception] = UserError) -> Any:
    """The JSON value in ``path``. With ``json_lines`` a file that is not one JSON document is read as
    JSON lines (a list, one value per non-blank line); the error then names the first bad line."""
    text = read_text_file(path, what, error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if not json_lines:
            raise error(f"{what} {path} is not valid JSON: {exc}") from None
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise error(f"{what} {path} is neither JSON nor JSONL (line {number}: {exc.msg})") from None
    return records


def read_yaml_mapping(path: str | Path, what: str, error: type[Exception] = UserError) -> dict[str, Any]:
    """The mapping in ``path`` ({} for an empty file)."""
    # Imported here: yaml costs 40 ms, and the JSON readers (reflect-sql score) do not need it.
    import yaml

    text = read_text_file(path, what, error)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{what} {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{what} {path} must hold a mapping, not {type(data).__name__}")
    return data


@contextmanager
def atomic_file(path: str | Path, *, suffix: str = ".tmp", fsync: bool = False, mode: int = 0o644) -> Iterator[Path]:
    """Replace ``path`` whole: the block fills the temporary file this yields, and only then is it renamed
    over ``path``.

    The temporary file is ``.<name>.<random><suffix>`` in ``path``'s own directory (created if need be),
    so the rename is ``os.replace`` within one file system: a reader sees the old file or the new one,
    never a part. When the block ends, the file is flushed to disk if ``fsync``, given ``mode`` (mkstemp
    makes it 0600; what we write is meant to be read by others) and renamed into place. When the block
    or any of that raises, the temporary file is removed and ``path`` is left as it was.

        with atomic_file(out / "run.json") as tmp:
            tmp.write_text(text, encoding="utf-8")
    """
    # Imported here: tempfile costs some milliseconds, and the readers above serve `reflect-sql score`,
    # whose start-up stays lean.
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if fsync:
            fd = os.open(tmp, os.O_RDWR)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
