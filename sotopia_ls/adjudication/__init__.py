"""Adjudication: episodes whose raters disagree, settled by an adjudicator in Label Studio.

- ``disputes``  ``scores_long`` → each episode's ratings under rater pseudonyms (A, B, C …),
                and which dimension and agent they dispute (more apart than a threshold)
- ``screen``    the adjudication project's labeling config, generated from the rubric
                (``adjudication_config.xml`` at the repository's top level), and each task's
                data: the raters' scores and rationales side by side, escaped
- ``project``   ``adjudicate``: the study project read as the exporter reads it, its disputed
                episodes (never a gold one) sent once each to the adjudication project, which
                may hold several study projects' (``sotopia-ls adjudicate``)
- ``reading``   ``adjudicated_scores``: the adjudication project's annotations on the study
                project's episodes, validated, as ``adjudicated_scores.csv`` rows
                (``sotopia-ls export --adjudication-project``); ``with_adjudicated`` for a
                report on adjudicated scores

Every call to Label Studio goes through ``sotopia_ls.labelstudio``. Nothing here is imported
by this ``__init__``: the exporter imports ``reading`` and ``project`` imports the exporter.
"""
