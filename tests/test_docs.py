"""The documentation site builds with ``mkdocs build --strict`` (mkdocs.yml, docs/): a broken
link between pages, a missing anchor or a page left out of the nav fails the build. And every
verifier in the registry has its page, nav entry and table rows, checked against the claims its
class makes, so a verifier file without docs fails a test that names it."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

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


# --- every registered verifier is documented ------------------------------------------------------

def _table_rows(text: str, heading: str) -> dict[str, list[str]]:
    """{verifier name: its cells} of the first markdown table after ``heading``; a row's name is
    the first backticked word of its first cell."""
    rows, seen = {}, False
    for line in text[text.index(heading):].splitlines()[1:]:
        if line.startswith("|"):
            seen = True
            cells = [c.strip() for c in line.strip("|").split("|")]
            name = re.search(r"`([A-Za-z_]\w*)`", cells[0])
            if name:
                rows[name.group(1)] = cells
        elif seen:
            break
    return rows


def _lossless_cell_agrees(cell: str, lossless: bool) -> bool:
    return ("**no**" not in cell) == lossless


def verifier_doc_problems(root: Path = ROOT) -> list[str]:
    """What the docs lack for each verifier in the registry, one line each naming it: its page
    ``docs/verifiers/<name>.md``, its entry in mkdocs.yml's Verifiers nav, and its row in the
    README's and in ``docs/verifiers/index.md``'s tables (drafts and lossless as the class
    claims them). Empty when every verifier is documented."""
    from algorithms.verifiers import get_verifier, list_verifiers

    nav = yaml.safe_load((root / "mkdocs.yml").read_text())["nav"]
    section = next(item["Verifiers"] for item in nav if isinstance(item, dict)
                   and "Verifiers" in item)
    nav_pages = {next(iter(e.values())) for e in section if isinstance(e, dict)}
    readme = _table_rows((root / "README.md").read_text(), "## Verifiers")
    index = _table_rows((root / "docs/verifiers/index.md").read_text(), "# Verifiers")
    problems = []
    for name in list_verifiers():
        v = get_verifier(name)
        drafts = "1" if v.max_drafts == 1 else "K"
        suggested = (f"| `{name}` | {drafts} | {'yes' if v.lossless else '**no**'} | "
                     f"{(type(v).__doc__ or '').strip().splitlines()[0]} |")
        if not (root / "docs" / "verifiers" / f"{name}.md").is_file():
            problems.append(f"{name}: no page docs/verifiers/{name}.md")
        if f"verifiers/{name}.md" not in nav_pages:
            problems.append(f"{name}: no entry in mkdocs.yml's Verifiers nav "
                            f"(- {name}: verifiers/{name}.md)")
        for where, rows, col in (("README.md's Verifiers table", readme, 1),
                                 ("docs/verifiers/index.md's table", index, 2)):
            row = rows.get(name)
            if row is None:
                problems.append(f"{name}: no row in {where}, e.g. {suggested}")
            elif row[col] != drafts or not _lossless_cell_agrees(row[col + 1], v.lossless):
                problems.append(f"{name}: {where} says drafts {row[col]!r}, lossless "
                                f"{row[col + 1]!r}; the class claims max_drafts={v.max_drafts}, "
                                f"lossless={v.lossless}")
    for where, rows in (("README.md", readme), ("docs/verifiers/index.md", index)):
        problems += [f"{name}: a row in {where} but no such verifier is registered"
                     for name in sorted(set(rows) - set(list_verifiers()))]
    return problems


def test_every_registered_verifier_is_documented():
    problems = verifier_doc_problems()
    assert not problems, "\n".join(problems)


def test_an_undocumented_verifier_is_named(tmp_path):
    """The check on a copy of the docs with one verifier's page, nav entry and rows removed:
    it must name that verifier for each, and nothing else."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "docs" / "verifiers" / "traversal.md").unlink()
    for name in ("mkdocs.yml", "README.md", "docs/verifiers/index.md"):
        text = (ROOT / name).read_text()
        kept = [line for line in text.splitlines(keepends=True)
                if "traversal" not in line or not line.lstrip().startswith(("|", "- "))]
        (tmp_path / name).write_text("".join(kept))
    problems = verifier_doc_problems(tmp_path)
    assert len(problems) == 4 and all(p.startswith("traversal: no ") for p in problems), problems
