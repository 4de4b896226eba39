"""Model loading and the KV-cache splice on the tiny random Qwen2 (no download, no real model).
CachedLM's prompt-prefix reuse is in test_lm.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from cadedit.backends import hardware as H
from cadedit.backends import model as M
from cadedit import settings as S
from cadedit.errors import ConfigError, ModelError
from tests.conftest import approve_settings, console_script
from tests.tinymodel import make_hf_model, make_model, save_model

# -- splice equivalence ------------------------------------------------------------------------


def _forward(model):
    cache = model.new_cache()
    return M.CachedLM(model, cache), cache


@pytest.mark.parametrize("spans", [(1,), (2,), (8, 1), (3, 17, 64), (1, 5, 2, 40, 9)])
def test_splice_in_one_forward_equals_feeding_tokens_one_by_one(spans):
    model = make_model()
    g = torch.Generator().manual_seed(sum(spans))
    prompt = torch.randint(0, model.config.vocab_size, (23,), generator=g).tolist()
    spliced, spliced_cache = _forward(model)
    stepped, stepped_cache = _forward(model)
    spliced.feed(prompt)
    stepped.feed(prompt)
    for n in spans:  # several splices in a row: later ones sit at later positions (RoPE)
        span = torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist()
        at_once = spliced.feed(span)[-1]
        for token in span:
            one_by_one = stepped.feed([token])[-1]
        np.testing.assert_allclose(np.asarray(at_once), np.asarray(one_by_one), rtol=1e-4, atol=1e-5)
    assert spliced_cache.length == stepped_cache.length
    for (keys_a, values_a), (keys_b, values_b) in zip(
        spliced_cache.layers(spliced_cache.length), stepped_cache.layers(stepped_cache.length)
    ):
        torch.testing.assert_close(keys_a, keys_b, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(values_a, values_b, rtol=1e-4, atol=1e-5)


def test_spliced_cache_matches_a_single_uncached_pass_over_the_whole_sequence():
    model = make_model()
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, model.config.vocab_size, (90,), generator=g).tolist()
    forward, _ = _forward(model)
    forward.feed(ids[:30])
    forward.feed(ids[30:31])
    last = forward.feed(ids[31:])[-1]
    with torch.inference_mode():
        full = model(torch.tensor(ids), model.new_cache())[-1]
    np.testing.assert_allclose(last, full.float().numpy(), rtol=1e-4, atol=1e-5)


def test_cropping_rejected_draft_tokens_restores_the_cache_exactly():
    """Verify a draft in one forward (logits for every drafted position), keep a prefix, crop the rest:
    the logits then equal those of a cache that never saw the rejected tokens."""
    model = make_model()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, model.config.vocab_size, (60,), generator=g).tolist()
    drafted, _ = _forward(model)
    plain, _ = _forward(model)
    drafted.feed(ids[:40])
    plain.feed(ids[:40])
    verify = drafted.feed(ids[40:48], keep=8)  # [8, V]: one row per position
    assert verify.shape == (8, model.config.vocab_size)
    for k in range(40, 48):
        np.testing.assert_allclose(
            np.asarray(verify[k - 40]), np.asarray(plain.feed([ids[k]])[-1]), rtol=1e-4, atol=1e-5
        )
    drafted.crop(5)  # keep 3 of the 8 drafted tokens
    plain_fresh, _ = _forward(model)
    plain_fresh.feed(ids[:43])
    np.testing.assert_allclose(
        np.asarray(drafted.feed(ids[50:55])[-1]), np.asarray(plain_fresh.feed(ids[50:55])[-1]), rtol=1e-4, atol=1e-5
    )


# -- choosing the model ------------------------------------------------------------------------


def test_model_precedence_cli_then_env_then_project_then_default(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    assert S.choose_model(None, project / "src") == S.DEFAULT_MODEL
    (project / "pyproject.toml").write_text('[tool.cadedit]\nmodel = "from-pyproject"\n')
    assert S.choose_model(None, project / "src") == S.DEFAULT_MODEL  # not approved yet
    approve_settings(project / "src")
    assert S.choose_model(None, project / "src") == "from-pyproject"
    (project / "src" / ".cadedit.toml").write_text('model = "from-dotfile"\n')
    approve_settings(project / "src")
    assert S.choose_model(None, project / "src") == "from-dotfile"
    monkeypatch.setenv("CADEDIT_MODEL", "from-env")
    assert S.choose_model(None, project / "src") == "from-env"
    assert S.choose_model("from-cli", project / "src") == "from-cli"


def test_bad_settings_file_is_a_config_error(tmp_path):
    (tmp_path / ".cadedit.toml").write_text("model = [1, 2]\n")
    approve_settings(tmp_path)
    with pytest.raises(ConfigError, match="model"):
        S.configured_model(tmp_path)
    (tmp_path / ".cadedit.toml").write_text("model = \n")
    with pytest.raises(ConfigError, match="cannot read"):
        S.configured_model(tmp_path)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("missing-folder/", "neither a model folder"),
        ("nowhere/model.gguf", "not found"),
        ("Org/not-cached-model", "not in the local Hugging Face cache"),
    ],
)
def test_missing_model_is_one_line_model_error_with_hint(spec, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError, match=message) as info:
        M.load_model(spec, threads=1)
    assert "\n" not in info.value.message
    assert "--model" in info.value.hint and "CADEDIT_MODEL" in info.value.hint


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json", "tokenizer.json"])
def test_a_model_file_of_json_nested_too_deeply_is_a_one_line_error(tmp_path, name):
    folder = save_model(tmp_path / "tiny", context=512)
    (folder / name).write_text("[" * 100_000)
    (tmp_path / "a.py").write_text("x = 1\n")
    done = subprocess.run(
        [console_script(), "fix", "a.py", "Fix it.", "--model", str(folder), "--threads", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, input="",
    )  # fmt: skip
    assert done.returncode == 1 and "internal error" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"error: {folder / name}: ") and "Traceback" not in done.stderr


def test_folder_without_config_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        M.load_model(str(tmp_path / "empty"), threads=1)


def test_loads_a_model_folder_on_cpu(tmp_path):
    loaded = M.load_model(str(save_model(tmp_path / "tiny", context=512)), dtype="fp32", threads=1)
    assert loaded.device == "cpu" and loaded.dtype == torch.float32
    assert loaded.context_limit == 512 and loaded.threads == 1 == torch.get_num_threads()
    assert not loaded.model.training
    assert M.render_chat(loaded.tokenizer, [{"role": "user", "content": "hi"}]).endswith("<|im_start|>assistant\n")


# -- threads, dtype, GGUF cache ----------------------------------------------------------------


@pytest.mark.parametrize("cores, busy, expected", [(8, 0, 8), (2, 1, 1), (2, 5, 1), (4, 2, 2)])
def test_default_threads_leave_busy_cores_alone(cores, busy, expected):
    assert H.default_threads(cores, busy) == expected


def test_default_threads_count_what_runs_now_not_the_load_average(monkeypatch):
    """A machine whose load average is high from a finished run (cadedit's own) but idle now gets every core."""
    monkeypatch.setattr(H.os, "getloadavg", lambda: (2.0, 2.0, 2.0), raising=False)
    assert H.runnable_others(samples=3, gap=0.0) == 0 or H.runnable_others(samples=3, gap=0.0) >= 0
    assert H.default_threads(2, 0) == 2
    spinner = __import__("subprocess").Popen([__import__("sys").executable, "-c", "while True: pass"])
    try:
        import time

        time.sleep(0.3)
        assert H.runnable_others(samples=5, gap=0.01) >= 1  # the spinning process holds a core now
    finally:
        spinner.kill()
        spinner.wait()


def test_dtype_auto_is_bf16_on_cuda_and_measured_once_per_machine_on_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert H.choose_dtype("auto", "cuda")[0] == torch.bfloat16
    calls = []

    def timing(dtype, rows, reps=9):
        calls.append((dtype, rows))
        return {torch.float32: 1.0, torch.bfloat16: 0.3}[dtype] * rows

    monkeypatch.setattr(H, "_time_linear", timing)
    first, why = H.choose_dtype("auto", "cpu", threads=2)
    assert first == torch.bfloat16 and "now" in why and calls
    monkeypatch.setattr(H, "_time_linear", lambda *a, **k: pytest.fail("measured again"))
    assert H.choose_dtype("auto", "cpu", threads=2) == (torch.bfloat16, H.choose_dtype("auto", "cpu", 2)[1])
    assert "earlier" in H.choose_dtype("auto", "cpu", threads=2)[1]
    monkeypatch.setattr(H, "_time_linear", lambda dtype, rows, reps=9: {torch.float32: 1.0, torch.bfloat16: 0.9}[dtype])
    assert H.choose_dtype("auto", "cpu", threads=1)[0] == torch.float32  # another thread count: its own measurement
    assert H.choose_dtype("fp32", "cpu") == (torch.float32, "--dtype")
    with pytest.raises(ModelError, match="unknown dtype"):
        H.choose_dtype("int3", "cpu")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # torch's kernels capped: another measurement
    monkeypatch.setattr(H, "_time_linear", lambda dtype, rows, reps=9: {torch.float32: 1.0, torch.bfloat16: 3.0}[dtype])
    assert H.choose_dtype("auto", "cpu", threads=2)[0] == torch.float32
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert H.choose_dtype("auto", "cpu", threads=2)[0] == torch.bfloat16


def test_gguf_is_converted_once_into_the_user_cache_atomically(tmp_path, monkeypatch):
    """The GGUF reader itself is transformers'; here it is replaced by the tiny model to test the cache."""
    import transformers

    from tests.tinytok import make_tokenizer

    gguf = tmp_path / "models" / "tiny.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF fake")
    calls = []

    class FakeAuto:
        @staticmethod
        def from_pretrained(folder, gguf_file, **kwargs):
            calls.append((Path(folder), gguf_file))
            return make_hf_model() if "dtype" in kwargs else make_tokenizer()

    monkeypatch.setattr(transformers, "AutoModelForCausalLM", FakeAuto)
    monkeypatch.setattr(transformers, "AutoTokenizer", FakeAuto)
    folder = M.convert_gguf(gguf)
    assert folder.parent == Path(os.environ["XDG_CACHE_HOME"]) / "cadedit" / "models"
    assert folder.name.startswith("tiny-9-") and (folder / "model.safetensors").is_file()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no temp folder left behind
    assert M.convert_gguf(gguf) == folder and len(calls) == 2  # second run: no conversion
    os.utime(gguf, ns=(1, 1))  # a changed file gets a new cache entry
    assert M.convert_gguf(gguf) != folder


