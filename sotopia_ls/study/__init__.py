"""The participant gateway for blind crowd studies (``sotopia-ls study``): participants arrive
from Prolific, rate episodes in Label Studio's own editor on the gateway's pages, and return
with the completion code; Label Studio stays the store and never meets a participant.
docs/rooms.md maps the rooms and follows a rating; docs/gateway.md says how they work.
"""
