"""nbval markers that nbval really honours.

nbval recognises a comment marker only when the whole comment line is the marker
(``nbval.plugin.find_comment_markers``: ``line.lstrip('#').strip() in comment_markers``), so
``# NBVAL_IGNORE_OUTPUT  (why)`` is an ordinary comment and its cell is compared. These tests run
nbval's own parsers over every cell that mentions a marker and fail on any that nbval would not
recognise. Put the reason for ignoring on the line *above* the marker.
"""

import re

import nbformat
import pytest
from nbval.plugin import find_comment_markers, find_metadata_tags

from ampcourse.course import ROOT

FOLDERS = ("notebooks", "solutions", "exercises")
# Anything that looks like an attempt at a marker: NBVAL_... or PYTEST_VALIDATE_... in a comment (any
# case), nbval-... as a cell tag. Prose that merely mentions "nbval" is not a marker.
LOOKS_LIKE_A_MARKER = re.compile(r"NBVAL_|PYTEST_VALIDATE_", re.IGNORECASE)
LOOKS_LIKE_A_TAG = re.compile(r"^(nbval|pytest-validate)", re.IGNORECASE)


def unrecognised_markers(nb):
    """``[(code cell index, text)]`` for every marker-like comment or tag that nbval ignores."""
    problems = []
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    for index, cell in enumerate(code_cells):
        for line in cell.source.splitlines():
            if "#" not in line or not LOOKS_LIKE_A_MARKER.search(line.split("#", 1)[1]):
                continue
            # nbval's own parser, on this line alone: does it yield a marker?
            if not list(find_comment_markers(line)):
                problems.append((index, f"comment {line.strip()!r}"))
        tags = cell.metadata.get("tags", [])
        for tag in tags:
            if LOOKS_LIKE_A_TAG.search(tag) and not list(find_metadata_tags({"tags": [tag]})):
                problems.append((index, f"tag {tag!r}"))
    return problems


def _notebooks():
    return sorted(path for folder in FOLDERS for path in (ROOT / folder).glob("*.ipynb"))


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_nbval_marker_is_one_nbval_recognises(path):
    problems = unrecognised_markers(nbformat.read(path, as_version=4))
    assert not problems, (
        f"{path.name}: nbval ignores these markers (a marker line must be exactly e.g. "
        f"'# NBVAL_IGNORE_OUTPUT'; put the reason on the line above): {problems}")


def _tiny(source, tags=()):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), cell]
    return nb


@pytest.mark.parametrize("source", [
    "# NBVAL_IGNORE_OUTPUT  (timings differ)\nprint(1)",
    "# NBVAL_IGNORE_OUTPUT: timings\nprint(1)",
    "print(1)  # NBVAL_IGNORE_OUTPUT",
    "# NBVAL_IGNORE_OUTPUTS\nprint(1)",
    "# nbval_ignore_output\nprint(1)",
])
def test_a_marker_with_trailing_text_or_a_typo_is_reported(source):
    assert unrecognised_markers(_tiny(source)) == [(1, f"comment {source.splitlines()[0].strip()!r}")]


def test_the_inline_marker_is_reported_because_nbval_ignores_it():
    # nbval reads whole comment lines only: code followed by the marker is not a marker.
    assert not list(find_comment_markers("print(1)  # NBVAL_IGNORE_OUTPUT"))


@pytest.mark.parametrize("source", [
    "# the timing depends on the machine\n# NBVAL_IGNORE_OUTPUT\nprint(1)",
    "#NBVAL_IGNORE_OUTPUT\nprint(1)",
    "print(1)\n    # NBVAL_SKIP",
])
def test_an_exact_marker_line_passes(source):
    assert list(find_comment_markers(source)), "nbval itself must recognise the marker"
    assert unrecognised_markers(_tiny(source)) == []


def test_prose_that_mentions_nbval_is_not_a_marker():
    assert unrecognised_markers(_tiny("# nbval compares this cell's output\nprint(1)")) == []


def test_tags_are_checked_against_nbvals_tag_list():
    assert unrecognised_markers(_tiny("print(1)", tags=["nbval-ignore-output"])) == []
    assert unrecognised_markers(_tiny("print(1)", tags=["nbval-ignore"])) == [(1, "tag 'nbval-ignore'")]
