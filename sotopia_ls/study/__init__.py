"""The participant gateway for blind crowd studies (``sotopia-ls study``): participants arrive
from a Prolific study link, read the instructions, rate episodes in Label Studio's own editor
embedded in a page of the gateway, and return to Prolific with the completion code; Label Studio
stays the store and the researcher's interface, and participants never get a login, a token or
its address. Here: the study file (``settings``), the gateway's database (``store``) and the
``sotopia-ls study`` commands (``commands``, ``serve``, ``status``, ``protocol``, ``process``);
the rooms are ``serving`` (the app, its pages, arrival, guards, the editor), ``slots`` (leases),
``outbox`` (ratings saved into Label Studio), ``screening`` (gold, qualification, flags, the
review), ``payment`` (Prolific) and ``live`` (the running agreement and the dashboard).
docs/rooms.md follows a rating through them.
"""
