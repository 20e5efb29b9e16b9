"""Shell completion and the reference documentation, both made from the command tree."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from cli.docs import reference_markdown

PROG, COMPLETE_VAR = "gpuportal", "_GPUPORTAL_COMPLETE"


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    bash:  echo 'eval "$(gpuportal completion bash)"' >> ~/.bashrc
    zsh:   echo 'eval "$(gpuportal completion zsh)"' >> ~/.zshrc
    fish:  gpuportal completion fish > ~/.config/fish/completions/gpuportal.fish
    """
    root = click.get_current_context().find_root().command
    completion_class = get_completion_class(shell)
    assert completion_class is not None  # the choice allows only the shells Click supports
    click.echo(completion_class(root, {}, PROG, COMPLETE_VAR).source())


@click.command(hidden=True)
def docs() -> None:
    """Print the command reference (docs/cli.md) as Markdown."""
    root = click.get_current_context().find_root().command
    click.echo(reference_markdown(root), nl=False)


COMMANDS = [completion, docs]
