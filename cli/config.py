"""Named contexts (a portal URL and a token each) in ``$XDG_CONFIG_HOME/gpuportal/config.yaml``.

The file holds tokens, so it must be readable by its owner only: one that the group or others may
read is refused (exit 9) rather than used, and the client always writes it with mode 0600 (in a
folder of mode 0700), replacing it atomically. ``GPUPORTAL_CONFIG`` names another file.

Precedence, highest first: a context named with ``--context`` is used as it is; otherwise
``GPUPORTAL_URL`` and ``GPUPORTAL_TOKEN`` override the URL and token of the context that
``GPUPORTAL_CONTEXT`` names, or else of the file's current context. When both are set and no
context is named, the file is not read at all, so a CI job needs no file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cli.exits import CliError, Exit

ENV_URL, ENV_TOKEN, ENV_CONTEXT, ENV_CONFIG = "GPUPORTAL_URL", "GPUPORTAL_TOKEN", "GPUPORTAL_CONTEXT", "GPUPORTAL_CONFIG"


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(ENV_CONFIG):
        return Path(env[ENV_CONFIG]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "gpuportal" / "config.yaml"


@dataclass
class Context:
    name: str
    url: str
    token: str


@dataclass
class ConfigFile:
    path: Path
    current: str | None = None
    contexts: dict[str, Context] = field(default_factory=dict)

    def to_yaml(self) -> str:
        data: dict[str, Any] = {
            "current-context": self.current,
            "contexts": {name: {"url": c.url, "token": c.token} for name, c in sorted(self.contexts.items())},
        }
        return yaml.safe_dump(data, sort_keys=False)


def _refuse_unsafe(path: Path) -> None:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CliError(
            f"{path} may be read or written by other users (mode {stat.S_IMODE(mode):04o}); it holds tokens, "
            f"so it is not used. Fix it with: chmod 600 {path}",
            Exit.CONFIG,
        )


def config_load(path: Path) -> ConfigFile:
    """The file's contexts; an absent file is an empty configuration."""
    if not path.exists():
        return ConfigFile(path=path)
    _refuse_unsafe(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise CliError(f"{path} cannot be read: {error}", Exit.CONFIG) from None
    if not isinstance(data, dict) or not isinstance(data.get("contexts") or {}, dict):
        raise CliError(f"{path} is not a gpuportal configuration (expected 'contexts' and 'current-context')", Exit.CONFIG)
    contexts = {}
    for name, entry in (data.get("contexts") or {}).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            raise CliError(f"{path}: context {name!r} has no url", Exit.CONFIG)
        contexts[str(name)] = Context(name=str(name), url=entry["url"], token=str(entry.get("token") or ""))
    current = data.get("current-context")
    return ConfigFile(path=path, current=str(current) if current is not None else None, contexts=contexts)


def config_save(config: ConfigFile) -> None:
    """Write the file with mode 0600 through a temporary file in the same folder, then rename."""
    folder = config.path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".config-", suffix=".yaml", dir=folder)
    try:
        os.fchmod(handle, 0o600)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(config.to_yaml())
        os.replace(temporary, config.path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def context_resolve(*, name: str | None, environ: Mapping[str, str] | None = None) -> Context:
    """The context a command runs with: the named one, or the current one, with the overrides."""
    env = os.environ if environ is None else environ
    url, token = (None, None) if name else (env.get(ENV_URL) or None, env.get(ENV_TOKEN) or None)
    wanted = name or env.get(ENV_CONTEXT) or None
    if url and token:
        return Context(name="(environment)", url=url, token=token)
    config = config_load(config_path(env))
    wanted = wanted or config.current
    if wanted is None:
        if url:
            return Context(name="(environment)", url=url, token=token or "")
        raise CliError("no portal configured: run 'gpuportal login --url URL' or set GPUPORTAL_URL", Exit.AUTH)
    context = config.contexts.get(wanted)
    if context is None:
        if url:
            return Context(name="(environment)", url=url, token=token or "")
        known = ", ".join(sorted(config.contexts)) or "none"
        raise CliError(f"no context named {wanted!r} in {config.path} (known: {known})", Exit.CONFIG)
    return Context(name=context.name, url=url or context.url, token=token or context.token)
