"""Slots: each episode's places for a rating (k of them, more for an episode whose ratings
disagree), leased to a participant, settled when the rating is submitted and taken back when a
lease runs out. A room of its own because every other part of the gateway (the pages, the
outbox, screening, status) asks it which rating a participant holds."""
