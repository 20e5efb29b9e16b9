"""The portal's logs: one line per record, JSON by default (docs/observability.md, "Logs").

- ``context``: what every record carries besides its message (request id, user, task, trace).
- ``redaction``: secrets never reach the output.
- ``formatters``: the JSON and console formatters, both built on the two above.
- ``config``: the ``dictConfig`` of Django, gunicorn and Celery alike.
- ``access``: the access-log middleware, one line per request.
- ``tasks``: the request id carried from the request that enqueues a Celery task into its run.
"""
