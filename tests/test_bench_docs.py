"""bench/RESULTS.md (issue 51, item 6): every script it names exists (a removed one is marked
"(removed"), and every script in bench/archive/ is named by its README."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_script_results_names_exists_or_is_marked_removed():
    text = (ROOT / "bench" / "RESULTS.md").read_text()
    named = set(re.findall(r"bench/[\w/]+\.(?:py|sh)", text))
    removed = set(re.findall(r"(bench/[\w/]+\.(?:py|sh))`? \(removed", text))  # kept as the record, marked
    missing = {n for n in named - removed if not (ROOT / n).is_file()}
    assert not missing, f"bench/RESULTS.md names scripts that are not there: {sorted(missing)}"
    assert "## Contents" in text


def test_the_archive_readme_names_every_archived_script():
    readme = (ROOT / "bench" / "archive" / "README.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "bench" / "archive").glob("*.py"))
    assert scripts and [s for s in scripts if f"`{s}`" not in readme] == []
