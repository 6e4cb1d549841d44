"""Human evaluation of Sotopia episodes in Label Studio."""

__version__ = "0.1.0"
