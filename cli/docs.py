"""docs/cli.md, generated from the command tree: ``python -m cli docs > docs/cli.md``.

tests/cli/test_docs.py fails when the file and the tree differ, so the reference cannot drift.
"""

from __future__ import annotations

import inspect

import click

from cli.exits import EXIT_MEANINGS

INTRO = """\
# `gpuportal`: the command-line client

<!-- Generated from the command tree by `python -m cli docs > docs/cli.md`; do not edit by hand. -->

`gpuportal` works over the portal's REST API (`/api/v1/`) and nothing else: it imports nothing of
the portal and runs wherever Python 3.11+ with Click, requests and PyYAML does (the audit check
also needs `cryptography`). Install the project (`pip install .`) for the `gpuportal` command, or run
`python -m cli` from a checkout.

## Signing in and contexts

`gpuportal login --url URL --username NAME` asks for the password and exchanges it for a token
(`POST /api/v1/auth/token/`; `--password-stdin` reads it from standard input, for scripts);
`--token-stdin` takes a token instead, such as a personal access token made on the portal's
*API tokens* page (read-only if the client only needs to look). Tokens expire: the one a password
gives lasts `GPUPORTAL_TOKEN_DEFAULT_DAYS` (90 days by default), then the portal answers 401 (exit
3) and you sign in again (docs/identity.md "API tokens"). The token is checked
(`GET /api/v1/me/`) and saved as a *context* (URL and token) in
`$XDG_CONFIG_HOME/gpuportal/config.yaml` (default `~/.config/gpuportal/config.yaml`;
`GPUPORTAL_CONFIG` names another file), which becomes the current context:

```yaml
current-context: gpus.example.org
contexts:
  gpus.example.org:
    url: https://gpus.example.org
    token: gpp_Xq3k9ZpT2mWbL4v8Rt1nCy7ZaQe5Ku0oHj2sDf6gNw9xPb3mVc8lTr1eYi4uOa7
```

The file holds tokens: the client writes it with mode 0600 (its folder 0700) and **refuses to use
one that the group or others may read or write** (exit 9, with the `chmod` that fixes it).

Precedence: `--context NAME` uses that context as saved. Otherwise `GPUPORTAL_URL` and
`GPUPORTAL_TOKEN` override the URL and token of the context `GPUPORTAL_CONTEXT` names, or else of
the current one; with both set the file is not read at all (CI needs no file).

## Output

Every command takes `-o table|json|yaml`, before or after the command's name. `table` (the default)
shows the columns that matter, times in UTC; `json` and `yaml` print the API's objects whole (a
list for list commands), for scripts. Lists follow every page. Messages and progress go to standard
error, so standard output stays parseable. An error prints the API's message and its field
messages (`error: <message> (HTTP 400, <code>)`, then one `  <field>: <messages>` line each, and the
request id to quote to the operators) and exits with the code below.

Times (`--start`, `--end`, `--from`, `--to`) are ISO 8601 (`2026-12-24`, `2026-12-24T09:00`,
`2026-12-24T09:00+01:00`; without an offset, local time), `now`, or an offset from now: `+90m`,
`+12h`, `+7d`, `+2w`.

## `--wait`

`request create --wait` polls the request (1 s, growing by half up to 15 s, back to 1 s after each
change), prints each state it reaches on standard error, and ends when it is **active** (exit 0),
**scheduled** (approved for a later start: exit 0, nothing more happens until then), ended without
a grant (**rejected**, **cancelled**, **failed**, …: exit 7), or after `--timeout` seconds (exit 6; the
request goes on, follow it with `allocations show`). The request is printed last in every case.
While the portal cannot be reached or answers 5xx (a restart, say) it is asked again, with a
warning, until the timeout; any other refusal ends the wait with its exit code. Ctrl-C stops
waiting (exit 130), not the request.

## Audit exports and `--verify`

`audit export --verify` downloads the export (a **bundle** by default) and checks it with the
client's own checker (`cli/auditcheck.py`), written from the format in docs/audit.md and sharing
no code with the server it checks: the checkpoint's Ed25519 signature against the trusted keys
(`--key`, a verifier key string or PEM public key, as printed by `manage.py audit_keys`; without
`--key` the keys the portal serves, with a warning), every event's place, chain link and department
link, the signed root and head rebuilt from the events and proof nodes, and, for exports without a
department, actor or action filter, that no event of the time range is missing. A JSON Lines export
has no checkpoint: its chain links are checked and, unless filtered, that no sequence number is
missing, but nothing signed anchors it. For the checks against a copy of the external checkpoint
folder, department completeness and the location of forks, run the portal's full offline verifier,
`python -m audit.verify BUNDLE --key KEY --checkpoints DIR` (docs/audit.md), on the same file.
`audit verify FILE` checks a file saved earlier.

## Exit codes

| code | meaning |
|---|---|
"""


def _options(command: click.Command, ctx: click.Context) -> list[str]:
    rows = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or isinstance(param, click.Argument) or "--help" in param.opts:
            continue
        names, text = (part.replace("|", "\\|") for part in record)
        rows.append(f"| `{names}` | {text} |")
    return ["| option | |", "|---|---|", *rows] if rows else []


def _prose(text: str) -> str:
    """A command's help as Markdown: Click's unwrapped ``\\b`` paragraphs become code blocks."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(f"```\n{p[2:]}\n```" if p.startswith("\b\n") else p for p in paragraphs)


def _command(command: click.Command, path: list[str], parent: click.Context | None, out: list[str]) -> None:
    ctx = click.Context(command, info_name=path[-1], parent=parent, **command.context_settings)
    if path[1:]:
        out += [f"### `{' '.join(path)}`", "", "```", command.get_usage(ctx).removeprefix("Usage: "), "```", ""]
        out += [_prose(command.help or ""), ""]
        options = _options(command, ctx)
        if options:
            out += [*options, ""]
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                _command(sub, [*path, name], ctx, out)


def reference_markdown(root: click.Command) -> str:
    lines = [INTRO.rstrip("\n")]
    lines += [f"| {int(code)} | {meaning} |" for code, meaning in EXIT_MEANINGS.items()]
    ctx = click.Context(root, info_name="gpuportal", **root.context_settings)
    lines += ["", "## Global options", "", *_options(root, ctx), "", "## Commands", ""]
    body: list[str] = []
    _command(root, ["gpuportal"], None, body)
    return "\n".join(lines + body).rstrip("\n") + "\n"
