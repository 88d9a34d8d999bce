"""What a person adopting pullback reads first: package metadata, license, changelog, docs site.

File checks only (building and installing the package is `.ci/build_check`, building the
site is `.ci/docs_check`), plus the examples on the documentation pages, run as doctests.
"""

import doctest
import importlib.util
import re
from pathlib import Path

import pytest

import pullback

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# Public names that live in a submodule and are loaded on first use: where the API pages document them.
DOCUMENTED_AS = {
    "destructure": "pullback.optim.destructure",
    "save": "pullback.saving.save",
    "load": "pullback.saving.load",
    "check_gradient": "pullback.testing",
    "GradientCheck": "pullback.testing",
    "state_dict": "pullback.checkpoint.state_dict",
    "load_state_dict": "pullback.checkpoint.load_state_dict",
}


@pytest.fixture(scope="module")
def project():
    tomllib = pytest.importorskip("tomllib")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


@pytest.fixture(scope="module")
def nav_files():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    files = []

    def walk(entry):
        if isinstance(entry, str):
            files.append(entry)
        elif isinstance(entry, dict):
            for value in entry.values():
                walk(value)
        elif isinstance(entry, list):
            for value in entry:
                walk(value)

    walk(config["nav"])
    return files


def test_license_metadata(project):
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert project["authors"] == [{"name": "The pullback authors"}]
    # setuptools refuses a License :: classifier next to an SPDX license expression.
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]


def test_classifiers_keywords_and_urls(project):
    classifiers = set(project["classifiers"])
    pythons = sorted(c.rsplit(" ", 1)[1] for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert pythons == ["3.10", "3.11", "3.12", "3.13"]  # NumPy 2.2, the floor, supports Python 3.10
    assert project["requires-python"] == ">=3.10", "requires-python should match the lowest Python classifier"
    assert {"Operating System :: OS Independent", "Topic :: Scientific/Engineering :: Mathematics"} <= classifiers
    assert "automatic differentiation" in project["keywords"]
    urls = project["urls"]
    assert {"Homepage", "Documentation", "Source", "Changelog"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values()), urls


def test_version_and_docs_extra(project):
    assert project["version"] == pullback.__version__
    docs = " ".join(project["optional-dependencies"]["docs"])
    for package in ["mkdocs", "mkdocs-material", "mkdocstrings[python]"]:
        assert package in docs, f"the docs extra lacks {package}"


def test_license_file_is_mit():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 The pullback authors" in text
    assert "Permission is hereby granted, free of charge" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def test_changelog_has_unreleased_and_current_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\](.*)$", text, flags=re.MULTILINE)
    assert headings[0][0] == "Unreleased", "the first section should be [Unreleased]"
    versions = {name: rest for name, rest in headings}
    assert pullback.__version__ in versions, f"CHANGELOG.md has no section for {pullback.__version__}"
    assert re.fullmatch(r" - \d{4}-\d{2}-\d{2}", versions[pullback.__version__]), "a release heading is '## [X.Y.Z] - YYYY-MM-DD'"
    assert f"[{pullback.__version__}]: https://" in text, "link the version heading at the end of the file"


def test_nav_lists_every_page_and_only_existing_ones(nav_files):
    missing = [name for name in nav_files if not (DOCS / name).is_file()]
    assert not missing, f"mkdocs.yml's nav names pages that do not exist: {missing}"
    pages = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    assert sorted(nav_files) == pages, "every page under docs/ belongs in mkdocs.yml's nav, once"


def test_api_reference_documents_every_public_name():
    documented = set()
    for page in DOCS.glob("api*.md"):
        documented |= set(re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), flags=re.MULTILINE))
    missing = [n for n in pullback.__all__ if DOCUMENTED_AS.get(n, f"pullback.{n}") not in documented]
    assert not missing, f"add a '::: pullback.NAME' line to an API page (docs/api*.md) for {missing}"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md") if ">>>" in p.read_text(encoding="utf-8")))
def test_documentation_examples_run(page):
    flags = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
    result = doctest.testfile(str(DOCS / page), module_relative=False, optionflags=flags, raise_on_error=False)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} example(s) on docs/{page} disagree with pullback (see the output above)"


def test_docstring_fences_extension():
    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location("griffe_doctest", DOCS / "griffe_doctest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = doctest.testmod(module)
    assert (result.attempted, result.failed) == (3, 0)
    text = "Intro::\n\n    a = 1\n\n        b = 2\n\n>>> x = 1\n>>> x\n1\n\n```\n>>> kept\n```"
    assert module.fence(text).splitlines() == [
        "Intro:", "", "```text", "a = 1", "", "    b = 2", "```", "",
        "```pycon", ">>> x = 1", ">>> x", "1", "```", "",
        "```", ">>> kept", "```",
    ]
