"""Limits on input that every app applies the same way."""

from __future__ import annotations

TEXT_LIMIT = 2000
"""The most characters of a free-text field: a request's justification, a decision's or a
release's comment, a project's description. Models, API serialisers and portal forms all use it."""
