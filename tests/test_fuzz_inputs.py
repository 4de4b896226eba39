"""Property tests of `cadedit fix` on hostile inputs, through the CLI (typer's CliRunner, in process):
random damage to a model folder (config.json fields, the safetensors file, tokenizer.json, the chat
template) and random instructions (any unicode, control characters, lone surrogates, line references
with huge numbers). Whatever the input, cadedit ends with a one-line error (exit 1; 2 for usage) or
runs the edit (exit 0, or 3 when its candidate fails the checks), never with a traceback or an
"internal error", and the user's file keeps its bytes unless the edit was written."""

from __future__ import annotations

import contextlib
import json
import shutil
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cadedit.cli import root as cli
from tests.test_tries_cli import _models, load_once  # noqa: F401 - fixtures: each model folder loads once

SOURCE = b"def add(a, b):\n    return a - b\n"


def fix(folder: Path, model: Path, instruction: str, *args: str):
    """`cadedit fix a.py INSTRUCTION` in `folder` (the diff names the file relative to it)."""
    (folder / "a.py").write_bytes(SOURCE)
    with contextlib.chdir(folder):
        return CliRunner().invoke(
            cli.app,
            [
                "fix",
                "a.py",
                instruction,
                "--model",
                str(model),
                "--dtype",
                "fp32",
                "--threads",
                "1",
                "--tries",
                "1",
                "--max-new-tokens",
                "24",
                *args,
            ],
        )


def assert_clean_ending(result, folder: Path) -> None:
    """Exit 0 or 3 (the edit ran), 1 with exactly one error line, or 2 (usage); never a traceback or an
    internal error; the file untouched (nothing here writes)."""
    text = result.output
    assert result.exit_code in (0, 1, 2, 3), (result.exit_code, text, result.exception)
    assert "Traceback" not in text and "internal error" not in text, text
    if result.exit_code == 1:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, text
    assert (folder / "a.py").read_bytes() == SOURCE


# -- hostile model folders -------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
CONFIG_FIELDS = [
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "max_position_embeddings",
    "tie_word_embeddings",
    "model_type",
    "rope_scaling",
    "rope_parameters",
    "eos_token_id",
    "torch_dtype",
]
NUMBER_TEXTS = [
    "1e400",
    "-1e400",
    "-0",
    "1e-400",
    "99999999999999999999999999",
    "0.5",
]  # JSON that json.dumps never writes


