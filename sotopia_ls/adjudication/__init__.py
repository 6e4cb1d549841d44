"""Adjudication: episodes whose raters disagree, settled by an adjudicator in Label Studio.

``disputes`` finds them, ``screen`` builds the adjudicator's screen, ``project`` sends them
(``sotopia-ls adjudicate``) and ``reading`` reads the adjudications back for the export.
Nothing is imported by this ``__init__``: the exporter imports ``reading``, and ``project``
imports the exporter.
"""
