"""Signing in and the contexts of the configuration file: login, whoami, context list/use/delete."""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import urlsplit

import click

from cli.app import output_option, state
from cli.client import Api, token_obtain
from cli.config import Context, config_load, config_path, config_save
from cli.exits import CliError, Exit
from cli.output import emit_list, emit_one


def _me(api: Api) -> dict[str, Any]:
    me = api.get("me/")
    if not isinstance(me, dict):
        raise CliError("the portal's /api/v1/me/ answered something unexpected", Exit.ERROR)
    return me


def _roles(me: dict[str, Any]) -> str:
    return ", ".join(f"{m['role']}@{m['department']}" for m in me.get("memberships", [])) or "-"


@click.command()
@click.option("--url", required=True, help="The portal's address, e.g. https://gpus.example.org.")
@click.option("--token", default=None, help="A token (visible in the shell's history: prefer --token-stdin).")
@click.option("--token-stdin", is_flag=True, help="Read the token from standard input.")
@click.option("--username", default=None, help="Sign in with this username; the password is prompted for.")
@click.option("--password-stdin", is_flag=True, help="With --username: read the password from standard input.")
@click.option("--context", "name", default=None, help="Save as this context (default: the URL's host).")
def login(
    url: str, token: str | None, token_stdin: bool, username: str | None, password_stdin: bool, name: str | None
) -> None:
    """Sign in to a portal and save it as a context (and make it the current one).

    Give a token (--token or --token-stdin) or a --username, whose password is asked for (or read
    from standard input with --password-stdin) and exchanged for a token (POST /api/v1/auth/token/).
    The token is checked against the API before it is saved.
    """
    if sum(bool(x) for x in (token, token_stdin, username)) != 1:
        raise click.UsageError("give exactly one of --token, --token-stdin or --username")
    if password_stdin and not username:
        raise click.UsageError("--password-stdin goes with --username")
    url = url.rstrip("/")
    host = urlsplit(url).hostname or ""
    if url.startswith("http://") and host not in ("localhost", "127.0.0.1", "::1"):
        click.echo(f"warning: {url} is plain HTTP: the password and the token cross the network unencrypted",
                   err=True)
    if token_stdin:
        token = sys.stdin.readline().strip()
        if not token:
            raise click.UsageError("no token on standard input")
    if username:
        password = sys.stdin.readline().rstrip("\r\n") if password_stdin else click.prompt("Password", hide_input=True)
        token = token_obtain(url, username=username, password=password)
    assert token is not None
    me = _me(Api(url, token))
    path = config_path()
    config = config_load(path)
    name = name or urlsplit(url).netloc or "default"
    config.contexts[name] = Context(name=name, url=url, token=token)
    config.current = name
    config_save(config)
    click.echo(f"Signed in to {url} as {me['username']}; context {name!r} saved in {path}.", err=True)


@click.command()
@output_option
def whoami() -> None:
    """Who the active context signs in as, and their roles."""
    current = state()
    me = _me(current.api())
    me = {**me, "url": current.context().url, "context": current.context().name}
    emit_one(me, [("USER", "username"), ("ROLES", _roles), ("PORTAL", "url"), ("CONTEXT", "context")], current.output)


@click.group()
def context() -> None:
    """The contexts of the configuration file (a portal URL and token each)."""


@context.command("list")
@output_option
def context_list() -> None:
    """The saved contexts; the current one is marked with *."""
    config = config_load(config_path())
    rows = [
        {"current": name == config.current, "name": name, "url": c.url}
        for name, c in sorted(config.contexts.items())
    ]
    emit_list(rows, [("CURRENT", lambda r: "*" if r["current"] else ""), ("NAME", "name"), ("URL", "url")],
              state().output, empty="No contexts: run 'gpuportal login --url URL'.")


@context.command("use")
@click.argument("name")
def context_use(name: str) -> None:
    """Make NAME the current context."""
    config = config_load(config_path())
    if name not in config.contexts:
        raise CliError(f"no context named {name!r}", Exit.NOT_FOUND)
    config.current = name
    config_save(config)
    click.echo(f"Current context: {name}.", err=True)


@context.command("delete")
@click.argument("name")
def context_delete(name: str) -> None:
    """Forget context NAME and its token (the token stays valid on the portal)."""
    config = config_load(config_path())
    if config.contexts.pop(name, None) is None:
        raise CliError(f"no context named {name!r}", Exit.NOT_FOUND)
    if config.current == name:
        config.current = None
    config_save(config)
    click.echo(f"Context {name!r} deleted.", err=True)


COMMANDS = [login, whoami, context]
