"""Paying a study: Prolific's API (``prolific``), the review's decisions carried out on it once
each (``apply``, for ``study pay``), and the pay per hour a study's reward comes to
(``hourly``). Deciding is screening's; sending the decisions to Prolific, and what they cost, is
this room's."""
