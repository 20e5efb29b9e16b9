"""Notifications: the outbox of events, their delivery by e-mail and webhooks, preferences, digests
(docs/notifications.md)."""
