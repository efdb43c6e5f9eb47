"""Reading a workflow file: its size, its encoding and its TOML or JSON syntax, each refusal naming the file."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from taskqueues.errors import shown

from .model import Workflow, WorkflowError
from .parse import parse_workflow

__all__ = ["MAX_FILE_BYTES", "load_workflow"]

MAX_FILE_BYTES = 16 * 1024 * 1024


def load_workflow(path: str | Path) -> Workflow:
    """Read and validate a ``.toml`` or ``.json`` workflow file; every refusal names the file first."""
    path = Path(path)
    source = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise WorkflowError(source, [f"file is {size} bytes, over the limit of {MAX_FILE_BYTES}"])
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkflowError(source, [f"cannot read the file: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise WorkflowError(source, [f"not UTF-8 text: {exc.reason} at byte {exc.start}"]) from None
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise WorkflowError(source, [f"unknown file type {shown(suffix)}: use .toml or .json"])
    data = _decode(text, suffix, source)
    if not isinstance(data, dict):
        raise WorkflowError(source, [f"the top level must be a table, not {type(data).__name__}"])
    return parse_workflow(data, source)


def _decode(text: str, suffix: str, source: str) -> object:
    """The document a TOML or JSON text holds; its syntax errors, and the values no Python object can
    hold (an integer of more than 4300 digits, arrays nested past the recursion limit), as WorkflowError."""
    syntax = "TOML" if suffix == ".toml" else "JSON"
    try:
        return tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"JSON syntax: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    except tomllib.TOMLDecodeError as exc:
        problem = f"TOML syntax: {exc}"
    except RecursionError:
        problem = f"{syntax} syntax: arrays or tables nested too deeply to read"
    except ValueError as exc:  # int() of a number over Python's limit of 4300 digits
        problem = f"{syntax} syntax: a number is too long to read ({str(exc).split(';')[0]})"
    raise WorkflowError(source, [problem])
