"""The ``Idempotency-Key`` header of the REST API (docs/api.md, "Retrying a POST"): the one Django
app inside ``kernel``, as every app's API views share it through ``kernel.api.views.ApiView``."""
