"""Build glue for the Health tab; the package metadata is in pyproject.toml.

The tab (TypeScript in frontend/) is built by esbuild into tb_health_plugin/static/, which the
package ships as package data. Two setuptools extension points do it:

- `build_tab`, a `build` sub-command (setuptools' SubCommand protocol) that runs before
  `build_py`, so wheels and editable installs carry the tab. Its `get_source_files()` is how
  setuptools puts the tab's sources (not node_modules) into the sdist.
- `sdist` runs `build_tab` first, so the sdist also carries the built tab: a wheel built from it,
  and `pip install` of it, need no node.

The built tab records a hash of the sources it was built from (static/build-info.json). A tab
whose record matches the sources is used as it is; otherwise the tab is built with npm, and the
build stops with a message saying why when npm is missing or fails, never with a wheel
without its tab.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Command, setup
from setuptools.command.build import build
from setuptools.command.sdist import sdist
from setuptools.errors import SetupError

ROOT = Path(__file__).resolve().parent
FRONTEND = ROOT / "frontend"
STATIC = ROOT / "tb_health_plugin" / "static"
BUILD_INFO = STATIC / "build-info.json"
CONTRACT = ROOT / "tb_health_plugin" / "contract.py"  # the tab's API types are generated from it
TAB_OUTPUTS = ("index.js", "index.css")  # what frontend/build.mjs writes into STATIC
FRONTEND_INPUTS = ("package.json", "package-lock.json", "build.mjs", "tsconfig.json")


def tab_sources() -> list[Path]:
    """Every file the tab's build reads, except the dependencies npm installs from the lockfile
    and the API types it generates from the contract (the contract itself is a source)."""
    sources = [FRONTEND / name for name in FRONTEND_INPUTS if (FRONTEND / name).is_file()]
    sources += sorted(path for path in (FRONTEND / "scripts").rglob("*.py") if path.is_file())
    sources.append(CONTRACT)
    generated = FRONTEND / "src" / "generated"
    return sources + sorted(
        path for path in (FRONTEND / "src").rglob("*") if path.is_file() and generated not in path.parents
    )


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sources_digest(sources: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(sources):
        digest.update(f"{path.relative_to(ROOT).as_posix()}\0{_sha256(path)}\n".encode())
    return digest.hexdigest()


def prebuilt_tab_matches(digest: str) -> bool:
    """True when STATIC holds a complete, unaltered tab built from sources with this digest."""
    try:
        info = json.loads(BUILD_INFO.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict) or info.get("sources_sha256") != digest:
        return False
    outputs = info.get("outputs")
    return isinstance(outputs, dict) and all(
        (STATIC / name).is_file() and outputs.get(name) == _sha256(STATIC / name) for name in TAB_OUTPUTS
    )


def build_tab_with_npm(digest: str) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise SetupError(
            "tb-health-plugin: the Health tab must be built from frontend/, which needs node and npm "
            "(none on PATH), and no tab built from these sources is present in "
            "tb_health_plugin/static/. Install node 20+ with npm, or install the wheel, which "
            "carries the built tab."
        )
    BUILD_INFO.unlink(missing_ok=True)  # an interrupted build must not leave a valid record
    env = {key: value for key, value in os.environ.items() if key != "TB_HEALTH_DEV"}  # minified
    try:
        if not (FRONTEND / "node_modules").is_dir():
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=FRONTEND, env=env, check=True)
        subprocess.run([npm, "run", "build"], cwd=FRONTEND, env=env, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        raise SetupError(f"tb-health-plugin: building the Health tab from frontend/ failed: {error}") from error
    missing = [name for name in TAB_OUTPUTS if not (STATIC / name).is_file()]
    if missing:
        raise SetupError(f"tb-health-plugin: the Health tab build did not write {', '.join(missing)}")
    outputs = {name: _sha256(STATIC / name) for name in TAB_OUTPUTS}
    BUILD_INFO.write_text(json.dumps({"sources_sha256": digest, "outputs": outputs}, indent=1) + "\n")


class BuildTab(Command):
    """Make tb_health_plugin/static/ hold the tab built from frontend/ (in place: package data)."""

    description = "build the Health tab (frontend/) into tb_health_plugin/static/"
    user_options: list = []
    editable_mode = False

    def initialize_options(self) -> None:
        self.build_lib = None

    def finalize_options(self) -> None:
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def run(self) -> None:
        digest = sources_digest(tab_sources())
        if prebuilt_tab_matches(digest):
            return
        build_tab_with_npm(digest)

    def get_source_files(self) -> list[str]:
        return [path.relative_to(ROOT).as_posix() for path in tab_sources()]

    def get_outputs(self) -> list[str]:
        return []  # the files land in the package's source tree; build_py ships them as package data

    def get_output_mapping(self) -> dict[str, str]:
        return {}


class BuildWithTab(build):
    sub_commands = [("build_tab", None), *build.sub_commands]


class SdistWithTab(sdist):
    """The sdist carries the built tab too, so installing it needs no node."""

    def run(self) -> None:
        self.run_command("build_tab")
        super().run()


setup(cmdclass={"build_tab": BuildTab, "build": BuildWithTab, "sdist": SdistWithTab})
