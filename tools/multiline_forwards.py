"""Forwards of scripted multi-line answers (docs/measurements/multiline-edits.md), run from the repo root:
    PYTHONPATH=. python tools/multiline_forwards.py [GGUF] [COSTS]

COSTS (a cost curve as JSON, e.g. `forward_costs` of `bench multiline --json`): instead, each answer's
forwards and their cost in one-token steps under that curve, drafts from the fixed schedule beside
drafts fitted to the curve (cadedit.backends.forward_cost.FittedLengths).

Scripted answers through the real decode loop with Qwen2.5's tokenizer (from the 0.5B GGUF) and a
model that is never asked (zero logits; the script picks): forwards for an answer equal to the region
and for one with a name renamed on every third line, as the model writes it (the file's indentation)."""

import inspect
import json
import sys
from pathlib import Path

import numpy as np

from cadedit.backends.llama.gguf_file import read_metadata, gguf_tokenizer
from cadedit.backends.vocab import token_bytes_of
from cadedit.prompt.fence import FenceCursor
from cadedit.decode.verify import VerifyDrafter
from cadedit.decode.loop import decode, script_sampler
from cadedit.backends.model import encode
from cadedit.prompt.regions import dedent, common_indent
from tests.test_multiline_drafts import (
    DATA,
    changed_tokens,
    region_of,
    renamed_every_third_line,
    renamed_everywhere,
    wrapped_in_try,
)

P = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / ".cache/cadedit-dev/qwen2.5-coder-0.5b-instruct.gguf"
meta = read_metadata(P)
tok = gguf_tokenizer(P, meta)
TB = token_bytes_of(tok, n_logits=len(meta["tokenizer.ggml.tokens"]))
EOS = frozenset({tok.convert_tokens_to_ids("<|im_end|>")})


def enc(t):
    return encode(tok, t)


HAS_ALSO = "also" in inspect.signature(VerifyDrafter).parameters


class FakeLM:
    def feed(self, ids, keep=1):
        return np.zeros((keep, len(TB)), dtype=np.float32)

    def crop(self, n):
        pass


CURVE = None
if len(sys.argv) > 2:
    from cadedit.backends.forward_cost import CostCurve, FittedLengths
    from cadedit.decode.verify import Schedule

    CURVE = CostCurve.from_json(json.loads(sys.argv[2]))


def run(dedented, indented, answer, lengths=None):
    steps = []
    d = VerifyDrafter(
        dedented,
        enc,
        TB,
        8000,
        **({"also": (indented, "")} if HAS_ALSO else {}),
        **({"schedule": lengths} if lengths is not None else {}),
    )
    out = decode(
        FakeLM(),
        FenceCursor(TB, EOS, "```"),
        [1, 2],
        None,
        script_sampler(answer, TB, enc),
        8000,
        lambda stats, step: steps.append(step),
        d,
    )
    if lengths is None:
        return out.stats.forward_passes, len(out.ids)
    cost = sum(CURVE.cost(1 + s.drafted) for s in steps if not s.prompt)  # the pending token and the draft
    return out.stats.forward_passes, cost


def case(name, region):
    ind = common_indent(region)
    ded = dedent(region, ind).rstrip("\n") + "\n```\n"
    full = region.rstrip("\n") + "\n```\n"
    ren = renamed_every_third_line(full, name.endswith(".py"))
    return ded, full, ren, renamed_everywhere(full)


rows = []
for layout in ["method", "nested-function", "class-body", "decorated-method", "module-statements", "javascript-method"]:
    name, a, b = region_of(layout)
    lines = (DATA / name).read_text().splitlines(keepends=True)
    rows.append((layout, *case(name, "".join(lines[a - 1 : b]))))
src = open("/usr/lib/python3.11/textwrap.py").read().splitlines(keepends=True)
s = next(i for i, line in enumerate(src) if "def _wrap_chunks" in line)
e = next(i for i in range(s + 1, len(src)) if src[i].startswith("    def "))
ded, full, _, _ = case("textwrap.py", "".join(src[s:e]))
rows.append(
    ("textwrap _wrap_chunks, cur_line -> current_line", ded, full, full.replace("cur_line", "current_line"), None)
)
if CURVE is not None:
    for layout, ded, full, ren, _ in rows:
        cells = []
        for answer in (full, ren):
            n = len(enc(answer))
            for lengths in (Schedule(), FittedLengths(CURVE)):
                f, c = run(ded, full, answer, lengths)
                cells.append(f"{f} / {c:.0f}")
            cells.insert(len(cells) - 2, str(n))
        print(f"| {layout} | " + " | ".join(cells) + " |")
    sys.exit(0)
for layout, ded, full, ren, everywhere in rows:
    f1, n1 = run(ded, full, full)
    cells = [n1, f1]
    wrapped = wrapped_in_try(full) if layout in ("method", "nested-function", "decorated-method") else None
    for answer in (ren, everywhere, wrapped):
        if answer is None:  # the textwrap rename is one already; a try/except wraps a function's body
            cells += ["", "", "", "", ""]
            continue
        f2, n2 = run(ded, full, answer)
        t, lines_changed = changed_tokens(tok, full, answer)
        cells += [n2, f2, t, lines_changed, t + 3 * lines_changed + 5]
    print(f"| {layout} | " + " | ".join(map(str, cells)) + " |")
