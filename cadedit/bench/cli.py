"""`cadedit bench`: the paper's measurements as commands (ceiling, roundtrip, perturb, formats, kernel, e2e,
decode), and cadedit's own as users get them (candidates, tries, longfile, overhead, engine, backends,
everyday, mechanical, multiline, checks).

A registry only: each measurement's module (bench/<name>.py) owns its command, options and tables;
this one names them, with the first paragraph of each command's help, so that `cadedit bench --help`
lists them all and imports none (common.LazyGroup). A command's module is imported when it runs or
its own --help is asked: `cadedit bench kernel --help` imports torch, `cadedit bench --help` does not.
"""

from __future__ import annotations

from types import MappingProxyType

from cadedit.cli.common import Lazy, LazyGroup, sub_app


# The bench commands in the order `cadedit bench --help` lists them (tests/test_cli.py checks each
# help against the command's own).
COMMANDS = MappingProxyType(
    {
        "ceiling": Lazy(
            "cadedit.bench.ceiling",
            "ceiling",
            'Line-level copy ceiling (Table 2), token-level greedy cover (m = 1..32) and the bounds of eq. (3).',
        ),
        "roundtrip": Lazy(
            "cadedit.bench.roundtrip",
            "roundtrip",
            'Oracle round trip, strict and clipped (Table 4), and the reserved-literal audit (§4.3).',
        ),
        "checks": Lazy(
            "cadedit.bench.gold",
            "gold_checks",
            'False alarms: every check a candidate gets without --test (syntax, the code checks, change) run on'
            "\neach case's gold fix, with the case's instruction; a check that fails a correct fix would turn a pass"
            '\ninto exit 3. Prints the failures per check; exits 1 if any gold fix failed one.',
        ),
        "perturb": Lazy(
            "cadedit.bench.perturb",
            "perturb_command",
            'Trimmed exact match of oracle programs under copy-endpoint noise (Table 8).',
        ),
        "formats": Lazy(
            "cadedit.bench.formats", "formats", 'Edit formats head to head: output tokens and round-trip EM (Table 3).'
        ),
        "kernel": Lazy(
            "cadedit.bench.kernel", "kernel", 'Per-span kernel speedup s(N) = T_AR(N) / T_PP(N) (§3, Figure 3).'
        ),
        "e2e": Lazy(
            "cadedit.bench.e2e",
            "e2e",
            "Decoding methods end to end on the same cases with the same model: cadedit's modes (its"
            "\nown program with grammar and copy splices, verify, lookup, rewrite) and llama.cpp's greedy and"
            "\nprompt-lookup rewrites; per case: wall clock, forward passes, exact match, the corpus's tests,"
            "\nand whether each method's edited file equals the first method's.",
        ),
        "decode": Lazy(
            "cadedit.bench.decode",
            "decode",
            "The decode loop against eq. (3): each case's oracle program forced through the real loop"
            '\n(masks, forced literals, copy splices) vs the same model regenerating the gold one token per'
            '\nforward after the same prompt; per case and pooled, beside the bound from s(N).',
        ),
        "candidates": Lazy(
            "cadedit.bench.candidates",
            "candidates",
            "K candidates decoded side by side (a try of `cadedit fix --candidates K`) against one candidate's decode,"
            '\nthe same edit in the same run, both from an empty cache: walls, their ratio, the decode steps alone,'
            "\nand with the corpus's tests pass@1 against pass@K.",
        ),
        "tries": Lazy(
            "cadedit.bench.tries",
            "tries",
            'Verified edits measured as users get them: per case, tests passed and wall seconds for one try,'
            "\nsyntax/no-change checks with --check-tries, and the corpus's test as --test with 3 and --tries tries."
            '\nWith --engine the edits go through that engine as `cadedit fix --engine` sends them (only when given).',
        ),
        "longfile": Lazy(
            "cadedit.bench.longfile",
            "longfile",
            'Real long files with one planted one-line bug each (bench/longfile.py), edited as `cadedit fix`'
            '\nedits them: scope from the instruction, verify mode, tries with syntax/no-change checks. Per task:'
            '\nexact match with the original, lines changed outside the named function, wall seconds, and the'
            "\nfirst try's result beside the verified one.",
        ),
        "overhead": Lazy(
            "cadedit.bench.overhead",
            "overhead",
            'Process start to answer for `cadedit fix`, what of it is not model work, how much of the'
            '\nprompt a second edit of the same file feeds again, and the one-token step in fp32, bf16, bf16-int8 and'
            "\nbf16-int4 (a GGUF's own 4-bit weights; int8 where it has none).",
        ),
        "engine": Lazy(
            "cadedit.bench.engine",
            "engine",
            'N concurrent `cadedit fix` processes against one engine beside the same edits one at a time locally.',
        ),
        "backends": Lazy(
            "cadedit.bench.backends",
            "backends",
            "The two sides of `--backend auto`'s probe for a GGUF, several rounds taking turns: llama.cpp's"
            "\nedit work against torch's estimate of it (and with --whole the whole torch model's), and what"
            '\nauto would choose from each round.',
        ),
        "everyday": Lazy(
            "cadedit.bench.everyday",
            "everyday",
            'Everyday edits on real standard-library modules (corpus/everyday), each run as `cadedit fix FILE'
            '\nINSTRUCTION --write` without --test and judged by running the module: right, honest (no try passed,'
            '\nfile untouched), wrong-but-passed, and destructive-and-written.',
        ),
        "mechanical": Lazy(
            "cadedit.bench.mechanical",
            "mechanical",
            "Renames and named deletions of Python without a model (corpus/mechanical: standard-library"
            "\nmodules), each run as `cadedit fix FILE INSTRUCTION --write` with no model to load: exact, fallback"
            "\n(cadedit said why and handed the edit to the model) or wrong, and the wall of each command.",
        ),
        "apply": Lazy(
            "cadedit.bench.apply",
            "apply_bench",
            'Other models\' answers applied (`cadedit fix --sketch`) on corpus/apply: lazy sketches, SEARCH/REPLACE,'
            '\nstale diffs, whole files and chat answers built from real edits; per form and style: exact,'
            '\nwrong-but-exit-0, refused, the model-free share and the median seconds, tune and held-out apart.',
        ),
        "multiline": Lazy(
            "cadedit.bench.multiline",
            "multiline",
            'Everyday multi-line edits on real code (renames, type hints, docstrings, logging, validation,'
            '\ntry/except, deleting and moving blocks, comments; Python and JavaScript), each as `cadedit fix`'
            '\nmakes it: forwards against changed tokens, wall against the token-level floor, and whether the'
            '\nanswer does what was asked, for the tuning part and the held-out part of the corpus.',
        ),
    }
)


class _Bench(LazyGroup):
    """`cadedit bench`: the COMMANDS registry, listed without importing any of them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, commands_by_name=COMMANDS, **kwargs)


app = sub_app("bench", "Reproduce the paper's measurements on any corpus, tokenizer, model and machine.", cls=_Bench)
