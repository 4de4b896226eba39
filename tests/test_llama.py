"""The llama.cpp backend for real: tiny GGUFs written by the tests (tests/tinygguf.py: the torch tests'
tiny Qwen2 and tokenizer), loaded by llama-cpp-python, driven by the one decode loop.

Tolerance against torch: llama.cpp keeps the KV cache in fp16 and sums in its own order, so its
logits of the tiny model differ from torch's fp32 ones by up to ~1e-3 (the logits are ~1 in size);
the tests ask for 5e-3. The same positions fed in other batches (a crop, a reused prefix, a stored
one) differ by up to ~3e-4 within llama.cpp: 1e-3 is asked. Greedy equality between modes is checked within llama.cpp itself (batched
verify/lookup forwards against one-token-at-a-time steps), on a model whose logits are scaled so
that no argmax is closer than that noise.

Without llama-cpp-python these tests skip, unless CADEDIT_REQUIRE_LLAMA=1 (CI sets it).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

if os.environ.get("CADEDIT_REQUIRE_LLAMA") != "1":
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'cadedit[llama]')")

import cadedit.decode.pipeline as pipeline
from cadedit.bench import multiline
from cadedit.text.document import Document
from cadedit.backends.llama import llamacpp
from cadedit.backends.llama.gguf_file import gguf_tokenizer, read_metadata
from cadedit.backends.model import CachedLM, language_model, load_model, new_cache
from cadedit.backends.prefix_store import PrefixStore, model_identity
from cadedit.options import EditOptions, Mode, Sampling
from cadedit.backends.vocab import vocab_from_tokenizer
from tests.conftest import console_script
from tests.test_rewrite import BEFORE as COLORS, editing_model
from tests.test_verify import CORPUS, fenced_run, prepared_for
from tests.test_bench_multiline import CASES as SHAPE_CASES, RENAMED as SHAPES_RENAMED, SOURCE as SHAPES, answering
from tests.scripting import scripted
from tests.tinygguf import save_gguf
from tests.tinymodel import make_model, scaled_model
from tests.tinytok import make_tokenizer

TOK = make_tokenizer()
TOKEN_BYTES = vocab_from_tokenizer(TOK).tokens
TOLERANCE = 5e-3  # llama.cpp against torch
SAME = 1e-3  # llama.cpp against itself, the same positions fed in other batches


def close(got, expected, atol: float) -> bool:
    """Logits (numpy arrays, cadedit.backends.torch.qwen2.LogitRows or tensors) equal within atol."""
    return np.allclose(np.asarray(got, dtype=np.float32), np.asarray(expected, dtype=np.float32), atol=atol)


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory) -> Path:
    return save_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="session")
def scaled_gguf(tmp_path_factory) -> Path:
    return save_gguf(tmp_path_factory.mktemp("gguf") / "scaled.gguf", model=scaled_model())


@pytest.fixture(scope="session")
def editing_gguf(tmp_path_factory) -> Path:
    """The bigram model of test_rewrite that answers the colors.txt rewrite with teal -> green."""
    model = editing_model(Document.from_text(COLORS, "colors.txt")).model
    return save_gguf(tmp_path_factory.mktemp("gguf") / "teal-to-green.gguf", model=model)


@pytest.fixture(scope="session")
def llama_tiny(tiny_gguf):
    return load_model(str(tiny_gguf), threads=1, backend="llama")


@pytest.fixture(scope="session")
def llama_scaled(scaled_gguf):
    return load_model(str(scaled_gguf), threads=1, backend="llama")


def cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [console_script(), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


# -- the GGUF's own tokenizer --------------------------------------------------------------------


TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "x  =  1\r\n\r\n\tπ = 3.14159  # héllo\n",
    "",
    "   ",
    "<|im_end|> in text",
    "if a<b>c: print('%d' % 12345678)\n\n\n",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_ggufs_tokenizer_encodes_as_the_model_folders(tiny_gguf, text):
    tokenizer = gguf_tokenizer(tiny_gguf, read_metadata(tiny_gguf))
    assert tokenizer.encode(text) == TOK.encode(text, add_special_tokens=False)
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_the_ggufs_tokenizer_has_the_folders_specials_vocabulary_and_chat(tiny_gguf):
    tokenizer = gguf_tokenizer(tiny_gguf, read_metadata(tiny_gguf))
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (TOK.eos_token_id, TOK.pad_token_id)
    assert vocab_from_tokenizer(tokenizer).tokens == vocab_from_tokenizer(TOK).tokens
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert tokenizer.apply_chat_template(chat) == TOK.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True
    )


# -- the LM interface on llama.cpp -----------------------------------------------------------------


def test_llama_logits_agree_with_torch_on_the_same_weights(llama_tiny):
    ids = TOK.encode("def add(a, b):\n    return a + b\n" * 3)
    model = make_model(0)
    with torch.no_grad():
        expected = model(torch.tensor(ids), model.new_cache(), keep=len(ids))
    lm = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    got = lm.feed(ids, keep=len(ids))
    assert (
        isinstance(got, np.ndarray)
        and got.shape == tuple(expected.shape) == (len(ids), 768)
        and got.dtype == np.float32
    )
    assert close(got, expected, TOLERANCE), float(np.abs(got - expected.numpy()).max())
    step = lm.feed([ids[0]])
    with torch.no_grad():
        cache = model.new_cache()
        model(torch.tensor(ids), cache)
        assert close(step, model(torch.tensor([ids[0]]), cache), TOLERANCE)


def test_crop_and_reuse_give_the_logits_of_a_fresh_feed(llama_tiny):
    a, b, c = TOK.encode("def f(x):\n"), TOK.encode("    return x * 2\n"), TOK.encode("    return x + 1\n")
    fresh = np.array(CachedLM(llama_tiny.model, new_cache(llama_tiny)).feed(a + c, keep=len(c)))  # kept past forwards
    lm = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    lm.feed(a + b)
    lm.crop(len(b))
    assert lm.ids == a and lm.cache.length == len(a) == llama_tiny.model.positions()
    assert close(lm.feed(c, keep=len(c)), fresh, SAME)
    lm.reset()
    lm.feed(a + b)
    common = next(i for i, (x, y) in enumerate(zip(a + b, a + c)) if x != y)
    assert common >= len(a) and lm.reuse(a + c) == common and lm.ids == (a + c)[:common]
    rest = len(a + c) - common
    assert close(lm.feed((a + c)[common:], keep=rest), fresh[-rest:], SAME)


def test_two_caches_of_one_model_take_turns(llama_tiny):
    a, b = TOK.encode("class Stack:\n"), TOK.encode("import os\nimport sys\n")
    first, second = CachedLM(llama_tiny.model, new_cache(llama_tiny)), CachedLM(llama_tiny.model, new_cache(llama_tiny))
    first.feed(a)
    second.feed(b)
    alone = np.array(CachedLM(llama_tiny.model, new_cache(llama_tiny)).feed(a + b[:1]))
    assert close(first.feed(b[:1]), alone, SAME)  # fed again from its ids: the context held `second`


def test_the_reading_in_a_row_beside_the_cache_reads_as_from_nothing_and_leaves_the_cache_as_it_was(llama_tiny):
    """where.surprise feeds a row of its own (a sequence of the context, emptied): what it reads is what an
    empty cache reads, and the cache keeps the prompt it held for the next try to reuse."""
    from cadedit.backends.model import language_model
    from cadedit.decode.where import surprise

    document = Document.from_text("def area(w, h):\n    s = w * h\n    return s - 0\n", "a.py")
    lm = language_model(llama_tiny)
    lm.reset()
    alone = surprise(llama_tiny, document, [(1, 3)])
    prompt = TOK.encode("class Stack:\n    def push(self, x):\n        self.items.append(x)\n")
    lm.feed(prompt)
    beside = surprise(llama_tiny, document, [(1, 3)])
    assert (beside.lines, beside.spread, beside.runners_up) == (alone.lines, alone.spread, alone.runners_up)
    assert [p[3] for p in beside.expected] == pytest.approx([p[3] for p in alone.expected], abs=SAME)
    assert lm.ids == prompt and lm.cache.length == len(prompt) and lm.reuse(prompt + prompt[:2]) == len(prompt)
    fresh = np.array(CachedLM(llama_tiny.model, new_cache(llama_tiny)).feed(prompt + prompt[:1]))
    assert close(lm.feed(prompt[:1]), fresh, SAME)  # the cache's positions are the prompt's, not the reading's
    lm.reset()


def test_a_long_feed_is_split_into_batches_and_keeps_its_last_rows(llama_tiny):
    ids = (TOK.encode("for i in range(10):\n    print(i, fib(i))\n") * 80)[: llamacpp.N_BATCH + 100]
    lm = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    rows = np.array(lm.feed(ids, keep=llamacpp.MAX_OUTPUTS + 30))
    assert rows.shape[0] == llamacpp.MAX_OUTPUTS + 30 and lm.cache.length == len(ids)
    again = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    again.feed(ids[:-1])
    assert close(again.feed(ids[-1:]), rows[-1:], 1e-3)


def test_a_forwards_logits_share_one_buffer_the_next_forward_reuses(llama_tiny):
    """The decode loop reads a forward's rows before the next forward, so the backend copies llama.cpp's
    logits into one buffer it keeps (no fresh pages a forward); rows kept longer are copied by the reader."""
    ids = TOK.encode("def f(x):\n    return x + 1\n" * 4)
    lm = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    first = lm.feed(ids[:10], keep=10)
    held = np.array(first)
    second = lm.feed(ids[10:20], keep=10)
    assert np.shares_memory(first, second) and not close(first, held, SAME)  # overwritten by the next forward
    again = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    assert close(again.feed(ids[:10], keep=10), held, SAME)
    # a forward that keeps more rows than a verify forward's gets an array of its own; the buffer stays
    many = (ids * 20)[: llamacpp.KEPT_ROWS + 1]
    wide = again.feed(many, keep=len(many))
    assert wide.shape[0] == len(many) and not np.shares_memory(wide, lm.feed(ids[30:31]))


def test_the_prefix_store_gives_back_what_a_fresh_feed_computes(llama_tiny, tmp_path):
    ids = TOK.encode("def binary_search(values, target):\n    lo, hi = 0, len(values)\n" * 6)
    lm = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    lm.feed(ids + TOK.encode("    x = 1\n"))
    store, identity = PrefixStore(tmp_path / "prefixes"), model_identity(llama_tiny)
    store.save(lm, identity, len(ids))
    assert len(list((tmp_path / "prefixes").glob("*.kv"))) == 1
    loaded = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    assert store.load(loaded, identity, ids) and loaded.ids == ids and llama_tiny.model.positions() == len(ids)
    fresh = np.array(CachedLM(llama_tiny.model, new_cache(llama_tiny)).feed(ids + TOK.encode("    return"), keep=2))
    assert close(loaded.feed(TOK.encode("    return"), keep=2), fresh, SAME)
    assert not store.load(loaded, identity, ids[:-1])  # another prefix: not there
    assert "llama" in identity and model_identity(llama_tiny) != identity.replace("llama", "torch")


def test_a_damaged_prefix_entry_is_deleted_and_ignored(llama_tiny, tmp_path):
    ids = TOK.encode("import os\n" * 30)
    store, identity = PrefixStore(tmp_path / "prefixes"), model_identity(llama_tiny)
    torch.save(
        torch.zeros(10, dtype=torch.uint8),
        store.path(identity, ids).parent.mkdir(parents=True) or store.path(identity, ids),
    )
    lm = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    assert not store.load(lm, identity, ids) and not store.path(identity, ids).exists() and lm.ids == []
    from cadedit.backends.llama.llamacpp import STATE_MAGIC

    store.path(identity, ids).write_bytes(STATE_MAGIC + bytes(4000))  # this backend's header, not its state
    assert not store.load(lm, identity, ids) and not store.path(identity, ids).exists() and lm.ids == []


# -- every mode, exactly as one token at a time ----------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("mode", [Mode.VERIFY, Mode.LOOKUP])
def test_drafted_modes_write_the_one_token_greedy_rewrite(llama_scaled, seed, mode):
    rng = random.Random(seed)
    document = Document.from_text("".join(rng.sample(CORPUS, 8)), "x.py")
    prepared = prepared_for(llama_scaled, document, 120)
    greedy = fenced_run(llama_scaled, prepared, Mode.REWRITE)
    drafted = fenced_run(llama_scaled, prepared, mode)
    assert greedy.stats.tokens_drafted == 0 and greedy.stats.forward_passes == greedy.stats.tokens_sampled
    assert drafted.ids == greedy.ids and drafted.finished == greedy.finished
    assert drafted.stats.tokens_drafted >= 1


@pytest.mark.parametrize("seed", range(2))
def test_program_mode_with_drafts_writes_what_it_writes_one_token_at_a_time(llama_scaled, seed):
    """Grammar masks, forced literals, copy splices and program drafts on llama.cpp: drafting never
    changes the greedy program."""
    rng = random.Random(seed)
    document = Document.from_text("".join(rng.sample(CORPUS, 6)), "x.py")
    options = EditOptions(mode=Mode.PROGRAM, max_new_tokens=60)
    prepared = pipeline.prepare(llama_scaled, document, "Fix it.", options)
    runs = []
    for draft in (False, True):
        from cadedit.decode.loop import sampler_for

        try:
            runs.append(pipeline.run_decode(llama_scaled, document, prepared, sampler_for(Sampling()), draft=draft).ids)
        except Exception as exc:  # noqa: BLE001 - the random model may run out of budget: both must
            runs.append(type(exc).__name__)
    assert runs[0] == runs[1]


# -- through the CLI -------------------------------------------------------------------------------


@pytest.fixture
def colors(tmp_path):
    (tmp_path / "colors.txt").write_bytes(b"red:\r\nteal;\r\nblue)\r\n")
    return tmp_path


@pytest.mark.parametrize("mode", ["verify", "rewrite", "lookup"])
def test_fix_on_the_llama_backend_writes_the_models_edit(colors, editing_gguf, mode):
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--model",
        str(editing_gguf),
        "--backend",
        "llama",
        "--mode",
        mode,
        "--threads",
        "1",
        "--json",
        "-q",
        cwd=colors,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["backend"] == "llama" and data["passed"] and "-teal;\r\n+green;\r\n" in data["diff"]
    written = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--model",
        str(editing_gguf),
        "--backend",
        "llama",
        "--mode",
        mode,
        "--threads",
        "1",
        "--write",
        "-q",
        cwd=colors,
    )
    assert written.returncode == 0, written.stderr
    assert (colors / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


def test_a_fix_on_the_llama_backend_never_imports_torch(colors, editing_gguf, tmp_path):
    """The llama.cpp path needs no torch, whose import is the largest part of a cold start: a fix that
    stores its prompt prefix, then one that loads it back and runs a --test, import no torch module."""
    import sys

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for run in range(2):
        done = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-m",
                "cadedit",
                "fix",
                "colors.txt",
                "Rename teal to green.",
                "--model",
                str(editing_gguf),
                "--backend",
                "llama",
                "--threads",
                "1",
                "--test",
                "true",
                "-q",
            ],
            cwd=colors,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert done.returncode == 0 and "+green;" in done.stdout, done.stderr[-2000:]
        imported = {
            line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
        }
        assert (
            "cadedit.backends.llama.llamacpp" in imported and "cadedit.decode.loop" in imported
        )  # the run is the one meant
        assert not {name for name in imported if name.split(".")[0] in ("torch", "transformers")}, run
        assert list((tmp_path / "cache" / "cadedit" / "prefixes").glob("*.kv"))  # stored, then loaded


def test_auto_measures_the_backends_once_and_says_why(colors, editing_gguf, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    first = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--model",
        str(editing_gguf),
        "--threads",
        "1",
        "--verbose",
        "--tries",
        "1",
        cwd=colors,
        env=env,
    )
    assert first.returncode == 0, first.stderr
    assert "backend: " in first.stderr and "measured on this CPU now" in first.stderr, first.stderr
    assert "llama-repack" in first.stderr and "torch" in first.stderr
    known = json.loads((tmp_path / "cache" / "cadedit" / "cpu-dtype.json").read_text())
    assert [v for k, v in known.items() if "|backend|" in k][0] in ("torch", "llama", "llama-repack")
    second = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--model",
        str(editing_gguf),
        "--threads",
        "1",
        "--verbose",
        "--tries",
        "1",
        cwd=colors,
        env=env,
    )
    assert second.returncode == 0 and "measured on this CPU earlier" in second.stderr, second.stderr
    assert "-teal;" in second.stdout


def test_bench_backends_times_both_sides_of_autos_probe_and_says_what_auto_would_pick(editing_gguf, tiny_dir, tmp_path):
    from cadedit.backends import hardware

    out = tmp_path / "b.json"
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = cli(
        "bench",
        "backends",
        "--model",
        str(editing_gguf),
        "--rounds",
        "2",
        "--whole",
        "--threads",
        "1",
        "--json",
        str(out),
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert len(data["rounds"]) == 2 and data["margin"] == hardware.TORCH_MARGIN
    for row in data["rounds"]:
        assert row["llama"] > 0 and row["torch_estimate"] > 0 and row["torch_whole"] > 0
        assert row["auto"] == ("torch" if row["torch_estimate"] * hardware.TORCH_MARGIN < row["llama"] else "llama")
    assert (
        "round 2: llama.cpp" in done.stderr and f"auto picks torch below {1 / hardware.TORCH_MARGIN:.3f}" in done.stdout
    )
    _one_line_error(cli("bench", "backends", "--model", str(tiny_dir), cwd=tmp_path, env=env), "GGUF")


def test_backend_measurements_are_keyed_by_the_llama_builds_cpu_features(editing_gguf):
    from cadedit.backends import hardware
    from cadedit.backends.llama import llamacpp

    version, _, features = llamacpp.build().partition(":")
    assert version == llamacpp.version() and len(features) == 12
    assert hardware.backend_key(editing_gguf, 1).endswith(f"|{llamacpp.build()}|{hardware.PROBE}")


def test_the_backend_comes_from_the_environment_and_settings(colors, editing_gguf):
    (colors / ".cadedit.toml").write_text('backend = "llama"\n')
    assert cli("trust", cwd=colors).returncode == 0
    done = cli(
        "fix", "colors.txt", "Rename.", "--model", str(editing_gguf), "--threads", "1", "--json", "-q", cwd=colors
    )
    assert done.returncode == 0 and json.loads(done.stdout)["backend"] == "llama", done.stderr
    bad = cli("fix", "colors.txt", "Rename.", "--model", str(editing_gguf), cwd=colors, env={"CADEDIT_BACKEND": "cuda"})
    assert bad.returncode == 1 and "unknown backend 'cuda'" in bad.stderr and len(bad.stderr.strip().splitlines()) <= 2


def _one_line_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 2, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


def test_models_the_llama_backend_cannot_serve_are_one_line_errors(colors, tmp_path, tiny_dir):
    other = save_gguf(tmp_path / "llama-arch.gguf", architecture="llama")
    _one_line_error(
        cli("fix", "colors.txt", "Rename.", "--model", str(other), "--backend", "llama", cwd=colors),
        "architecture 'llama'",
    )
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all" * 10)
    _one_line_error(
        cli("fix", "colors.txt", "Rename.", "--model", str(junk), "--backend", "llama", cwd=colors), "not a GGUF"
    )
    whole = save_gguf(tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:2000])
    _one_line_error(
        cli("fix", "colors.txt", "Rename.", "--model", str(cut), "--backend", "llama", cwd=colors), "cut.gguf"
    )
    no_chat = save_gguf(tmp_path / "no-chat.gguf", chat_template=None)
    _one_line_error(
        cli("fix", "colors.txt", "Rename.", "--model", str(no_chat), "--backend", "llama", cwd=colors), "chat template"
    )
    _one_line_error(
        cli("fix", "colors.txt", "Rename.", "--model", str(tiny_dir), "--backend", "llama", cwd=colors), "GGUF"
    )
    _one_line_error(
        cli("fix", "colors.txt", "Rename.", "--model", str(tmp_path / "none.gguf"), cwd=colors), "not found"
    )
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


@pytest.mark.parametrize("backend", ["llama", "torch"])
@pytest.mark.parametrize(
    "lie, message",
    [
        ({"block_count": 0}, "qwen2.block_count is 0, but the file holds the tensors of 2 layers"),
        ({"block_count": 1000}, "qwen2.block_count is 1000, but the file holds the tensors of 2 layers"),
        ({"tokens_as": lambda tokens: ["a"] * len(tokens)}, "GGUF vocabulary repeats token 'a' (ids 0 and 1)"),
    ],
)
def test_a_gguf_whose_metadata_lies_is_refused_before_llama_cpp_or_the_converter_reads_it(
    colors, tmp_path, lie, message, backend
):
    """llama.cpp aborted the process on these (GGML_ASSERT, exit 134); the converter built 1000 layers."""
    hostile = save_gguf(tmp_path / "hostile.gguf", **lie)
    done = cli(
        "fix", "colors.txt", "Rename.", "--model", str(hostile), "--backend", backend, "--threads", "1", cwd=colors
    )
    _one_line_error(done, message)
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


# -- models people already have: Ollama, LM Studio -------------------------------------------------


def _ollama(home: Path, gguf: Path, name: str = "teal", tag: str = "latest") -> None:
    import hashlib

    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    blobs = home / ".ollama" / "models" / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    shutil.copy(gguf, blobs / f"sha256-{digest}")
    manifest = home / ".ollama" / "models" / "manifests" / "example.invalid" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "layers": [
                    {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256-0", "size": 1},
                    {
                        "mediaType": "application/vnd.ollama.image.model",
                        "digest": f"sha256:{digest}",
                        "size": gguf.stat().st_size,
                    },
                ],
            }
        )
    )


def test_an_ollama_model_by_name(colors, editing_gguf):
    home = Path(os.environ["HOME"])
    _ollama(home, editing_gguf, tag="1.5b")
    done = cli(
        "fix",
        "colors.txt",
        "Rename.",
        "--model",
        "ollama:teal:1.5b",
        "--backend",
        "llama",
        "--threads",
        "1",
        "--json",
        "-q",
        cwd=colors,
    )
    assert done.returncode == 0, done.stderr
    assert "-teal;\r\n+green;\r\n" in json.loads(done.stdout)["diff"]
    _one_line_error(
        cli("fix", "colors.txt", "Rename.", "--model", "ollama:teal", cwd=colors), "teal:latest", "ollama pull"
    )
    _one_line_error(
        cli("fix", "colors.txt", "Rename.", "--model", "ollama:../x", cwd=colors), "not an Ollama model name"
    )


def test_an_lm_studio_model_by_name(colors, editing_gguf):
    folder = Path(os.environ["HOME"]) / ".lmstudio" / "models" / "someone" / "Teal-GGUF"
    folder.mkdir(parents=True)
    shutil.copy(editing_gguf, folder / "teal-q4_k_m.gguf")
    done = cli(
        "fix",
        "colors.txt",
        "Rename.",
        "--model",
        "lmstudio:teal-q4",
        "--backend",
        "llama",
        "--threads",
        "1",
        "-q",
        cwd=colors,
    )
    assert done.returncode == 0 and "+green;" in done.stdout, done.stderr
    _one_line_error(cli("fix", "colors.txt", "Rename.", "--model", "lmstudio:nothing-like-it", cwd=colors), "no .gguf")


def test_a_second_decode_of_the_same_prompt_feeds_one_token(editing_gguf):
    """Two decodes of one prompt on llama.cpp: the second feeds one token (CachedLM.reuse), as on torch."""
    from cadedit.decode.loop import sampler_for

    loaded = load_model(str(editing_gguf), threads=1, backend="llama")
    document = Document.from_text(COLORS, "colors.txt")
    prepared = pipeline.prepare(loaded, document, "Rename teal to green.", EditOptions(mode=Mode.REWRITE))
    first = pipeline.run_decode(loaded, document, prepared, sampler_for(Sampling()))
    again = pipeline.run_decode(loaded, document, prepared, sampler_for(Sampling()))
    assert again.stats.tokens_prompt == 1 < first.stats.tokens_prompt
    assert again.ids == first.ids and first.text == "red:\ngreen;\nblue)\n"


# -- cadedit bench kernel --reference ----------------------------------------------------------------


def test_the_kernel_reference_loads_its_weights_repacked_or_not_as_asked(tiny_gguf):
    import llama_cpp

    from cadedit.bench.kernel import LlamaReference

    for repack in (False, True):
        assert LlamaReference(str(tiny_gguf), 1, 64, repack).llm.model_params.use_extra_bufts is repack
    defaults = llama_cpp.llama_model_default_params().use_extra_bufts
    assert LlamaReference(str(tiny_gguf), 1, 64).llm.model_params.use_extra_bufts is defaults


def test_bench_kernel_reference_weights_as_llamas_defaults_or_a_one_line_error(tiny_gguf, tmp_path):
    out = tmp_path / "kernel.json"
    args = (
        "bench",
        "kernel",
        "--model",
        str(tiny_gguf),
        "--backend",
        "llama",
        "--reference",
        "--spans",
        "1",
        "--trials",
        "1",
        "--prefix",
        "8",
        "--threads",
        "1",
        "--json",
        str(out),
    )
    done = cli(*args, "--reference-weights", "defaults", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["reference_weights"] == "Llama's defaults"
    bad = cli(*args, "--reference-weights", "mine", cwd=tmp_path)
    assert bad.returncode == 2 and "'mine' is not same or defaults" in bad.stderr


def test_bench_kernel_times_the_backend_and_llama_cpps_own_taking_turns(tiny_gguf, tmp_path):
    out = tmp_path / "kernel.json"
    done = cli(
        "bench",
        "kernel",
        "--model",
        str(tiny_gguf),
        "--backend",
        "llama",
        "--reference",
        "--spans",
        "1,4",
        "--trials",
        "2",
        "--prefix",
        "8",
        "--threads",
        "1",
        "--json",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["partial"] is False and data["attn"] == "llama.cpp"
    for points in (data["results"], data["reference"]):
        assert [p["n"] for p in points] == [1, 4] and all(len(p["ar_trials_ms"]) == 2 for p in points)
    assert "against llama-cpp-python's own Llama.eval" in done.stdout and "AR own" in done.stdout
    assert data["reference_weights"] == "as stored" and "its weights as stored" in done.stdout  # as the backend's
    assert "llama.cpp own N=4" in done.stderr  # its points come as they are measured, after the backend's


def test_a_multiline_case_leaves_the_context_to_the_decodes_cache(llama_tiny, tmp_path, monkeypatch):
    """`bench multiline` measures each case's floor after it on a cache of its own; llama.cpp's model
    holds one context, so the decodes' cache takes it back there, its ids fed again before the next
    case's wall starts rather than inside it."""
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "shapes.py").write_text(SHAPES)
    (tmp_path / "cases.jsonl").write_text(json.dumps(SHAPE_CASES[0]) + "\n")
    answering(monkeypatch, SHAPES_RENAMED)
    lm = language_model(llama_tiny)
    row = multiline.run_case(
        llama_tiny, multiline.load_cases(tmp_path)[0], 1, multiline.measure_rates(llama_tiny), scripted()
    )
    assert row["floor_prefill"] > 0 and row["forwards"] > 0
    assert llama_tiny.model.current is lm.cache and llama_tiny.model.positions() == len(lm.ids)
