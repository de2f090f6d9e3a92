"""The release artefacts, as a new user gets them.

`python -m build` makes the sdist from a clean copy of the repository (tracked files only: no
built tab, no build/ leftovers) and the wheel from that sdist. Each installs into a fresh virtual
environment with only the package's base dependencies (TensorBoard, numpy..., no MindSpore) and
no node on PATH; a real `tensorboard` started from that environment lists the Health tab and
serves its module and routes. The wheel build's rules for the tab (setup.py) are checked on the
unpacked sdist: rebuilt from its sources the tab is the one shipped, and without node a build
with no tab built from these sources stops with a message instead of making a wheel without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.eventlogs import write_scalars
from tests.tensorboard_server import get_json, running_tensorboard

pytestmark = pytest.mark.release

REPO = Path(__file__).resolve().parents[1]
NODE_MODULES = REPO / "frontend" / "node_modules"
BUILD_TIMEOUT_S = 900  # the sdist builds the tab (tsc + esbuild); the first build env may download setuptools
INSTALL_TIMEOUT_S = 900  # TensorBoard, numpy and scipy from pip's cache, or downloaded the first time
TAB_FILES = ("index.js", "index.css", "build-info.json")
FRONTEND_SOURCES = ("package.json", "package-lock.json", "build.mjs", "tsconfig.json", "src/index.ts")


@dataclass(frozen=True)
class Artefacts:
    sdist: Path
    wheel: Path


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run to completion with output captured; the caller judges the exit code."""
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