def test_failed_gguf_conversion_leaves_no_cache_entry(tmp_path, monkeypatch):
    import transformers

    gguf = tmp_path / "broken.gguf"
    gguf.write_bytes(b"not a gguf")

    class Broken:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise ValueError("bad magic")

    monkeypatch.setattr(transformers, "AutoTokenizer", Broken)
    with pytest.raises(ModelError, match="cannot convert GGUF.*bad magic"):
        M.convert_gguf(gguf)
    assert list(M.cache_root().iterdir()) == []


@pytest.mark.parametrize("torch_seconds, chosen", [(10.5, "llama"), (8.5, "llama"), (7.9, "torch")])
def test_auto_runs_a_gguf_on_the_backend_that_measured_faster(monkeypatch, tmp_path, torch_seconds, chosen):
    """llama.cpp's edit work (its load included) 10 s against torch's estimate: torch only where it is
    clearly faster (a near tie runs the GGUF at its own size)."""
    from cadedit.backends.llama import gguf_file
    from cadedit.backends.llama import llamacpp

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(llamacpp, "available", lambda: True)
    monkeypatch.setattr(H, "backend_key", lambda path, threads: f"key-{torch_seconds}")
    monkeypatch.setattr(H, "probe_llama", lambda path, threads: ("llama", 10.0, "an edit's model work: llama 10.00 s"))
    monkeypatch.setattr(gguf_file, "read_metadata", lambda path: {})
    monkeypatch.setattr(H, "_torch_work_seconds", lambda meta, threads: (torch_seconds, 1))
    backend, why = H.choose_backend_for("auto", gguf, "cpu", "auto", 2)
    assert backend == chosen and f"torch {torch_seconds:.2f} s" in why


