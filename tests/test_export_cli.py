"""`sotopia-ls export` and `report` on an export file, offline, and their usage errors."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import invoke
from sotopia_ls.errors import SotopiaLSError
from sotopia_ls.exporter import OUTPUT_FILES
from sotopia_ls.exporter.commands import export_command, report_command
from sotopia_ls.exporter.request import ExportRequest


def test_an_export_file_is_exported_without_a_server(export_file, tmp_path):
    out = tmp_path / "out"
    result = invoke(export_command, "--from-file", str(export_file), "-o", str(out),
                    "--model-name", "gpt-3.5-turbo_gpt-3.5-turbo_v0.0.1_clean=gpt3.5")
    assert result.exit_code == 0, result.output
    assert "read 3 task(s)\n6 annotations = 6 exported + 0 rejected + 0 cancelled" in result.output
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUT_FILES)
    wide = pd.read_csv(out / "scores_wide.csv")
    assert set(wide["prolific_id"]) == {"annotator-1", "annotator-2"}
    assert set(wide["model"]) == {"gpt3.5"} and (wide["secret_2"] == -9).sum() == 3
    # The pseudonyms undone only by the private map.
    identities = out / "annotator_identities.csv"
    assert pd.read_csv(identities).to_dict("records") == [
        {"annotator_id": "annotator-1", "identity": "rater1@lab.test"},
        {"annotator_id": "annotator-2", "identity": "rater2@lab.test"},
    ]
    assert identities.stat().st_mode & 0o777 == 0o600
    assert not any("@lab.test" in (out / name).read_text() for name in OUTPUT_FILES
                   if name.endswith((".csv", ".jsonl", ".json")) and name != identities.name)


def test_identities_are_kept_when_asked(export_file, tmp_path):
    out = tmp_path / "out"
    result = invoke(export_command, "--from-file", str(export_file), "-o", str(out),
                    "--keep-identities")
    assert result.exit_code == 0, result.output
    assert set(pd.read_csv(out / "scores_long.csv")["annotator_id"]) == {
        "rater1@lab.test", "rater2@lab.test"}


@pytest.mark.report
def test_the_report_reads_the_same_file_or_the_export_just_written(export_file, tmp_path):
    result = invoke(report_command, "--from-file", str(export_file), "-o", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r" / "report.html").exists()
    assert (tmp_path / "r" / "agreement.csv").exists()
    exported = tmp_path / "exported"
    assert invoke(export_command, "--from-file", str(export_file), "-o",
                  str(exported)).exit_code == 0
    again = invoke(report_command, "--from-export", str(exported), "-o", str(tmp_path / "r2"),
                   "--bootstrap", "0")
    assert again.exit_code == 0, again.output
    assert "6 annotations = 6 exported" in again.output
    first = pd.read_csv(tmp_path / "r" / "agreement.csv")
    second = pd.read_csv(tmp_path / "r2" / "agreement.csv")
    pd.testing.assert_series_equal(first["alpha"], second["alpha"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give exactly one of --project or --from-file"),
        (["--project", "1", "--from-file", "{file}"], "give exactly one of --project"),
        (["--from-file", "{file}", "--model-name", "gpt3.5"], "'gpt3.5' is not TAG=LABEL"),
        (["--project", "1"], "no Label Studio URL: pass --url or set LABEL_STUDIO_URL"),
        (["--from-file", "{file}", "--with-predictions"], "--with-predictions reads a live"),
        (["--project", "1", "--overlap", "2"], "--overlap is for --from-file"),
    ],
)
def test_usage_errors_say_what_to_do(export_file, tmp_path, args, message):
    args = [a.replace("{file}", str(export_file)) for a in args]
    result = invoke(export_command, *args, "-o", str(tmp_path / "out"))
    assert result.exit_code != 0 and message in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("options", "message"), [
    ({"project": "1", "overlap": 2}, "^--overlap is for --from-file"),
    ({"from_file": "x.json", "adjudication": "4"}, "^--adjudication-project goes with --project"),
    ({"project": "1", "database": "sqlite:///g.db"}, "^--database is for --study"),
    ({"project": "1", "model_names": ("gpt3.5",)}, "^--model-name: 'gpt3.5' is not TAG=LABEL$"),
])
def test_an_export_request_refuses_an_option_that_would_do_nothing_naming_it(tmp_path, options,
                                                                             message):
    with pytest.raises(SotopiaLSError, match=message):
        ExportRequest.from_options(output=tmp_path / "out", **options)


def test_an_export_request_takes_a_database_from_the_environment_only_for_a_study(tmp_path):
    asked = {"output": tmp_path / "out", "project": "1", "database": "sqlite:///g.db"}

    alone = ExportRequest.from_options(database_from_environment=True, **asked)
    studied = ExportRequest.from_options(database_from_environment=True, studies=(tmp_path,),
                                         model_names=("gpt-4=GPT-4",), **asked)

    assert alone.database is None and studied.database == "sqlite:///g.db"
    assert dict(studied.model_names) == {"gpt-4": "GPT-4"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from-file", "{file}", "--model-name", "a=b"], "No such option '--model-name'"),
        (["--from-export", "{folder}", "--from-file", "{file}"], "give exactly one of"),
        (["--from-export", "{folder}", "--keep-identities"], "does nothing with --from-export"),
        (["--from-export", "{folder}"], "not a sotopia-ls export folder"),
    ],
)
def test_report_options_that_would_do_nothing_are_refused(export_file, tmp_path, args, message):
    args = [a.replace("{file}", str(export_file)).replace("{folder}", str(tmp_path))
            for a in args]
    result = invoke(report_command, *args, "-o", str(tmp_path / "report"))
    assert result.exit_code != 0 and message in result.output
    assert not (tmp_path / "report").exists()


@pytest.mark.report
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
