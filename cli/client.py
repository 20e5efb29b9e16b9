"""The REST client: one ``requests`` session with the token, the API's error body turned into a
``CliError`` with its exit code, and list endpoints followed page by page."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

import requests

from cli import __version__
from cli.exits import HTTP_EXITS, CliError, Exit

API_PREFIX = "/api/v1/"
PAGE_SIZE = 200  # the API allows up to 500
Params = Mapping[str, str | int | list[str] | list[int]]


def _error_from(response: requests.Response) -> CliError:
    status = response.status_code
    code = HTTP_EXITS.get(status, Exit.ERROR)
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        message = f"{error.get('message') or response.reason} (HTTP {status}, {error.get('code', 'error')})"
        details = [
            f"{name}: {'; '.join(str(m) for m in messages) if isinstance(messages, list) else messages}"
            for name, messages in sorted((error.get("fields") or {}).items())
        ]
        details += [f"{key}: {value}" for key, value in sorted((error.get("details") or {}).items())]
        if isinstance(body, dict) and body.get("request_id"):
            details.append(f"request id: {body['request_id']}")
        return CliError(message, code, details=details, transient=status >= 500)
    return CliError(f"HTTP {status} {response.reason} from {response.url}", code, transient=status >= 500)


class Api:
    """Calls ``<url>/api/v1/<path>`` with ``Authorization: Token <token>``."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise CliError(f"the portal URL {url!r} must start with http:// or https://", Exit.USAGE)
        self.base = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"gpuportal-cli/{__version__}"
        self.session.headers["Accept"] = "application/json"
        if token:
            self.session.headers["Authorization"] = f"Token {token}"

    def url_for(self, path: str) -> str:
        return self.base + API_PREFIX + path.lstrip("/")

    def request(
        self, method: str, path: str, *, params: Params | None = None, json: Any = None, stream: bool = False
    ) -> requests.Response:
        try:
            response = self.session.request(
                method, self.url_for(path), params=params, json=json, timeout=self.timeout, stream=stream
            )
        except requests.RequestException as error:
            raise CliError(f"cannot reach the portal at {self.base}: {error}", Exit.ERROR, transient=True) from None
        if response.status_code >= 400:
            raise _error_from(response)
        return response

    def get(self, path: str, params: Params | None = None) -> Any:
        return self.request("GET", path, params=params).json()

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        response = self.request("POST", path, json=body if body is not None else {})
        return response.status_code, response.json()

    def pages(self, path: str, params: Params | None = None) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list, following ``next`` (its page number, on our base URL)."""
        query: dict[str, Any] = {**(params or {}), "page_size": PAGE_SIZE}
        while True:
            body = self.get(path, query)
            yield from body.get("results", [])
            following = body.get("next")
            if not following:
                return
            page = parse_qs(urlsplit(following).query).get("page")
            if not page:
                return
            query["page"] = page[0]

    def items(self, path: str, params: Params | None = None) -> list[dict[str, Any]]:
        return list(self.pages(path, params))

    def download(self, path: str, params: Params, sink: IO[bytes]) -> int:
        """Stream a response body into ``sink``; the number of bytes written."""
        written = 0
        with self.request("GET", path, params=params, stream=True) as response:
            for block in response.iter_content(chunk_size=1 << 16):
                sink.write(block)
                written += len(block)
        return written


def token_obtain(url: str, *, username: str, password: str) -> str:
    """A token for a username and password (``POST /api/v1/auth/token/``)."""
    _, body = Api(url, None).post("auth/token/", {"username": username, "password": password})
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise CliError("the portal answered without a token", Exit.ERROR)
    return token