def test_torchs_side_of_the_probe_is_its_real_forward_extrapolated_from_two_and_six_layers(monkeypatch):
    """torch's estimate is cadedit's whole forward (attention, norms, head) on 2 and 6 layers of the
    model's shape, extrapolated: a layer is a quarter of the difference, the rest what 2 layers cost
    beyond them. Each is timed twice, taking turns, and the best kept: a slow 2-layer run would shrink
    the layer (and the estimate, times the model's layers) as much as a fast 6-layer one."""
    seen = []
    timings = iter([2.6, 4.0, 2.0, 4.4])  # 2 layers slow in the first turn, 6 layers in the second

    def timed(config, layers, dtype, step):
        seen.append((config.hidden_size, config.intermediate_size, config.num_key_value_heads, layers))
        return next(timings)

    monkeypatch.setattr(H, "_forward_work_seconds", timed)
    monkeypatch.setattr(H, "cpu_dtype", lambda threads: (torch.bfloat16, ""))
    monkeypatch.setattr(H, "cpu_steps", lambda threads: ("int8", ""))
    meta = {
        "general.architecture": "qwen2",
        "qwen2.embedding_length": 64,
        "qwen2.feed_forward_length": 128,
        "qwen2.block_count": 11,
        "qwen2.attention.head_count": 4,
        "qwen2.attention.head_count_kv": 2,
        "tokenizer.ggml.tokens": ["a"] * 100,
    }
    seconds, need = H._torch_work_seconds(meta, 1)
    assert seen == [(64, 128, 2, 2), (64, 128, 2, 6)] * 2 and seconds == pytest.approx(2.0 + 9 * 0.5)
    assert need == 2 * (11 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 64 * 128) + 2 * 100 * 64)  # bf16 bytes