def user_env(path_dirs: list[Path]) -> dict[str, str]:
    """A user's environment with only `path_dirs` on PATH (so no node or npm) and nothing that
    would import this checkout instead of the installed package."""
    dropped = {"PYTHONPATH", "VIRTUAL_ENV", "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    env["PATH"] = os.pathsep.join(str(d) for d in path_dirs)
    for tool in ("node", "npm"):
        assert shutil.which(tool, path=env["PATH"]) is None, f"{tool} is still on PATH"
    return env


def copy_clean_checkout(destination: Path) -> Path:
    """The files git would commit (tracked, or new and not ignored), as a fresh clone holds them;
    node_modules is linked rather than copied, so the sdist's own tab build needs no download."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, check=True)
    for name in filter(None, listed.stdout.split("\0")):
        source = REPO / name
        if name.startswith("frontend/node_modules") or not source.is_file():
            continue
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    if NODE_MODULES.is_dir():
        (destination / "frontend" / "node_modules").symlink_to(NODE_MODULES.resolve())
    return destination


def python_build(source: Path, outdir: Path, env: dict[str, str] | None = None, *args: str):
    return run([sys.executable, "-m", "build", "--outdir", str(outdir), *args, str(source)],
               env=env, timeout=BUILD_TIMEOUT_S)


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> Artefacts:
    source = copy_clean_checkout(tmp_path_factory.mktemp("checkout"))
    assert not (source / "tb_health_plugin" / "static").exists(), "the copy must not carry a built tab"
    outdir = tmp_path_factory.mktemp("dist")
    result = python_build(source, outdir)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (sdist,) = outdir.glob("*.tar.gz")
    (wheel,) = outdir.glob("*.whl")
    return Artefacts(sdist, wheel)


@pytest.fixture(scope="module")
def tiny_logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny-logs")
    steps = np.arange(200)
    write_scalars(root / "tiny_run", {"train/loss": (steps, 2.0 / (1 + steps / 50.0))})
    return root


@pytest.fixture
def fresh_venv(tmp_path) -> Iterator[Path]:
    """An empty virtual environment, removed afterwards (it holds a few hundred MB)."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


def wheel_tab(wheel: Path, name: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(f"tb_health_plugin/static/{name}")


def unpack_sdist(sdist: Path, destination: Path) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(destination, filter="data")
    (root,) = destination.iterdir()
    return root


def test_the_sdist_holds_the_tab_sources_and_the_built_tab(artefacts):
    with tarfile.open(artefacts.sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {f"frontend/{name}" for name in FRONTEND_SOURCES} <= names
    assert {f"tb_health_plugin/static/{name}" for name in TAB_FILES} <= names
    assert not [name for name in names if "node_modules" in name]


def test_the_wheel_holds_the_built_tab_and_no_frontend_sources(artefacts):
    with zipfile.ZipFile(artefacts.wheel) as archive:
        names = set(archive.namelist())
    assert {f"tb_health_plugin/static/{name}" for name in TAB_FILES} <= names
    assert not [name for name in names if name.startswith("frontend/")]
    record = json.loads(wheel_tab(artefacts.wheel, "build-info.json"))
    assert set(record["outputs"]) == {"index.js", "index.css"}


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_each_artefact_installs_without_node_and_tensorboard_serves_the_tab(
    kind, artefacts, tiny_logdir, fresh_venv, tmp_path
):
    venv = fresh_venv
    python = venv / "bin" / "python"
    env = user_env([venv / "bin"])
    artefact = artefacts.wheel if kind == "wheel" else artefacts.sdist
    # This interpreter's pip installs into the fresh environment (pip's cache is reused); the
    # constraints pin the versions the project is tested with. Byte-compiling scipy and
    # TensorBoard up front would take most of the install's time and changes nothing here.
    installed = run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-compile",
         "-c", str(REPO / "constraints.txt"), str(artefact)],
        env=env, cwd=tmp_path, timeout=INSTALL_TIMEOUT_S,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    where = run([str(python), "-c", "import tb_health_plugin; print(tb_health_plugin.__file__)"],
                env=env, cwd=tmp_path, check=True)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    has_mindspore = run([str(python), "-c", "import mindspore"], env=env, cwd=tmp_path)
    assert has_mindspore.returncode != 0, "the base install must not pull MindSpore"

    check = run([str(venv / "bin" / "tb-health"), "check", str(tiny_logdir)], env=env, cwd=tmp_path, timeout=300)
    assert check.returncode == 0 and "tiny_run" in check.stdout, check.stdout + check.stderr

    with running_tensorboard(tiny_logdir, command=[str(venv / "bin" / "tensorboard")], env=env, cwd=tmp_path) as base:
        listing = get_json(base + "/data/plugins_listing")
        assert listing["health"]["loading_mechanism"] == {
            "type": "IFRAME", "module_path": "/data/plugin/health/index.js",
        }
        with urllib.request.urlopen(base + "/data/plugin/health/index.js", timeout=30) as response:
            assert response.headers["Content-Type"].startswith("application/javascript")
            assert response.read() == wheel_tab(artefacts.wheel, "index.js")
        runs = get_json(base + "/data/plugin/health/runs")["runs"]
        assert {r["run"]: r["signals"] for r in runs} == {"tiny_run": {"loss": "train/loss"}}


def test_a_wheel_built_from_the_sdist_sources_has_the_shipped_tab(artefacts, tmp_path):
    """The sdist holds what the tab's build needs: with the shipped tab removed, building the
    wheel (node present) rebuilds it from the sdist's frontend/, byte for byte the same."""
    source = unpack_sdist(artefacts.sdist, tmp_path / "sdist")
    shutil.rmtree(source / "tb_health_plugin" / "static")
    if NODE_MODULES.is_dir():
        (source / "frontend" / "node_modules").symlink_to(NODE_MODULES.resolve())
    result = python_build(source, tmp_path / "dist", None, "--wheel")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "node build.mjs" in result.stdout  # it was rebuilt, not found
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    for name in ("index.js", "index.css"):
        assert wheel_tab(wheel, name) == wheel_tab(artefacts.wheel, name)


@pytest.mark.parametrize("damage", ["no built tab", "tab built from other sources"])
def test_without_node_a_wheel_build_without_a_matching_tab_fails_with_a_message(damage, artefacts, tmp_path):
    source = unpack_sdist(artefacts.sdist, tmp_path / "sdist")
    if damage == "no built tab":
        shutil.rmtree(source / "tb_health_plugin" / "static")
    else:
        with (source / "frontend" / "src" / "index.ts").open("a") as index:
            index.write("\n// changed after the tab was built\n")
    env = user_env([Path(sys.executable).parent])
    result = python_build(source, tmp_path / "dist", env, "--wheel")
    assert result.returncode != 0
    assert "needs node and npm" in result.stdout + result.stderr
    assert not list((tmp_path / "dist").glob("*.whl"))
