"""The agreement statistics: Krippendorff's alpha per dimension (``agreement``), Gwet's AC1 and
AC2 (``gwet``), the rated units and counts they rest on (``reliability``), bootstrap intervals
(``bootstrap``), human-vs-model and per-annotator comparisons (``comparison``) and Sotopia-pi's
figures (``sotopia_pi``), whether a judge can replace a person (``alttest``) and how many people
to pay for (``planning``). Functions of a long table of scores that import nothing of the
export pipeline, so the report and the study's live dashboard compute the same figures."""

# The alternative annotator test's ε for crowd workers (the paper's rule of thumb; ``alttest``):
# here, so that the command line shows it without importing the statistics libraries.
DEFAULT_EPSILON = 0.1
# Resamples of a pilot behind each of ``sotopia-ls plan``'s figures (``planning``).
DEFAULT_PLAN_RESAMPLES = 100
