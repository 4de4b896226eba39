"""A model folder's tokenizer: its tokenizer.json through the `tokenizers` library, its special
tokens from tokenizer_config.json, and its chat template rendered with Jinja as transformers does.

Why not transformers' AutoTokenizer: importing and loading it costs several times what reading the
same tokenizer.json directly does, on every cold `cadedit fix` (docs/measurements/speed.md). The interface is the
part of transformers' tokenizer the rest of cadedit uses (encode, decode, the special ids, the
vocabulary, apply_chat_template), so either can be handed to it (tests build theirs with
transformers). Prompts are the same text and ids (tests/test_qwen2.py compares them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from cadedit.errors import ModelError


class Tokenizer:
    def __init__(self, backend, config: dict, chat_template: str | None, template_source: str = "the model"):
        self.backend_tokenizer = backend
        self.chat_template = chat_template
        self.template_source = template_source  # where the template came from (a file, a field), for errors
        self.added_tokens_decoder = backend.get_added_tokens_decoder()
        self._specials = {
            name: _content(config.get(name)) for name in ("bos_token", "eos_token", "pad_token", "unk_token")
        }
        self._template = None

    @classmethod
    def from_folder(cls, folder: Path) -> "Tokenizer":
        from tokenizers import Tokenizer as Backend

        path = folder / "tokenizer.json"
        try:
            backend = Backend.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception for a bad file
            raise ModelError(
                f"{path}: cannot read the tokenizer ({str(exc)[:160]})",
                hint="copy the model's tokenizer.json next to its config.json",
            ) from None
        config = _read_json(folder / "tokenizer_config.json")
        template = folder / "chat_template.jinja"
        try:
            chat_template = template.read_text(encoding="utf-8") if template.is_file() else config.get("chat_template")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(
                f"{template}: cannot read the chat template ({exc})", hint="copy the model's tokenizer files again"
            ) from None
        source = str(template) if template.is_file() else f"{folder / 'tokenizer_config.json'} chat_template"
        if isinstance(chat_template, list):  # the named-templates form: the default one
            chat_template = next(
                (t.get("template") for t in chat_template if isinstance(t, dict) and t.get("name") == "default"), None
            )
        return cls(backend, config, chat_template if isinstance(chat_template, str) else None, source)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def get_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def convert_ids_to_tokens(self, index: int) -> str | None:
        return self.backend_tokenizer.id_to_token(index)

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.backend_tokenizer.token_to_id(token)

    def _special_id(self, name: str) -> int | None:
        token = self._specials[name]
        return None if token is None else self.backend_tokenizer.token_to_id(token)

    @property
    def eos_token_id(self) -> int | None:
        return self._special_id("eos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self._special_id("pad_token")

    @property
    def unk_token_id(self) -> int | None:
        return self._special_id("unk_token")

    def apply_chat_template(
        self, messages: list[dict], tokenize: bool = False, add_generation_prompt: bool = True
    ) -> str:
        """The chat as the model's template writes it (text only: tokenize must be False)."""
        if tokenize:
            raise ValueError("apply_chat_template: only text (tokenize=False)")
        if self.chat_template is None:
            raise ModelError("the model has no chat template", hint="use an Instruct model")
        if self._template is None:
            self._template = _compile(self.chat_template, self.template_source)
        import jinja2

        specials = {name: token for name, token in self._specials.items() if token is not None}
        try:
            with _bounded(TEMPLATE_STEPS):
                return self._template.render(
                    messages=messages,
                    tools=None,
                    documents=None,
                    add_generation_prompt=add_generation_prompt,
                    **specials,
                )
        except _TooMuchWork:
            raise ModelError(
                f"{self.template_source}: the chat template did not finish within {TEMPLATE_STEPS:,} "
                "steps (a loop in it?)",
                hint="use an Instruct model with a plain chat template",
            ) from None
        except jinja2.exceptions.TemplateError as exc:  # raise_exception() in the template, or its sandbox
            raise ModelError(
                f"{self.template_source}: the chat template refused the prompt ({exc})",
                hint="use an Instruct model whose template takes a system and a user message",
            ) from None
        except Exception as exc:  # noqa: BLE001 - the template is the model folder's code: 1/0, None + 1 ...
            raise ModelError(
                f"{self.template_source}: the chat template failed ({type(exc).__name__}: {str(exc)[:120]})",
                hint="use an Instruct model with a plain chat template",
            ) from None


TEMPLATE_STEPS = 2_000_000  # lines of the compiled template a chat may run (Qwen's runs a few hundred)


class _TooMuchWork(Exception):
    pass


class _bounded:
    """Count the lines the compiled template runs (its code's file is "<template>") and stop it past
    `steps`: a template is code from the model folder, and nested loops in one never finished."""

    def __init__(self, steps: int):
        self.steps, self.left = steps, steps

    def _trace(self, frame, event, arg):
        if frame.f_code.co_filename != "<template>":
            return None
        return self._line

    def _line(self, frame, event, arg):
        if event == "line":
            self.left -= 1
            if self.left < 0:
                raise _TooMuchWork
        return self._line

    def __enter__(self):
        import sys

        self._previous = sys.gettrace()
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc):
        import sys

        sys.settrace(self._previous)
        return False


def _content(token) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) else None


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ModelError(f"{path}: not readable JSON ({exc})", hint="copy the model's tokenizer files again") from None
    return data if isinstance(data, dict) else {}


# Jinja statements that load other templates: the sandbox has no loader (nothing outside the template
# is read), so a template that uses one cannot render.
_LOADS = {"Include": "include", "Import": "import", "FromImport": "from ... import", "Extends": "extends"}


def _compile(source: str, where: str = "the model"):
    """The template in the sandbox transformers renders chat templates in, with its helpers; one that
    loads other templates ({% include %}, import, extends) is a one-line error naming where it is."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        tree = env.parse(source)
        loads = next(
            (
                _LOADS[type(node).__name__]
                for node in tree.find_all(tuple(getattr(jinja2.nodes, name) for name in _LOADS))
            ),
            None,
        )
        if loads is None:
            return env.from_string(tree)
    except jinja2.exceptions.TemplateError as exc:
        raise ModelError(f"{where}: the chat template does not compile ({exc})", hint="use an Instruct model") from None
    raise ModelError(
        f"{where}: the chat template uses {{% {loads} %}}, which would load another template; "
        "cadedit renders the template alone",
        hint="use a chat template without it",
    )
