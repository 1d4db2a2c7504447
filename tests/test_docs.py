"""The documentation site builds with ``mkdocs build --strict`` (mkdocs.yml, docs/): a broken
link between pages, a missing anchor or a page left out of the nav fails the build."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        # Not --quiet: mkdocs then drops the warnings that --strict counts, and passes.
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--config-file", str(root / "mkdocs.yml"), "--site-dir", str(site)],
        capture_output=True, text=True, check=False)


def test_docs_build_strict(tmp_path):
    result = build(ROOT, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "verifiers" / "block" / "index.html").exists()


def test_a_broken_link_fails_the_build(tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    page = copy / "docs" / "concepts.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [nowhere](verifiers/nowhere.md).\n",
                    encoding="utf-8")
    result = build(copy, tmp_path / "site")
    assert result.returncode != 0
    assert "nowhere.md" in result.stdout + result.stderr
