"""Signed webhooks and chat notifications (issue 27).

Events are written to a durable outbox in the same transaction as the change they
describe (outbox.py, on the DB thread), and sent by the active orchestrator's sender
(sender.py), never on the dispatch path. What to send, to whom, when to retry and how
to sign are pure functions (events.py, chat.py, policy.py, signing.py, addresses.py).
"""
