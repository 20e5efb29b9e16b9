"""``python -m gpuportal.healthcheck [URL]``: the web container's health check.

Asks the portal in the same container for ``/readyz`` (default ``http://127.0.0.1:8000/readyz``)
and exits 0 when it answers 200, 1 otherwise, printing the answer. Django is not set up, so a check
costs well under a second. The request names as its host the first entry of
``GPUPORTAL_ALLOWED_HOSTS`` (the container's own setting), so that the check keeps passing when the
portal is served under another name than ``localhost``.

The worker and beat containers are checked with Celery's own ``inspect ping`` (``docker-compose.yml``):
beat answers it too (``CELERY_BEAT_ENABLE_REMOTE_CONTROL``), and falls silent when its scheduler stalls.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8000/readyz"
TIMEOUT_SECONDS = 5.0


def probe_host(allowed_hosts: str | None) -> str:
    """A host name the portal accepts: the first of ``GPUPORTAL_ALLOWED_HOSTS`` that names one host."""
    for entry in (allowed_hosts or "").split(","):
        name = entry.strip().lstrip(".")
        if name and name != "*":
            return name
    return "localhost"


def probe(url: str, *, host: str) -> tuple[bool, str]:
    request = urllib.request.Request(url, headers={"Host": host, "Accept": "text/plain"})  # noqa: S310 - our own URL
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
            return response.status == 200, response.read(2000).decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return False, f"{error.code}: {error.read(2000).decode('utf-8', 'replace')}"
    except OSError as error:
        return False, f"no answer: {error}"


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    url = arguments[0] if arguments else DEFAULT_URL
    healthy, answer = probe(url, host=probe_host(os.environ.get("GPUPORTAL_ALLOWED_HOSTS")))
    print(answer.strip())  # noqa: T201 - the check's output, shown by `docker inspect`
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
