"""The lock of tested versions (requirements/lock-pyX.Y.txt): what make and CI install by default."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    pins = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"{path.name}:{number}: not a 'name==version' pin: {line!r}"
        name = _canonical(match.group(1))
        assert name not in pins, f"{path.name}:{number}: {name} pinned twice"
        pins[name] = match.group(2)
    return pins


def locks() -> list[Path]:
    return sorted((ROOT / "requirements").glob("lock-py*.txt"))


def test_there_is_a_lock_for_the_python_ci_runs_and_it_pins_every_direct_dependency():
    assert (ROOT / "requirements" / "lock-py3.11.txt") in locks()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra, requirements in project["optional-dependencies"].items():
        if extra not in ("vllm", "gpu"):  # their own environment / a CUDA host: not in the CPU lock
            wanted += [r for r in requirements if not r.startswith("berds[")]
    names = {_canonical(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in wanted}
    for lock in locks():
        pins = read_lock(lock)
        assert not sorted(names - pins.keys()), f"{lock.name} misses direct dependencies"
        assert "+" not in pins["torch"], "torch is pinned without its build tag, so TORCH_SPEC picks the build"
        assert "berds" not in pins and "berds-example-plugin" not in pins  # editable installs are not pinned


def test_make_and_ci_install_from_the_lock_by_default():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOCKED \?= 1$", makefile, re.M)
    assert "LOCK := requirements/lock-py$(PYVER).txt" in makefile and "PIN := -c $(LOCK)" in makefile
    installs = [line for line in makefile.splitlines() if "pip install" in line]
    assert installs and all("$(PIN)" in line for line in installs)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test LOCKED=1$", ci, re.M)


def test_an_environment_installed_from_the_lock_holds_exactly_its_versions():
    stamp = Path(sys.prefix) / ".installed-locked1"
    if not stamp.exists():
        pytest.skip("this environment was not installed by `make` from the lock (LOCKED=1)")
    lock = ROOT / "requirements" / f"lock-py{sys.version_info[0]}.{sys.version_info[1]}.txt"
    pins = read_lock(lock)
    installed = {_canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    drift = {name: (version, installed[name]) for name, version in pins.items()
             if name in installed and installed[name].split("+")[0] != version}
    assert not drift, f"installed versions differ from {lock.name}: {drift}"


def test_the_readme_names_the_locked_versions_results_were_measured_with():
    readme = (ROOT / "README.md").read_text()
    pins = read_lock(ROOT / "requirements" / "lock-py3.11.txt")
    quoted = re.search(r"measured with the locked versions \(([^)]*)\)", readme)
    assert quoted, "README: the sentence naming the locked versions results were measured with"
    for name, version in re.findall(r"([A-Za-z0-9_.-]+) ([0-9][^,\s]*)", quoted.group(1)):
        assert pins[_canonical(name)] == version, f"README quotes {name} {version}, the lock pins {pins[_canonical(name)]}"
