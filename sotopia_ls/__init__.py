"""Human evaluation of Sotopia episodes in Label Studio.

One package laid out as it installs: the core at this level, and a folder for each thing a
reader looks for (``importer``, ``exporter``, ``statistics``, ``report``, ``adjudication``,
``ml_backend``, ``study``). docs/rooms.md and README.md ("Layout") map them.
"""

__version__ = "0.1.0"