@st.composite
def damage(draw):
    """One damaging change to a model folder: (file, what is done to it)."""
    kind = draw(
        st.sampled_from(
            [
                "config-field",
                "config-number",
                "config-drop",
                "config-whole",
                "truncate",
                "safetensors-header",
                "tokenizer-id",
                "tokenizer-model",
                "template",
                "eos",
            ]
        )
    )
    if kind == "config-field":
        return kind, (draw(st.sampled_from(CONFIG_FIELDS)), draw(JSON_VALUES))
    if kind == "config-number":
        return kind, (draw(st.sampled_from(CONFIG_FIELDS)), draw(st.sampled_from(NUMBER_TEXTS)))
    if kind == "config-drop":
        return kind, draw(st.sampled_from(CONFIG_FIELDS))
    if kind == "config-whole":
        return kind, draw(JSON_VALUES)
    if kind == "truncate":
        name = draw(st.sampled_from(["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]))
        return kind, (name, draw(st.floats(0.0, 0.999)))
    if kind == "safetensors-header":
        return kind, draw(
            JSON_VALUES
            | st.dictionaries(
                st.sampled_from(["lm_head.weight", "model.norm.weight"]), JSON_VALUES, min_size=1, max_size=2
            )
        )
    if kind == "tokenizer-id":
        return kind, (draw(st.sampled_from(["F", "i", "x", "Ġ"])), draw(st.integers(-(2**40), 2**40)))
    if kind == "tokenizer-model":
        return kind, draw(JSON_VALUES)
    if kind == "template":
        parts = st.sampled_from(
            [
                "{{",
                "}}",
                "{%",
                "%}",
                "{% for m in messages %}",
                "{% endfor %}",
                "{{ m.content }}",
                "{% if %}",
                "{{ raise_exception('no') }}",
                "{% include 'x' %}",
                "{{ 1/0 }}",
                "{{ messages[5].content }}",
                "{% set x = range(10**9)|list %}",
                "<|im_start|>",
            ]
        )
        return kind, draw(st.lists(parts | st.text(max_size=5), max_size=6).map("".join))
    return kind, draw(JSON_VALUES)  # eos: tokenizer_config.json's eos_token


def apply(folder: Path, kind: str, value) -> None:
    """Make one damaging change; one to a JSON file an earlier change left unreadable (or not an object)
    is left out."""
    try:
        _apply(folder, kind, value)
    except (ValueError, TypeError, AttributeError, KeyError):  # the file is damaged already
        pass


def _apply(folder: Path, kind: str, value) -> None:
    config = folder / "config.json"
    if kind in ("config-field", "config-number", "config-drop"):
        data = json.loads(config.read_text())
        field = value if kind == "config-drop" else value[0]
        data.pop(field, None)
        text = json.dumps(data)
        if kind == "config-field":
            text = json.dumps({**data, field: value[1]})
        elif kind == "config-number":
            text = text[:-1] + f', "{field}": {value[1]}}}'
        config.write_text(text)
    elif kind == "config-whole":
        config.write_text(json.dumps(value))
    elif kind == "truncate":
        path = folder / value[0]
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * value[1])])
    elif kind == "safetensors-header":
        path = folder / "model.safetensors"
        data = path.read_bytes()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.dumps(value).encode()
        path.write_bytes(struct.pack("<Q", len(header)) + header + data[8 + n :])
    elif kind in ("tokenizer-id", "tokenizer-model"):
        spec = json.loads((folder / "tokenizer.json").read_text())
        if kind == "tokenizer-id":
            spec["model"]["vocab"][value[0]] = value[1]
        else:
            spec["model"] = value
        (folder / "tokenizer.json").write_text(json.dumps(spec))
    elif kind == "template":
        (folder / "chat_template.jinja").write_text(value)
    else:
        data = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**data, "eos_token": value}))


@settings(max_examples=50, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(changes=st.lists(damage(), min_size=1, max_size=2))
@example(changes=[("template", "{{ 1/0 }}")])  # found by this test: a template's own exception was internal
@example(changes=[("tokenizer-id", ("i", 768))])  # found by this test: one id at the vocabulary's end, an IndexError
@example(changes=[("config-number", ("vocab_size", "1e400"))])
def test_a_damaged_model_folder_is_a_one_line_error_or_works(tiny_dir, changes):
    with tempfile.TemporaryDirectory(prefix="cadedit-fuzz-") as tmp:
        folder = Path(tmp) / "model"
        shutil.copytree(tiny_dir, folder)
        for kind, value in changes:
            apply(folder, kind, value)
        assert_clean_ending(fix(Path(tmp), folder, "Fix the bug."), Path(tmp))


# -- hostile instructions --------------------------------------------------------------------------

ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)  # control chars, lone surrogates
HUGE = st.integers(0, 10**40)
REFERENCES = st.one_of(
    st.builds(lambda n: f"Fix line {n}.", HUGE),
    st.builds(lambda a, b: f"Fix lines {a}-{b}.", HUGE, HUGE),
    st.builds(lambda n, m: f"line {n} of x.py and line {m}", HUGE, HUGE),
    st.builds(lambda n: f"Fix `add` at line -{n}, L{n}, :{n}.", HUGE),
    st.builds(lambda n, k: f"line {n} " * k, HUGE, st.integers(1, 200)),
)
SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)  # what argv bytes that are not UTF-8 become
INSTRUCTIONS = st.one_of(
    ANY_TEXT,
    REFERENCES,
    st.builds(lambda a, b: a + b, REFERENCES, ANY_TEXT),
    st.builds(lambda a, c, b: a + c + b, ANY_TEXT, SURROGATE, ANY_TEXT),
)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(instruction=INSTRUCTIONS)
def test_any_instruction_is_a_one_line_error_or_an_edit(tiny_dir, instruction):
    with tempfile.TemporaryDirectory(prefix="cadedit-fuzz-") as tmp:
        assert_clean_ending(fix(Path(tmp), tiny_dir, instruction), Path(tmp))