def test_the_probes_work_is_a_prompt_then_drafts_then_steps_each_timed_after_the_prompt(monkeypatch):
    """Both backends' sides time the same forwards: an untimed warm-up, the prompt-sized forward from
    there, then each smaller forward size after that prompt, the best of a few (of long_reps for the
    prompt), times its count."""
    fed, crops = [], []

    class Cache:
        length = 0

        def crop(self, n):
            crops.append(n)
            self.length = min(self.length, n)

    class Model:
        def __call__(self, ids, cache):
            fed.append(len(ids))
            cache.length += len(ids)

    clock = iter(range(0, 10_000, 1))  # every forward takes 1 s
    monkeypatch.setattr(H.time, "perf_counter", lambda: next(clock))
    filler = H._filler(1000)
    seconds = H.work_seconds(Model(), Cache(), filler, long_reps=2)
    assert {rows for rows, _ in H._WORK} == {
        512,
        16,
        1,
    }  # the prompt, drafts, steps (docs/measurements/design-figures.md)
    assert fed == [H._WARM_UP, 512, 512, 16, 16, 16, 1, 1, 1, 1, 1] and len(filler) >= H._WARM_UP + 512 + 512
    assert crops == [H._WARM_UP] * 2 + [H._WARM_UP + 512] * 8
    assert seconds == pytest.approx(sum(times for _, times in H._WORK))


@pytest.mark.parametrize(
    "line, gpu",
    [
        ("cuda: Optional[str] = None\nhip: Optional[str] = None\n", False),
        ("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n", True),
        ("cuda = None\nhip = '6.3.42131'\n", True),
    ],
)
def test_a_cpu_build_of_torch_is_told_from_its_version_file_without_importing_it(monkeypatch, tmp_path, line, gpu):
    import importlib.machinery
    import importlib.util

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("from typing import Optional\n" + line)
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "torch")]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    assert H.torch_has_gpu_build() is gpu
    if not gpu:
        assert H.choose_device("auto") == "cpu"


@pytest.mark.parametrize("step", ["bf16", "int8", "int4"])
def test_the_torch_probe_runs_the_real_forward_with_the_step_copies_and_leaves_no_files(monkeypatch, tmp_path, step):
    from cadedit.backends.torch.qwen2 import Config

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    config = Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=5,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    assert H._forward_work_seconds(config, 1, torch.bfloat16, step) > 0
    assert not list(tmp_path.rglob("*"))  # the step copies went to a temporary folder, not the user cache


# -- a GGUF's metadata, read by cadedit's own parser ---------------------------------------------


def test_gguf_metadata_reads_as_the_gguf_package_reads_it_and_any_cut_is_a_model_error(tmp_path):
    gguf = pytest.importorskip("gguf")
    from cadedit.backends.llama.gguf_file import read_metadata
    from tests.tinygguf import save_gguf

    path = save_gguf(tmp_path / "tiny.gguf")
    meta = read_metadata(path)
    reader = gguf.GGUFReader(path)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    assert meta["tokenizer.ggml.tokens"] == [bytes(tokens.parts[i]).decode() for i in tokens.data]
    merges = reader.fields["tokenizer.ggml.merges"]
    assert meta["tokenizer.ggml.merges"] == [bytes(merges.parts[i]).decode() for i in merges.data]
    assert meta["general.architecture"] == "qwen2" and isinstance(meta["tokenizer.chat_template"], str)
    whole = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    end = reader.fields["tokenizer.chat_template"].offset  # past the vocabulary and its merges
    for at in sorted({5, 30, end // 3, end // 2, end - 7, end - 1}):  # in the header, mid-vocabulary, mid-merges
        cut.write_bytes(whole[:at])
        with pytest.raises(ModelError, match="not a (whole )?GGUF file"):
            read_metadata(cut)
