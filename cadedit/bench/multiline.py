"""Everyday multi-line edits (`cadedit bench multiline`): what an edit costs beside what it changes.

Contract: multiline(...) runs each case of a corpus folder (corpus/multiline: cases.jsonl and
files/; its README says how a case is judged) as `cadedit fix` runs it -- scope from the
instruction, verify mode, one candidate, `--tries` tries -- and reports per case: forward passes,
new tokens, changed tokens and lines (the answer against the file, token by token), the forward
bound (changed tokens + 3 per changed line + 5), the token-level floor (the prompt tokens fed and
the copied tokens as one prefill of that many tokens, each changed token one step; measured right
after the case on the loaded model: one feed of that many tokens from an empty cache, as the decode
feeds a prompt, then a step's median, so the floor and the wall meet the machine in the same state),
wall seconds, and whether the answer does what was asked. floor_flat (every prefilled token at the
rate of a FLOOR_SPAN-token prefill and a step's median, both measured once before the cases: bench
e2e's floor) is kept beside it.
Summaries per part of the corpus (`tune`, `heldout`): the median of wall / floor, the cases within
the forward bound, the cases done as asked.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import statistics
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer

from cadedit.bench.options import BackendOpt, DtypeOpt, JsonOpt, ModelOpt, ThreadsOpt
from cadedit.backends.model_files import gguf_path
from cadedit.results import Decoded, DecodeStats
from cadedit.text.resolve import resolve
from cadedit.errors import CadeditError, ModelError
from cadedit.settings import CONTEXT_LINES, DEFAULT_DTYPE
from cadedit.bench.running import _load_model, _model_meta, out, run_corpora
from cadedit.cli.common import Scripted, say, scripted
from cadedit.text.document import Document
from cadedit.options import EditOptions, Mode
from cadedit.backends import hardware
from cadedit.backends.forward_cost import forward_costs
from cadedit.backends.model import CachedLM, encode, language_model, new_cache
from cadedit.bench.peers import LOOKUP_TOKENS
from cadedit.bench.peers import load_peers
from cadedit.decode import pipeline
from cadedit.decode.pipeline import LocalEditor
from cadedit.scope.outline import starts_with_docstring
from cadedit.scope.plan import plan_edit
from cadedit.text.align import opcodes
from cadedit.tries.loop import Attempts, CheckPlan, edit_verified

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "multiline"
SPLITS = ("tune", "heldout")
PER_LINE = 3  # forwards a changed line may cost beyond its changed tokens (the bound)
SLACK = 5  # and the edit as a whole (the prompt's forward, the first drafts, the closing fence)
FLOOR_SPAN = 256  # tokens of the prefill whose rate the flat floor charges every prefilled token
FLOOR_STEPS = 8  # one-token steps measured after a floor's prefill (their median)
WARM = 16  # tokens fed and cropped before a floor's prefill: a first forward's one-off costs stay out


# -- the corpus ----------------------------------------------------------------------------------


def load_cases(folder: Path, split: str = "all") -> list[dict]:
    """The cases of cases.jsonl with their file's text (`before`), in file order; `split` keeps one part."""
    path = folder / "cases.jsonl"
    if not path.is_file():
        raise ModelError(
            f"{folder}: no cases.jsonl (a multi-line corpus is a folder with cases.jsonl and files/)",
            hint=f"use --corpus {CORPUS}",
        )
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
            case["before"] = (folder / "files" / case["file"]).read_text(encoding="utf-8")
        except (ValueError, KeyError, OSError) as exc:
            raise ModelError(
                f"{path}:{number}: not a case ({str(exc)[:120]})",
                hint="each line is a JSON object with id, split, file, instruction and gold or check",
            ) from None
        if case.get("split") not in SPLITS:
            raise ModelError(f"{path}:{number}: split {case.get('split')!r} is not one of {', '.join(SPLITS)}")
        cases.append(case)
    return [c for c in cases if split in ("all", c["split"])]


