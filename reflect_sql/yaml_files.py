"""Reading the project's YAML files (configs, ablation sets, glossaries) with one set of clear errors."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from reflect_sql.errors import UserError


def read_yaml_mapping(path: str | Path, what: str, error: type[Exception] = UserError) -> dict[str, Any]:
    """The mapping in ``path`` ({} for an empty file). ``what`` names the file in messages ("config
    file", "glossary"); every problem (missing, not UTF-8, not YAML, not a mapping) is one ``error``
    that names the file, never a traceback."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # editors on Windows add a BOM
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text: byte {exc.object[exc.start]:#04x} at position {exc.start}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{what} {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{what} {path} must hold a mapping, not {type(data).__name__}")
    return data
