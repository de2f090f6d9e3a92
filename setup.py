"""Builds the Health tab (frontend/) into the package before it is collected.

Only the build glue lives here; metadata is in pyproject.toml. `pip install .` therefore needs
node and npm; the built files are never committed.
"""

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
FRONTEND = ROOT / "frontend"
STATIC = ROOT / "tb_health_plugin" / "static"


def build_frontend() -> None:
    if not (FRONTEND / "package.json").exists():
        if (STATIC / "index.js").exists():
            return  # building from an sdist that already carries the built tab
        raise RuntimeError("frontend/ is missing and no built tab is present")
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("building tb-health-plugin needs node and npm (the Health tab is built from frontend/)")
    if not (FRONTEND / "node_modules").exists():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=FRONTEND, check=True)
    subprocess.run([npm, "run", "build"], cwd=FRONTEND, check=True)


class BuildPyWithFrontend(build_py):
    def run(self):
        build_frontend()
        super().run()


setup(cmdclass={"build_py": BuildPyWithFrontend})
