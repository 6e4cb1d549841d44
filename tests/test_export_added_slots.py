"""A researcher whose study gave disagreeing episodes an extra rater (adaptive extra raters)
reads in the report how many of the ratings came from those added slots, and that they count
in agreement like every other rating."""

from __future__ import annotations

import html

import pytest

from conftest import invoke, with_meta

from sotopia_ls.exporter.commands import report_command
from sotopia_ls.labelstudio.tasks import ADDED_SLOTS

pytestmark = pytest.mark.report


def test_the_report_says_how_many_annotations_came_from_added_slots(export_file, tmp_path):
    # Tasks 1-3 of the ``export_file`` fixture hold annotations 11, 12 / 21, 22 / 31, 32.
    marked = with_meta(export_file, ADDED_SLOTS, {2: {"22": 3}, 3: {"32": 3}})
    out = tmp_path / "report"
    result = invoke(report_command, "--from-file", str(marked), "--bootstrap", "0",
                    "-o", str(out))
    assert result.exit_code == 0, result.output

    page = html.unescape((out / "report.html").read_text())
    assert ("2 annotations of 2 episodes came from slots the study added because the "
            "episode's raters disagreed (adaptive extra raters: the added_slot column); they "
            "count in agreement like every other rating.") in page


def test_a_report_without_added_slots_says_nothing_of_them(export_file, tmp_path):
    out = tmp_path / "report"
    result = invoke(report_command, "--from-file", str(export_file), "--bootstrap", "0",
                    "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "added_slot column" not in (out / "report.html").read_text()
