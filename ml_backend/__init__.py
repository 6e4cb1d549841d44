"""The pre-annotation backend: a label-studio-ml 1.0.9 model serving Sotopia judgements.

- ``model``     ``SotopiaJudge``, the ``LabelStudioMLBase`` model and its two providers
- ``_wsgi``     the Flask app of label-studio-ml made safe to serve, run under waitress
- ``commands``  ``sotopia-ls ml-backend`` (serve) and ``sotopia-ls connect`` (register)

``model`` and ``_wsgi`` run in the backend's own environment (label-studio-ml pins old Flask
and Werkzeug, see README.md) and import only the pure-pydantic core of ``sotopia_ls``;
``commands`` runs beside label-studio-sdk. Nothing here imports across that line.
"""

# Shared by both sides: the CLI offers them, the model implements them.
PROVIDERS: tuple[str, ...] = ("stored", "llm")
