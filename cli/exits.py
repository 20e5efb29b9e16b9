"""The exit codes of ``gpuportal`` (documented in docs/cli.md) and the error that carries one.

Scripts branch on these, so they never change meaning: a new failure gets a new number.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    ERROR = 1  # the API refused the input (400), answered 5xx, or could not be reached
    USAGE = 2  # bad command line (Click's own code)
    AUTH = 3  # no token, a refused token (401), a role that may not (403), a locked sign-in (429)
    NOT_FOUND = 4  # no such object within the caller's reach (404)
    CONFLICT = 5  # the object's state forbids the action, or quota or capacity would be exceeded (409)
    TIMEOUT = 6  # --wait ran out of time before the request settled
    NOT_GRANTED = 7  # --wait: the request was rejected, cancelled, failed or ended before it was active
    VERIFY_FAILED = 8  # audit export --verify: the export does not verify
    CONFIG = 9  # the configuration file is unsafe (group- or world-readable) or malformed
    NOT_CURRENT = 10  # audit verify: the bundle is genuine but not complete as of a newer checkpoint
    NOT_CONFIRMED = 11  # request create: approval would reclaim grants or be refused, and it was not confirmed
    INTERRUPTED = 130  # Ctrl-C (the shells' 128 + SIGINT); --wait stops waiting, the request goes on


EXIT_MEANINGS: dict[Exit, str] = {
    Exit.OK: "success",
    Exit.ERROR: "the API refused the input (HTTP 400), failed (5xx) or could not be reached",
    Exit.USAGE: "bad command line: unknown option, missing argument, invalid value",
    Exit.AUTH: "not signed in, the token is refused (401), the role does not allow the action (403), "
    "or too many failed sign-ins (429)",
    Exit.NOT_FOUND: "no such object within your reach (404)",
    Exit.CONFLICT: "the object's state forbids the action, or a quota or capacity would be exceeded (409)",
    Exit.TIMEOUT: "`--wait` ran out of time (`--timeout`) before the request settled",
    Exit.NOT_GRANTED: "`--wait`: the request was rejected, cancelled or failed, or ended before it was active",
    Exit.VERIFY_FAILED: "`audit export --verify`, `audit verify`: the export does not verify (not genuine)",
    Exit.CONFIG: "the configuration file is group- or world-readable, or is not valid",
    Exit.NOT_CURRENT: "`audit verify`: the bundle is genuine but NOT complete as of now (a newer signed checkpoint "
    "covers more events; `--allow-stale` makes it 0)",
    Exit.NOT_CONFIRMED: "`request create`: approval would reclaim grants or be refused as things stand, and the "
    "request was not confirmed (answered no, or no `--yes` where standard input is not a terminal): nothing submitted",
    Exit.INTERRUPTED: "interrupted (Ctrl-C); `--wait` stops waiting, the request goes on",
}

HTTP_EXITS: dict[int, Exit] = {
    400: Exit.ERROR,
    401: Exit.AUTH,
    403: Exit.AUTH,
    404: Exit.NOT_FOUND,
    409: Exit.CONFLICT,
    429: Exit.AUTH,
}


class CliError(Exception):
    """A failure to report on standard error, ending the command with ``code``."""

    def __init__(
        self, message: str, code: Exit = Exit.ERROR, *, details: list[str] | None = None, transient: bool = False
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details or []
        self.transient = transient  # the portal was unreachable or failed (5xx): asking again may work