def gold_text(before: str, gold: dict) -> str:
    """The file with gold's replace pairs applied between its two markers (the first occurrence of
    the first, then the next of the second)."""
    start = before.index(gold["between"][0])
    end = before.index(gold["between"][1], start + 1)
    middle = before[start:end]
    for old, new in gold["replace"]:
        middle = middle.replace(old, new)
    return before[:start] + middle + before[end:]


def judge(case: dict, after: str | None) -> tuple[bool, str]:
    """Whether `after` (None: no answer passed) does what the case asked, and if not, why."""
    if after is None:
        return False, "no answer passed cadedit's checks"
    if "gold" in case:
        same = after == gold_text(case["before"], case["gold"])
        return same, "" if same else "not the gold answer"
    check = case.get("check", {})
    for pattern in check.get("present", ()):
        if not re.search(pattern, after):
            return False, f"missing {pattern!r}"
    for pattern in check.get("absent", ()):
        if re.search(pattern, after):
            return False, f"still has {pattern!r}"
    if "order" in check:
        first, second = (after.find(s) for s in check["order"])
        if first < 0 or second < 0 or first > second:
            return False, f"{check['order'][0]!r} not before {check['order'][1]!r}"
    if "same_code" in check and _code(after, check["same_code"]) != _code(case["before"], check["same_code"]):
        return False, "the code changed, not only its comments" + (
            " and docstrings" if check["same_code"] != "all" else ""
        )
    return True, ""


def _code(text: str, which: str) -> str:
    """The module's AST without comments (never in it) and, unless `which` is "all", its docstrings."""
    tree = ast.parse(text)
    if which != "all":
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if starts_with_docstring(body):
                body[0] = ast.Pass()
    return ast.dump(tree)


def changes(tokenizer, before: str, after: str) -> tuple[int, int]:
    """Tokens of `after` outside the token runs it shares with `before`, and the lines added, changed
    or deleted (a replaced stretch counts its longer side)."""

    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    lines, tokens = 0, 0
    for tag, i1, i2, j1, j2 in opcodes(old, new):
        if tag == "equal":
            continue
        lines += max(i2 - i1, j2 - j1)
        a, b = encode(tokenizer, "".join(old[i1:i2])), encode(tokenizer, "".join(new[j1:j2]))
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        tokens += len(b) - sum(size for _, _, size in matcher.get_matching_blocks())
    return tokens, lines


# -- the floor -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rates:
    """What a floor counts: a prefill's seconds and the milliseconds of a one-token step after it."""

    prefill_seconds: float
    prefill_tokens: int
    step_ms: float

    @property
    def prefill_ms(self) -> float:
        """Milliseconds a prefilled token."""
        return 1000 * self.prefill_seconds / self.prefill_tokens


