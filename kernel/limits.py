"""Limits on input that every app applies the same way."""

from __future__ import annotations

TEXT_LIMIT = 2000
"""The most characters of a free-text field: a request's justification, a decision's or a
release's comment, a project's description. Models, API serialisers and portal forms all use it."""

QUANTITY_MAX = 10000
"""The most units of a flavor one request, grant or resize may ask for. Models, API serialisers,
portal forms and the resize service all use it (the command-line client, which stands alone,
checks the same number: ``tests/architecture/test_one_rule.py``)."""
