"""System prompts under a key of a YAML / JSON / TOML file or a Python module: read, never run."""

from __future__ import annotations

import pytest

from pytest_orbench.core.prompt_file import KeyAbsent, PromptFileError, extract, split

BOT_YAML = "name: support\nmodel: gpt-4o-mini\ntemperature: 0\nprompts:\n  support: |\n    You are a support assistant.\n  list: [a, b]\n"
BOT_PY = '''import textwrap
MODEL = "gpt-4o-mini"
SYSTEM_PROMPT = (
    "You are a support assistant. "
    "Be brief."
)
PROMPTS: dict[str, str] = {"support": """Answer orders.""", "n": 3}
DEDENTED = textwrap.dedent("""  x""")
SYSTEM_PROMPT = "the last assignment wins"
'''


@pytest.mark.parametrize(("spec", "expected"), [
    ("config/bot.yaml#prompts.support", ("config/bot.yaml", "prompts.support")),
    ("app/prompts.py#SYSTEM_PROMPT", ("app/prompts.py", "SYSTEM_PROMPT")),
    ("bot.JSON#a", ("bot.JSON", "a")),
    ("bot.yaml#", ("bot.yaml", "")),
    ("bot.yaml", ("bot.yaml", None)),
    ("prompts/v#2.txt", ("prompts/v#2.txt", None)),  # a '#' in a text file's name is part of the name
    ("notes#support", ("notes#support", None)),
])
def test_split(spec: str, expected: tuple[str, str | None]) -> None:
    assert split(spec) == expected


@pytest.mark.parametrize(("text", "path", "key", "expected"), [
    (BOT_YAML, "bot.yaml", "prompts.support", "You are a support assistant.\n"),
    (BOT_YAML, "bot.yml", "prompts.list.1", "b"),
    ('{"bot": {"system": "Be kind."}}', "bot.json", "bot.system", "Be kind."),
    ('[tool.bot]\nsystem = """Be kind."""\n', "bot.toml", "tool.bot.system", "Be kind."),
    (BOT_PY, "prompts.py", "SYSTEM_PROMPT", "the last assignment wins"),
    (BOT_PY, "prompts.py", "PROMPTS.support", "Answer orders."),
    (BOT_YAML, "bot.yaml", "", BOT_YAML),  # bot.yaml#: the whole file, as text
    ("Be kind.", "system.txt", None, "Be kind."),
    ("Be kind.", "system.md", None, "Be kind."),
])
def test_extract(text: str, path: str, key: str | None, expected: str) -> None:
    assert extract(text, path, key) == expected


@pytest.mark.parametrize(("text", "path", "key", "error", "message"), [
    (BOT_YAML, "config/bot.yaml", None, PromptFileError,
     "config/bot.yaml is a YAML file, and sent whole its other keys would be part of the system prompt: name the key "
     "that holds the prompt (config/bot.yaml#system_prompt, dotted for nested keys), or send the whole file as text "
     "with config/bot.yaml#"),
    (BOT_PY, "app/prompts.py", None, PromptFileError, "app/prompts.py is a Python file, and sent whole its other names"),
    # A missing key once said only "has no 'prompts.sales' (in 'prompts.sales')": now what is there instead.
    (BOT_YAML, "bot.yaml", "prompts.sales", KeyAbsent, "bot.yaml has no 'prompts.sales': the keys of 'prompts' are support, list"),
    (BOT_YAML, "bot.yaml", "system_prompt", KeyAbsent,
     "bot.yaml has no 'system_prompt': its top-level keys are name, model, temperature, prompts"),
    (BOT_YAML, "bot.yaml", "prompts.list.5", KeyAbsent, "bot.yaml has no 'prompts.list.5': 'prompts.list' is a list of 2 items (0 to 1)"),
    (BOT_YAML, "bot.yaml", "prompts.sales.text", KeyAbsent,
     "bot.yaml has no 'prompts.sales' (looking for 'prompts.sales.text'): the keys of 'prompts' are support, list"),
    (BOT_YAML, "bot.yaml", "temperature.x", KeyAbsent, "bot.yaml has no 'temperature.x': 'temperature' is an int"),
    (BOT_PY, "prompts.py", "PROMPTS.sales", KeyAbsent, "prompts.py has no 'PROMPTS.sales': the keys of 'PROMPTS' are support, n"),
    (BOT_YAML, "bot.yaml", "temperature", PromptFileError, "bot.yaml#temperature is an int, not a string"),
    (BOT_YAML, "bot.yaml", "prompts", PromptFileError, "bot.yaml#prompts is a dict, not a string"),
    ("a: [", "bot.yaml", "a", PromptFileError, "bot.yaml is not valid YAML"),
    ("{", "bot.json", "a", PromptFileError, "bot.json is not valid JSON"),
    (BOT_PY, "prompts.py", "ANSWER", KeyAbsent, "prompts.py assigns no 'ANSWER' at module level"),
    (BOT_PY, "prompts.py", "DEDENTED", PromptFileError, "prompts.py: DEDENTED is computed when the module runs (line 8)"),
    (BOT_PY, "prompts.py", "PROMPTS.n", PromptFileError, "prompts.py#PROMPTS.n is an int, not a string"),
    ("def f(:\n", "prompts.py", "X", PromptFileError, "prompts.py is not valid Python"),
])
def test_extract_errors_name_the_fix(text: str, path: str, key: str | None, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        extract(text, path, key)
    assert message in str(caught.value)


def test_a_python_module_is_read_not_run() -> None:
    # A pull request's module that would act when imported: reading its prompt runs none of it.
    text = 'raise SystemExit("ran")\nimport os\nos.environ["PWNED"] = "1"\nSYSTEM_PROMPT = "Be kind."\n'
    assert extract(text, "prompts.py", "SYSTEM_PROMPT") == "Be kind."


def test_a_bare_annotation_does_not_unset_the_prompt() -> None:
    # `SYSTEM_PROMPT: str` after the assignment declares a type and leaves the value as it was (on a base
    # branch, "assigns no 'SYSTEM_PROMPT'" read as "the base has no system prompt").
    assert extract('SYSTEM_PROMPT = "Be kind."\nSYSTEM_PROMPT: str\n', "prompts.py", "SYSTEM_PROMPT") == "Be kind."


@pytest.mark.parametrize("value", ['{["a"]: "Be kind."}', '{{"a"}: "x"}'])
def test_a_literal_python_cannot_build_is_a_prompt_file_error(value: str) -> None:
    # ast.literal_eval raises TypeError (an unhashable key) for these: once a traceback instead of a usage error.
    with pytest.raises(PromptFileError, match="prompts.py: PROMPTS is computed when the module runs"):
        extract(f"PROMPTS = {value}\n", "prompts.py", "PROMPTS.a")
