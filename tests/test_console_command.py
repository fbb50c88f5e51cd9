"""The ``explorer`` console command that ``make install`` puts on the virtual environment's PATH."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from explorer import __version__
from explorer.paths import PROJECT_ROOT


def test_pyproject_declares_the_command_and_only_the_package() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"] == {"explorer": "explorer.cli:main"}
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["explorer*"]
    assert "setuptools" in project["build-system"]["requires"][0]


def test_the_installed_command_works_from_any_folder(tmp_path: Path) -> None:
    command = Path(sys.executable).parent / "explorer"
    if not command.exists():
        pytest.skip(f"{command} is not installed: `make install` installs it (CI runs make test, which does)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([str(command), "--version"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"explorer {__version__}"
    helped = subprocess.run([str(command), "model", "--help"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert helped.stdout.startswith("usage: explorer model") and "--attn" in helped.stdout
    assert not list(tmp_path.iterdir()), "the command wrote into the folder it was run from"


def test_python_dash_m_explorer_keeps_working(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "explorer", "model", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m explorer model")