def measure_rates(loaded, tokens: int = FLOOR_SPAN) -> Rates:
    """One feed of `tokens` tokens from an empty cache (after WARM tokens fed and cropped), then the
    median of FLOOR_STEPS one-token steps; the decodes' cache is given its place back after."""
    tokens = max(1, min(tokens, loaded.context_limit - WARM - FLOOR_STEPS))
    ids = (encode(loaded.tokenizer, "def f(x):\n    return x + 1\n" * 64) * (tokens // 512 + 2))[: tokens + FLOOR_STEPS]
    lm = CachedLM(loaded.model, new_cache(loaded))
    try:
        lm.feed(ids[:WARM])
        lm.crop(WARM)
        start = time.perf_counter()
        lm.feed(ids[:tokens])
        seconds = time.perf_counter() - start
        steps = []
        for k in range(FLOOR_STEPS):
            start = time.perf_counter()
            lm.feed([ids[tokens + k]])
            steps.append((time.perf_counter() - start) * 1000)
    finally:
        _hand_back(loaded)
    return Rates(seconds, tokens, statistics.median(steps))


def floor_parts(prompt: int, new: int, changed: int) -> tuple[int, int]:
    """A try's floor in tokens: (prefilled -- the prompt fed and the copied tokens --, steps -- the
    changed tokens, at most the new ones)."""
    changed = min(changed, new)
    return prompt + new - changed, changed


def floor_seconds(prefilled: int, steps: int, rates: Rates) -> float:
    """`prefilled` tokens at the rates' prefill rate and `steps` steps at their median: the floor,
    with the rates measured of those very tokens; the flat floor, with the rates of a short prefill."""
    return prefilled * rates.prefill_ms / 1000 + steps * rates.step_ms / 1000


# -- one case ------------------------------------------------------------------------------------


def run_case(loaded, case: dict, tries: int, rates: Rates, script: Scripted = Scripted()) -> dict:
    """One case edited as `cadedit fix FILE INSTRUCTION --candidates 1 --tries TRIES` edits it: its row.
    script: the answers and branch points a test scripted (cli.common.Scripted)."""

    document, options = case_request(loaded, case)
    row = {
        "id": case["id"],
        "split": case["split"],
        "file": case["file"],
        "regions": [list(r) for r in options.regions],
    }
    start = time.perf_counter()
    try:
        verified = edit_verified(
            document,
            case["instruction"],
            options,
            CheckPlan(),
            Attempts(tries, 1),
            editor=LocalEditor(loaded, script.choose_points),
            **({"picks": script.picks} if script.picks is not None else {}),
        )
    except CadeditError as exc:
        return {**row, "wall": time.perf_counter() - start, "error": exc.message, "ok": False, "why": exc.message}
    wall = time.perf_counter() - start
    made = [t for t in verified.tries if t.result is not None]
    answer = verified.answer
    after = answer.result.new_text if answer else (made[-1].result.new_text if made else case["before"])
    stats = [t.result.stats for t in made]
    forwards = sum(s.forward_passes for s in stats)
    new = sum(s.tokens_new for s in stats)
    prompt = sum(s.tokens_prompt for s in stats)
    tokens, lines = changes(loaded.tokenizer, case["before"], after)
    parts = [floor_parts(st.tokens_prompt, st.tokens_new, tokens) for st in stats]
    measured = [measure_rates(loaded, prefilled) for prefilled, _ in parts]  # right after the case
    floor = sum(floor_seconds(*part, own) for part, own in zip(parts, measured))
    flat = sum(floor_seconds(*part, rates) for part in parts)
    ok, why = judge(case, answer.result.new_text if answer else None)
    return {
        **row,
        "wall": wall,
        "tries": verified.made,
        "passed": answer is not None,
        "ok": ok,
        "why": why,
        "forwards": forwards,
        "tokens_new": new,
        "tokens_prompt": prompt,
        "tokens_copied": sum(s.tokens_copied for s in stats),
        "changed_tokens": tokens,
        "changed_lines": lines,
        "forward_bound": tokens + PER_LINE * lines + SLACK,
        "floor": floor,
        "floor_prefill": sum(own.prefill_seconds for own in measured),
        "floor_step_ms": statistics.median([own.step_ms for own in measured]) if measured else None,
        "over_floor": wall / floor if floor else None,
        "floor_flat": flat,
        "seconds_decode": sum(s.seconds_total for s in stats),
    }


def _hand_back(loaded) -> None:
    """Give the decodes' cache its place again after a floor's own cache took it: llama.cpp's model
    holds one context, which the decodes' cache would otherwise take back by feeding its ids again
    inside the next case's wall (a torch cache is its own tensors: nothing to do)."""
    take = getattr(loaded.model, "take", None)
    if take is not None:
        take(language_model(loaded).cache)


def case_request(loaded, case: dict):
    """The case's document and the options `cadedit fix` edits it with (scope planned from the instruction)."""

    document = Document.from_text(case["before"], case["file"])
    options = EditOptions(model=loaded.name, mode=Mode.VERIFY, context=CONTEXT_LINES)
    return document, plan_edit(document, case["instruction"], options)[0]


# -- llama.cpp beside it -------------------------------------------------------------------------


def lookup_row(peer, loaded, case: dict) -> dict:
    """llama.cpp with its prompt lookup (bench/peers.py's llama-lookup) answering the prompt of the
    case's first try, greedily, the same budget, stopped where cadedit stops: wall, forwards, tokens,
    and whether its answer does what was asked."""

    document, options = case_request(loaded, case)
    prepared = pipeline.prepare(loaded, document, case["instruction"], options)
    start = time.perf_counter()
    try:
        ids, raw, prompt, _ = peer.retype(loaded, document, prepared)
    except CadeditError as exc:
        return {
            "llama_wall": time.perf_counter() - start,
            "llama_forwards": peer.forwards,
            "llama_ok": False,
            "llama_why": exc.message,
        }
    wall = time.perf_counter() - start
    row = {
        "llama_wall": wall,
        "llama_forwards": peer.forwards,
        "llama_tokens_new": len(ids),
        "llama_tokens_prompt": len(prompt),
    }
    try:
        program = pipeline.answer_program(document, prepared, Decoded(raw, tuple(ids), DecodeStats()))
        ok, why = judge(case, resolve(program, document))
    except CadeditError as exc:
        ok, why = False, exc.message
    return {**row, "llama_ok": ok, "llama_why": why}


def lookup_context(loaded, cases: list[dict]) -> int:
    """llama.cpp's n_ctx for the run: the largest first-try prompt + budget (+ a forward's draft)."""

    need = 512
    for case in cases:
        document, options = case_request(loaded, case)
        try:
            prepared = pipeline.prepare(loaded, document, case["instruction"], options)
        except CadeditError:
            continue
        need = max(need, len(prepared.prompt_ids) + prepared.budget + LOOKUP_TOKENS + 32)
    return min(need, loaded.context_limit)


# -- summaries and the command -------------------------------------------------------------------


def summarize(rows: list[dict]) -> dict:
    """Per part of the corpus: cases, done as asked, within the forward bound, wall / floor (median, most)."""
    summary = {}
    for split in SPLITS:
        part = [r for r in rows if r["split"] == split]
        if not part:
            continue
        ratios = [r["over_floor"] for r in part if r.get("over_floor")]
        flat = [r["wall"] / r["floor_flat"] for r in part if r.get("floor_flat")]
        summary[split] = {
            "n": len(part),
            "ok": sum(r["ok"] for r in part),
            "within_forward_bound": sum(r.get("forwards", 10**9) <= r.get("forward_bound", -1) for r in part),
            "forwards": sum(r.get("forwards", 0) for r in part),
            "tokens_new": sum(r.get("tokens_new", 0) for r in part),
            "median_over_floor": statistics.median(ratios) if ratios else None,
            "most_over_floor": max(ratios) if ratios else None,
            "median_over_floor_flat": statistics.median(flat) if flat else None,
            "wall_total": sum(r["wall"] for r in part),
        }
        speedups = [r["llama_wall"] / r["wall"] for r in part if "llama_wall" in r and r.get("wall")]
        if speedups:
            summary[split].update(
                llama_ok=sum(r["llama_ok"] for r in part),
                llama_forwards=sum(r.get("llama_forwards", 0) for r in part),
                median_llama_over_cadedit=statistics.median(speedups),
            )
    return summary


def _line(row: dict) -> str:
    if row.get("error"):
        return f"{row['id']}: {row['error']}"
    over = f"{row['over_floor']:.2f}x floor" if row.get("over_floor") else "no floor"
    llama = ""
    if "llama_wall" in row:
        llama = (
            f"; llama.cpp lookup {row['llama_forwards']} fwd, {row['llama_wall']:.1f} s "
            f"({row['llama_wall'] / row['wall']:.1f}x), {'ok' if row['llama_ok'] else 'NOT ok'}"
        )
    return (
        f"{row['id']} [{row['split']}]: {'ok' if row['ok'] else 'NOT ok (' + row['why'] + ')'}, "
        f"{row['forwards']} fwd (bound {row['forward_bound']}), {row['tokens_new']} new, "
        f"{row['changed_tokens']} changed in {row['changed_lines']} lines, {row['wall']:.1f} s, {over}{llama}"
    )


def multiline(
    ctx: typer.Context,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    corpus: Annotated[Path, typer.Option("--corpus", help="A folder with cases.jsonl and files/.")] = CORPUS,
    split: Annotated[str, typer.Option(help="Which part: tune, heldout or all.")] = "all",
    max_tries: Annotated[int, typer.Option("--tries", min=1, help="Tries with syntax/no-change checks.")] = 1,
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    json_path: JsonOpt = None,
    llama_lookup: Annotated[
        bool,
        typer.Option(
            "--llama-lookup",
            help="Also run llama.cpp with its prompt lookup drafts (llama-cpp-python's "
            "LlamaPromptLookupDecoding) on each case's prompt, same GGUF and threads.",
        ),
    ] = False,
) -> None:
    """Everyday multi-line edits on real code (renames, type hints, docstrings, logging, validation,
    try/except, deleting and moving blocks, comments; Python and JavaScript), each as `cadedit fix`
    makes it: forwards against changed tokens, wall against the token-level floor, and whether the
    answer does what was asked, for the tuning part and the held-out part of the corpus.

    Example: cadedit bench multiline --model MODEL --json multiline.json
    """

    if split not in ("all", *SPLITS):
        raise typer.BadParameter(f"{split!r}: expected one of all, {', '.join(SPLITS)}", param_hint="--split")
    cases = load_cases(corpus, split)
    loaded, _ = _load_model(model, "auto", dtype, threads, backend)
    rates = measure_rates(loaded)
    hardware.progress = hardware.progress or say  # the once-only measurement says what it does
    curve = forward_costs(loaded)  # measured (once per machine) before any case is timed
    meta = {
        **_model_meta("multiline", loaded),
        "corpus": str(corpus),
        "split": split,
        "tries": max_tries,
        "prefill_ms_per_token": rates.prefill_ms,
        "step_ms": rates.step_ms,
        "forward_costs": curve.to_json(),
    }
    peer = _lookup_peer(loaded, cases) if llama_lookup else None
    if peer is not None:
        meta["llama_lookup"] = {
            "draft": f"LlamaPromptLookupDecoding(num_pred_tokens={LOOKUP_TOKENS})",
            "llama_cpp_python": metadata.version("llama_cpp_python"),
        }

    def one(_, case: dict) -> dict:
        row = run_case(loaded, case, max_tries, rates, scripted(ctx))
        return {**row, **lookup_row(peer, loaded, case)} if peer is not None else row

    done = run_corpora(
        {"cases": cases},
        "multiline",
        one,
        lambda done: {**meta, "summary": summarize(done["cases"]), "rows": done["cases"]},
        json_path,
        lambda row: say(_line(row)),
    )
    for part, summary in summarize(done["cases"]).items():
        ratio = summary["median_over_floor"]
        out.print(
            f"{part}: {summary['ok']}/{summary['n']} done as asked, {summary['within_forward_bound']}/"
            f"{summary['n']} within the forward bound, {summary['forwards']} forwards for "
            f"{summary['tokens_new']} new tokens, wall / floor median "
            + (f"{ratio:.2f}, most {summary['most_over_floor']:.2f}" if ratio else "-")
            + (
                f"; llama.cpp with prompt lookup: {summary['llama_ok']}/{summary['n']} done as asked, "
                f"{summary['llama_forwards']} forwards, wall median {summary['median_llama_over_cadedit']:.1f}x "
                "cadedit's"
                if "median_llama_over_cadedit" in summary
                else ""
            )
        )
        if summary["median_over_floor_flat"]:
            out.print(
                f"{part}: wall / flat-rate floor (every prefilled token at a short prefill's rate) median "
                f"{summary['median_over_floor_flat']:.2f}"
            )


def _lookup_peer(loaded, cases: list[dict]):
    """llama.cpp with prompt lookup on the loaded model's GGUF and threads (bench/peers.py)."""

    gguf = lookup_gguf(loaded)
    if gguf is None:
        raise typer.BadParameter(
            "--llama-lookup runs the model's GGUF: pass --model FILE.gguf", param_hint="--llama-lookup"
        )
    return load_peers(["llama-lookup"], str(gguf), loaded.threads, lookup_context(loaded, cases))["llama-lookup"]


def lookup_gguf(loaded) -> Path | None:
    """The loaded model's GGUF file (None: a model folder)."""
    return gguf_path(loaded.name)
