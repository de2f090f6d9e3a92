"""`tb-health.toml`: settings kept in the logdir, honoured by the CLI and the Health tab alike.

A run's verdict depends on which tag plays which role; the CLI takes `--tag ROLE=TAG`, the tab
has no command line. Both read this file from the logdir's top folder, so they never give two
verdicts on one logdir (the CLI's `--tag` flags override the file's entries, role by role):

    [tags]
    loss = "my/loss"
    lr = "optim/lr"

Roles are those of `contract.SCALAR_SPELLINGS`. A file that cannot be parsed, an unknown role
or section, or a tag that is not a non-empty string raise `LogdirConfigError` naming the file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from tb_health_plugin.contract import SCALAR_SPELLINGS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CONFIG_FILE = "tb-health.toml"
SECTIONS = ("tags",)


class LogdirConfigError(ValueError):
    """The logdir's `tb-health.toml` cannot be used as it is."""


@dataclass(frozen=True)
class LogdirConfig:
    tags: dict[str, str] = field(default_factory=dict)  # role -> tag
    path: str | None = None  # the file read, None when the logdir has none


def check_tag_overrides(tags: Mapping[str, object], where: str) -> dict[str, str]:
    """`tags` as role -> tag, or `LogdirConfigError` naming `where` and the bad entry."""
    out = {}
    for role, tag in tags.items():
        if role not in SCALAR_SPELLINGS:
            raise LogdirConfigError(f"{where}: unknown role {role!r}; roles: {', '.join(SCALAR_SPELLINGS)}")
        if not isinstance(tag, str) or not tag.strip():
            raise LogdirConfigError(f"{where}: the tag for {role!r} must be a non-empty string, got {tag!r}")
        out[role] = tag.strip()
    return out


def config_path(logdir: str | os.PathLike) -> str:
    return os.path.join(os.fspath(logdir), CONFIG_FILE)


def load_logdir_config(logdir: str | os.PathLike) -> LogdirConfig:
    """The logdir's settings; empty ones when it has no `tb-health.toml`."""
    path = config_path(logdir)
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        return LogdirConfig()
    except tomllib.TOMLDecodeError as error:
        raise LogdirConfigError(f"{path}: not valid TOML ({error})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise LogdirConfigError(f"{path}: cannot be read ({error})") from None
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise LogdirConfigError(f"{path}: unknown section {unknown[0]!r}; sections: {', '.join(SECTIONS)}")
    tags = data.get("tags", {})
    if not isinstance(tags, dict):
        raise LogdirConfigError(f"{path}: [tags] must be a table of ROLE = \"TAG\"")
    return LogdirConfig(tags=check_tag_overrides(tags, f"{path} [tags]"), path=path)


def config_signature(logdir: str | os.PathLike) -> tuple | None:
    """What changes when the file is written, replaced or removed (None: no file)."""
    try:
        info = os.stat(config_path(logdir))
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)
