"""System prompts kept in a text file, or under a key of a YAML / JSON / TOML file or a Python module.

`config/bot.yaml#prompts.support` names the string at that key; `app/prompts.py#SYSTEM_PROMPT` a
module-level string literal, read with `ast` (the module is never imported: no code of a pull request
runs to find its prompt, and the application's dependencies need not be installed). Without a key,
such a file is refused: sent whole, its other keys (a model, a temperature) would become part of the
system prompt, and a change to any of them would be reported as a system-prompt change.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

KINDS = {".yaml": "YAML", ".yml": "YAML", ".json": "JSON", ".toml": "TOML", ".py": "Python"}


class PromptFileError(ValueError):
    """The prompt cannot be read from the file as named; the message names the fix."""


class KeyAbsent(PromptFileError):
    """The file has no such key (on a base branch: that branch has no system prompt there). `what` is the
    message without what the file holds instead."""

    def __init__(self, what: str, there: str = "") -> None:
        super().__init__(f"{what}: {there}" if there else what)
        self.what = what


def split(spec: str) -> tuple[str, str | None]:
    """`'config/bot.yaml#prompts.support'` -> `('config/bot.yaml', 'prompts.support')`; `'x.yaml#'` -> `('x.yaml', '')`
    (the whole file); a spec without `#` after a YAML / JSON / TOML / Python file name -> `(spec, None)`."""
    path, sep, key = spec.rpartition("#")
    if sep and Path(path).suffix.lower() in KINDS:
        return path, key
    return spec, None


def kind(path: str) -> str | None:
    return KINDS.get(Path(path).suffix.lower())


def extract(text: str, path: str, key: str | None) -> str:
    """The system prompt in `text`, the content of `path`, as `key` names it (None: the file is the prompt)."""
    what = kind(path)
    if key == "" or what is None:
        return text
    example = "SYSTEM_PROMPT" if what == "Python" else "system_prompt"
    if key is None:
        raise PromptFileError(
            f"{path} is a {what} file, and sent whole its other {'names' if what == 'Python' else 'keys'} would be "
            f"part of the system prompt: name the key that holds the prompt ({path}#{example}, dotted for nested "
            f"keys), or send the whole file as text with {path}#")
    walked: list[str] = []
    if what == "Python":
        data: Any = _python(text, path, key.split(".", 1)[0])
        walked, parts = key.split(".")[:1], key.split(".")[1:]
    else:
        data, parts = _structured(text, path, what), key.split(".")
    for part in parts:
        walked.append(part)
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.lstrip("-").isdigit() and -len(data) <= int(part) < len(data):
            data = data[int(part)]
        else:
            missing = ".".join(walked)
            raise KeyAbsent(f"{path} has no {missing!r}" + ("" if missing == key else f" (looking for {key!r})"),
                            _what_is_there(data, ".".join(walked[:-1])))
    if not isinstance(data, str):
        name = type(data).__name__
        raise PromptFileError(f"{path}#{key} is {'an' if name[0] in 'aeiou' else 'a'} {name}, not a string: name the key "
                              "of the prompt text")
    return data


def _what_is_there(data: Any, where: str) -> str:
    """What the key that was not found could have been: the keys beside it, a list's indexes, or a value's type."""
    if isinstance(data, dict):
        names = [str(k) for k in data]
        shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        return (f"the keys of {where!r} are {shown}" if where else f"its top-level keys are {shown}") if names else \
            (f"{where!r} is empty" if where else "it holds no keys")
    if isinstance(data, list):
        return f"{where!r} is a list of {len(data)} items" + (f" (0 to {len(data) - 1})" if data else "")
    name = type(data).__name__
    return f"{where!r} is {'an' if name[0] in 'aeiou' else 'a'} {name}" if where else f"the file holds {'an' if name[0] in 'aeiou' else 'a'} {name}"


def _structured(text: str, path: str, what: str) -> Any:
    import tomllib  # (~15 ms for the two, imported only for a prompt kept in such a file)

    import yaml

    try:
        if what == "YAML":
            return yaml.safe_load(text)
        return json.loads(text) if what == "JSON" else tomllib.loads(text)
    except (yaml.YAMLError, ValueError) as exc:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise PromptFileError(f"{path} is not valid {what}: {' '.join(str(exc).split())[:200]}") from None


def _python(text: str, path: str, name: str) -> Any:
    """The value of the module's last top-level assignment to `name`, which must be a literal."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise PromptFileError(f"{path} is not valid Python: {exc.msg} (line {exc.lineno})") from None
    value: ast.expr | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
        elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name
              and node.value is not None):  # a bare `NAME: str` declares a type and leaves the value as it was
            value = node.value
    if value is None:
        raise KeyAbsent(f"{path} assigns no {name!r} at module level")
    try:
        return ast.literal_eval(value)
    except (ValueError, TypeError):  # TypeError: a literal that cannot be built, such as a list as a dict key
        raise PromptFileError(
            f"{path}: {name} is computed when the module runs (line {value.lineno}), and the module is read, not run: "
            "keep the prompt in a string literal (adjacent literals and triple quotes are fine) or in a text file"
        ) from None
