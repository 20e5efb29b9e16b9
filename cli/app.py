"""The root command, its global options and the state every command shares.

Errors raised as ``CliError`` anywhere below are printed to standard error as ``error: …`` (with
the API's field messages, one a line) and end the command with their exit code (cli/exits.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from cli import __version__
from cli.client import Api
from cli.config import Context, context_resolve
from cli.exits import EXIT_MEANINGS, CliError, Exit
from cli.output import FORMATS

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class State:
    context_name: str | None = None
    output: str = "table"
    _api: Api | None = field(default=None, repr=False)
    _context: Context | None = field(default=None, repr=False)

    def context(self) -> Context:
        if self._context is None:
            self._context = context_resolve(name=self.context_name)
        return self._context

    def api(self) -> Api:
        """The API of the active context; refuses (exit 3) when it has no token."""
        if self._api is None:
            context = self.context()
            if not context.token:
                raise CliError(
                    f"not signed in to {context.url}: run 'gpuportal login' or set GPUPORTAL_TOKEN", Exit.AUTH
                )
            self._api = Api(context.url, context.token)
        return self._api


def state() -> State:
    return click.get_current_context().ensure_object(State)


def _set_output(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(State).output = value


def output_option(command: F) -> F:
    """``-o table|json|yaml``, accepted after any command as well as before it."""
    return click.option(
        "-o", "--output", type=click.Choice(FORMATS), default=None, expose_value=False, callback=_set_output,
        is_eager=True, help="Output format (default: table).",
    )(command)


class GuardedGroup(click.Group):
    """A group that turns a ``CliError`` into its message and exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as error:
            if ctx.parent is not None:  # the root reports it once
                raise
            click.echo(f"error: {error.message}", err=True)
            for line in error.details:
                click.echo(f"  {line}", err=True)
            raise click.exceptions.Exit(int(error.code)) from None


def _set_context(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    ctx.ensure_object(State).context_name = value


EPILOG = "\b\nExit codes:\n" + "\n".join(f"  {int(code):>3}  {meaning.replace('`', '')}" for code, meaning in EXIT_MEANINGS.items())


@click.group(cls=GuardedGroup, epilog=EPILOG,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--context", "context_name", metavar="NAME", default=None, expose_value=False, callback=_set_context,
    help="Use this context of the configuration file (default: its current context).",
)
@output_option
@click.version_option(__version__, "--version", prog_name="gpuportal", message="%(prog)s %(version)s")
def root() -> None:
    """GPU Portal from the command line: request GPUs, follow approvals, list and release
    allocations, decide requests, read quotas and export the audit log.

    Sign in once with 'gpuportal login --url URL'; the token is kept in
    $XDG_CONFIG_HOME/gpuportal/config.yaml (mode 0600). GPUPORTAL_URL and GPUPORTAL_TOKEN
    override it. The full reference is docs/cli.md.
    """


def add_commands(group: click.Group, commands: Sequence[click.Command]) -> None:
    for command in commands:
        group.add_command(command)
