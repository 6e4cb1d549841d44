"""Human evaluation of Sotopia episodes in Label Studio.

One package laid out as it installs. The core (rubric, score and episode models, the labeling
config, the one boundary to Label Studio in ``labelstudio``, the LLM judge, the command line)
sits at this level; the subpackages are:

- ``importer``    episode formats → ``Episode`` (each format one object in ``FORMATS``)
- ``exporter``    annotations → Sotopia scores and tables
- ``statistics``  agreement statistics, for the report and the study's live dashboard
- ``report``      the HTML report (sections in ``SECTIONS``)
- ``ml_backend``  the optional label-studio-ml pre-annotation backend
- ``study``       the participant gateway for crowd studies (pages in ``PAGE_SEQUENCE``)

The repository's top-level ``importer/``, ``exporter/``, ``ml_backend/`` and ``study/`` are
links to these folders.
"""

__version__ = "0.1.0"
