"""`sotopia-ls export` and `report` on an export file, offline, and their usage errors."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import invoke
from sotopia_ls.exporter import OUTPUT_FILES
from sotopia_ls.exporter.commands import export_command, report_command


def test_an_export_file_is_exported_without_a_server(export_file, tmp_path):
    out = tmp_path / "out"
    result = invoke(export_command, "--from-file", str(export_file), "-o", str(out),
                    "--model-name", "gpt-3.5-turbo_gpt-3.5-turbo_v0.0.1_clean=gpt3.5")
    assert result.exit_code == 0, result.output
    assert "read 3 task(s)\n6 annotations = 6 exported + 0 rejected + 0 cancelled" in result.output
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUT_FILES)
    wide = pd.read_csv(out / "scores_wide.csv")
    assert set(wide["prolific_id"]) == {"rater1@lab.test", "rater2@lab.test"}
    assert set(wide["model"]) == {"gpt3.5"} and (wide["secret_2"] == -9).sum() == 3


def test_the_report_reads_the_same_file(export_file, tmp_path):
    result = invoke(report_command, "--from-file", str(export_file), "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.html").exists() and (tmp_path / "agreement.csv").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give exactly one of --project or --from-file"),
        (["--project", "1", "--from-file", "{file}"], "give exactly one of --project"),
        (["--from-file", "{file}", "--model-name", "gpt3.5"], "'gpt3.5' is not TAG=LABEL"),
        (["--project", "1"], "no Label Studio URL: pass --url or set LABEL_STUDIO_URL"),
    ],
)
def test_usage_errors_say_what_to_do(export_file, tmp_path, args, message):
    args = [a.replace("{file}", str(export_file)) for a in args]
    result = invoke(export_command, *args, "-o", str(tmp_path / "out"))
    assert result.exit_code != 0 and message in result.output
    assert not (tmp_path / "out").exists()


def test_a_reference_export_qualifies_annotators(export_file, tmp_path):
    gold = tmp_path / "gold"
    assert invoke(export_command, "--from-file", str(export_file), "-o", str(gold)).exit_code == 0
    result = invoke(report_command, "--from-file", str(export_file), "-o", str(tmp_path / "r"),
                    "--reference", str(gold / "scores_long.csv"))
    assert result.exit_code == 0, result.output
    qualification = pd.read_csv(tmp_path / "r" / "qualification.csv")
    # Each rater is compared with the mean of both raters, one point away: within ±2.
    assert qualification["passed"].all() and set(qualification["units"]) == {6}

    not_scores = tmp_path / "not_scores.csv"
    not_scores.write_text("task_id,annotator\n1,x\n")
    for wrong, message in ((not_scores, "not a scores_long table"),
                           (gold / "summary.json", "expected a list of tasks")):
        result = invoke(report_command, "--from-file", str(export_file), "-o",
                        str(tmp_path / "w"), "--reference", str(wrong))
        assert result.exit_code == 1 and message in result.output
