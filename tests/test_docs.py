"""The manual stays true: the docs site builds strictly, every runnable example in README.md and docs/
runs, every TOML example parses as the settings reader reads it, and every documentation page and
anchor the code cites exists.

Runnable examples are the blocks fenced as `bash` (docs/index.md says so): each runs under `bash -euo
pipefail` in a fresh folder holding a copy of examples/, through the real `cadedit` console script, with
no model. Blocks fenced as `sh` need a model, an engine or a network and are shown only.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify
from mktestdocs import grab_code_blocks

from cadedit.settings import FILE_KEYS
from tests.conftest import console_script

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
RULE_KEYS = {"files", "instruction", "test"}  # cadedit.git.repo reads exactly these in a [[rules]] table
README_MOST_LINES = 300
# A citation of the manual from code: docs/PAGE.md, optionally #anchor.
CITATION = re.compile(r"docs/([\w./-]+\.md)(?:#([\w-]+))?")
# The old way of citing, by a README section's title, which broke when sections moved.
README_TITLE = re.compile(r"README[,:]? +(\"|“|[A-Z][a-z]+ [a-z])")


def blocks(lang: str) -> list:
    return [
        pytest.param(page, code, id=f"{page.relative_to(ROOT)}-{k}")
        for page in PAGES
        for k, code in enumerate(grab_code_blocks(page.read_text(encoding="utf-8"), lang))
    ]


def mkdocs(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**_env(), "NO_MKDOCS_2_WARNING": "1"},
    )


def _env() -> dict:
    import os

    bin_dir = str(Path(console_script()).parent)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "NO_COLOR": "1",
        "COLUMNS": "100",
    }


def test_mkdocs_build_strict_passes(tmp_path):
    done = mkdocs("build", "--strict", "--site-dir", str(tmp_path / "site"), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "hook" / "index.html").is_file()


@pytest.mark.parametrize("breakage", ["a page left out of nav", "a link to a missing anchor", "a missing page"])
def test_mkdocs_build_strict_fails_on_broken_docs(tmp_path, breakage):
    """The validation settings of mkdocs.yml are what make --strict fail; without them these pass."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    if breakage == "a page left out of nav":
        (tmp_path / "docs" / "orphan.md").write_text("# Orphan\n")
    else:
        target = "design.md#no-such-section" if "anchor" in breakage else "no-such-page.md"
        with (tmp_path / "docs" / "usage.md").open("a") as page:
            page.write(f"\nSee [there]({target}).\n")
    done = mkdocs("build", "--strict", "--site-dir", str(tmp_path / "site"), cwd=tmp_path)
    assert done.returncode != 0, f"{breakage} did not fail the build"


@pytest.mark.parametrize(("page", "code"), blocks("bash"))
def test_runnable_example_runs(tmp_path, page, code):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_env()
    )
    assert done.returncode == 0, f"{page.name}:\n{code}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"


def test_there_are_runnable_examples():
    """The marker is what puts an example under test: a page set without one runs nothing."""
    runnable = {param.values[0].name for param in blocks("bash")}
    assert {"README.md", "program.md", "hook.md"} <= runnable


@pytest.mark.parametrize(("page", "code"), blocks("toml"))
def test_toml_example_is_valid_settings(page, code):
    table = tomllib.loads(code)
    table = table.get("tool", {}).get("cadedit", table)
    assert set(table) <= set(FILE_KEYS), f"{page.name}: unknown keys {set(table) - set(FILE_KEYS)}"
    for rule in table.get("rules", []):
        assert {"files", "instruction"} <= set(rule) <= RULE_KEYS, f"{page.name}: rule {rule}"


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MOST_LINES
    text = "\n".join(lines)
    for target in ("docs/hook.md#the-rules", "docs/program.md", "docs/engines.md#serving-the-model"):
        assert f"]({target})" in text, f"the README does not link {target}"
    assert "```sh\n.venv/bin/python -m pytest\n```" in text, "the test command is the one .ci/run runs"


def anchors(page: Path) -> set[str]:
    """The anchors mkdocs gives a page's headings (outside code blocks)."""
    found, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slugify(line.lstrip("#").strip(), "-"))
    return found


def code_files() -> list[Path]:
    return [
        path
        for folder in ("cadedit", "tests", "tools")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".sh") and path.is_file() and path != Path(__file__).resolve()
    ]


def test_every_docs_citation_in_code_exists():
    dangling = []
    for path in code_files():
        for match in CITATION.finditer(path.read_text(encoding="utf-8", errors="replace")):
            page, anchor = ROOT / "docs" / match[1], match[2]
            if not page.is_file() or (anchor and anchor not in anchors(page)):
                dangling.append(f"{path.relative_to(ROOT)}: {match[0]}")
    assert not dangling, "dangling documentation references:\n" + "\n".join(dangling)


def test_code_cites_docs_pages_not_readme_titles():
    cited = [
        f"{path.relative_to(ROOT)}: {match[0]}"
        for path in code_files()
        for match in README_TITLE.finditer(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not cited, "cite docs/PAGE.md#anchor instead of a README section title:\n" + "\n".join(cited)


def help_text(*args: str, columns: int) -> str:
    done = subprocess.run(
        [console_script(), *args, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_env(), "COLUMNS": str(columns)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("columns", [80, 120])
def test_hook_help_example_is_valid_toml(columns):
    """The rules example in `cadedit hook run --help`, pasted as printed, is the settings it shows."""
    lines = [line.strip(" │") for line in help_text("hook", "run", columns=columns).splitlines()]
    start = next(k for k, line in enumerate(lines) if line.startswith("model = "))
    example = "\n".join(lines[start : lines.index("", start)])
    table = tomllib.loads(example)
    assert table["rules"] == [
        {
            "files": "*.py",
            "test": "python -m pytest -q",
            "instruction": "Add a docstring to every public function that lacks one.",
        }
    ]


def test_flags_are_not_labelled_with_a_type():
    text = help_text("apply", columns=120)
    assert "<bool>" not in text and "--write" in text
    assert "<str>" in help_text("fix", columns=120)  # options that take a value keep their label


def test_changelog_releases_the_package_version_and_links_only_pages_that_exist():
    import cadedit

    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert versions[0] == "Unreleased" and versions[1] == cadedit.__version__
    assert f'version = "{cadedit.__version__}"' in (ROOT / "pyproject.toml").read_text()
    assert len(versions) == len(set(versions)), "one block per version"
    missing = [link for link in re.findall(r"\]\(((?:docs/)[^)#]+)", text) if not (ROOT / link).is_file()]
    assert not missing, missing


@pytest.mark.parametrize(
    ("command", "page"), [(("fix",), "usage.md"), (("hook", "run"), "hook.md"), (("serve", "start"), "engines.md")]
)
def test_every_option_is_in_the_manual(command, page):
    """A new option of a command shows up in its manual page, or this fails."""
    import typer

    from cadedit.cli.root import app

    found = typer.main.get_command(app)
    for name in command:
        found = found.get_command(None, name)  # click's way: the root group imports the command's module
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    options = [opt for param in found.params for opt in param.opts if opt.startswith("--") and opt != "--help"]
    assert options and not [opt for opt in options if f"`{opt}" not in text]
