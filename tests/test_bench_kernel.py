"""The kernel benchmark on the tiny random Qwen2: the cache goes back to the P-token prefix after every
measurement, a splice equals stepping, extrapolation is marked, and the CLI writes JSON and a plot."""

from __future__ import annotations

import json

import pytest
import torch

from cadedit.bench import kernel as kn
from tests.tinymodel import make_model, save_model


@pytest.fixture(scope="module")
def model():
    return make_model()


def test_measurements_crop_the_cache_back_to_the_prefix(model):
    prefix = kn.random_ids(16, model.config.vocab_size, 0)
    bench = kn.Bench(model, prefix, torch.device("cpu"))
    ids = kn.random_ids(8, model.config.vocab_size, 1)
    with torch.inference_mode():
        assert bench.time_ar(ids) > 0 and bench.cache.length == 16
        assert bench.time_pp(ids) > 0 and bench.cache.length == 16


def test_splice_after_crop_gives_the_same_logits_as_a_fresh_prefix(model):
    """AR and PP really start from the same P-token state: after AR steps and a crop, a splice's last
    logits equal those of one forward over prefix + span."""
    vocab = model.config.vocab_size
    prefix, span = kn.random_ids(12, vocab, 0), kn.random_ids(5, vocab, 1)
    bench = kn.Bench(model, prefix, torch.device("cpu"))
    with torch.inference_mode():
        bench.time_ar(span)
        spliced = bench._forward(span)[-1]
        fresh = model(torch.cat([prefix, span], dim=1)[0], model.new_cache())[-1]
    assert torch.allclose(spliced, fresh, atol=1e-4)


def test_sweep_reports_medians_and_marks_extrapolation(model):
    settings = kn.KernelSettings(prefix=8, spans=(1, 4), trials=3, ar_max=2, seed=0)
    seen, units = [], []
    points = kn.sweep(model, torch.device("cpu"), settings, on_point=seen.append, advance=units.append)
    assert [p.n for p in points] == [1, 4] and seen == points
    one, four = points
    assert not one.extrapolated and one.ar_steps == 1
    assert four.extrapolated and four.ar_steps == 2
    assert len(four.ar_trials_ms) == 3 and four.ar_ms == sorted(four.ar_trials_ms)[1]
    assert four.speedup == pytest.approx(four.ar_ms / four.pp_ms)
    assert sum(units) == kn.work_units(settings) == (1 + 1) * 3 + (2 + 1) * 3


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    points = [kn.KernelPoint(n, 10.0 * n, 10.0, float(n), (), ()) for n in (1, 2, 4)]
    assert kn.plot(points, tmp_path / "k.png", "tiny")
    assert (tmp_path / "k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_kernel_command_writes_json_and_plot(tmp_path):
    from typer.testing import CliRunner

    from cadedit.cli.root import app

    folder = save_model(tmp_path / "tiny")
    out = tmp_path / "k.json"
    args = [
        "bench",
        "kernel",
        "--model",
        str(folder),
        "--spans",
        "1,2",
        "--trials",
        "1",
        "--prefix",
        "8",
        "--threads",
        "1",
        "--dtype",
        "fp32",
        "--ar-max",
        "1",
        "--json",
        str(out),
    ]
    try:
        import matplotlib  # noqa: F401 - the optional "plot" extra

        plotting = True
    except ImportError:
        plotting = False
    args += ["--plot", str(tmp_path / "k.png")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["partial"] is False and data["prefix"] == 8 and data["dtype"] == "float32"
    assert [r["n"] for r in data["results"]] == [1, 2] and data["results"][1]["extrapolated"] is True
    assert "AR extrapolated per token" in result.stdout
    assert (tmp_path / "k.png").exists() == plotting
    assert plotting or "matplotlib not installed" in result.output


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_kernel_command_times_either_attention_and_refuses_others(tmp_path, attn):
    from typer.testing import CliRunner

    from cadedit.cli.root import app

    folder = save_model(tmp_path / "tiny")
    args = [
        "bench",
        "kernel",
        "--model",
        str(folder),
        "--spans",
        "1",
        "--trials",
        "1",
        "--prefix",
        "8",
        "--threads",
        "1",
        "--dtype",
        "fp32",
        "--json",
        str(tmp_path / "k.json"),
    ]
    result = CliRunner().invoke(app, args + ["--attn", attn])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "k.json").read_text())["attn"] == attn
    result = CliRunner().invoke(app, args + ["--attn", "flash"])
    assert result.exit_code == 1 and "attention implementation 'flash' unknown" in result.output


def test_several_models_take_turns_trial_by_trial(model):
    calls = []

    class Logged:
        def __init__(self, name):
            self.name, self.config = name, model.config

        def new_cache(self):
            return model.new_cache()

        def __call__(self, ids, cache, keep=1):
            calls.append((self.name, ids.shape[0]))
            return model(ids, cache, keep)

    settings = kn.KernelSettings(prefix=4, spans=(2,), trials=2, ar_max=0, seed=0)
    seen = []
    points = kn.sweep_turns(
        [Logged("a"), Logged("b")], torch.device("cpu"), settings, lambda k, p: seen.append((k, p.n))
    )
    assert [len(p) for p in points] == [1, 1] and seen == [(0, 2), (1, 2)]
    timed = [name for name, _ in calls[2 + 4 :]]  # after the two prefixes and each model's warm-up (PP, one AR step)
    assert timed == ["a", "a", "a", "b", "b", "b"] * 2  # per trial: a's AR steps and PP, then b's
