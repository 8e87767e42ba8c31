"""Compile berds' Java helper (``berds/data/java/LuceneBridge.java``) into the class berds ships.

The compiled class lives in ``berds/data/java/classes/`` so that ``pip install`` needs no Java compiler; this
script rebuilds it after the source changes and records the source's hash and the compiler in
``berds/data/java/build.json`` (``tests/test_java_helper.py`` checks both). Needs a JDK 21+ ``javac``
(``--javac PATH`` or ``$JAVAC``; the first ``javac`` of version 21+ found is used otherwise).

    python scripts/build_java_helper.py [--javac /usr/lib/jvm/temurin-25-jdk-amd64/bin/javac]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JAVA_DIR = ROOT / "berds" / "data" / "java"
SOURCE = JAVA_DIR / "LuceneBridge.java"
CLASSES = JAVA_DIR / "classes"
RELEASE = 21  # the Java version Anserini (pyserini 1.x) is built for


def javac_version(javac: str) -> tuple[int, str]:
    out = subprocess.run([javac, "-version"], capture_output=True, text=True, check=True)
    text = (out.stdout + out.stderr).strip()
    match = re.search(r"javac (\d+)[\d.]*", text)
    return (int(match.group(1)) if match else 0), text


def find_javac() -> str:
    candidates = [os.environ.get("JAVAC", ""), shutil.which("javac") or ""] + sorted(glob.glob("/usr/lib/jvm/*/bin/javac"))
    for javac in filter(None, candidates):
        try:
            if javac_version(javac)[0] >= RELEASE:
                return javac
        except (OSError, subprocess.CalledProcessError):
            continue
    sys.exit(f"no javac of version {RELEASE}+ found: pass --javac PATH")


def build(javac: str, out: Path) -> str:
    """Compile the source into ``out``; returns the compiler's version line."""
    sys.path.insert(0, str(ROOT))
    from berds.java import anserini_jar

    _, version = javac_version(javac)
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([javac, "--release", str(RELEASE), "-encoding", "UTF-8", "-cp", str(anserini_jar()),
                    "-d", str(out), str(SOURCE)], check=True)
    return version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--javac", default=None)
    args = ap.parse_args()
    javac = args.javac or find_javac()
    if CLASSES.exists():
        shutil.rmtree(CLASSES)
    version = build(javac, CLASSES)
    record = {"source": SOURCE.name, "source_sha256": hashlib.sha256(SOURCE.read_bytes()).hexdigest(),
              "javac": version, "release": RELEASE,
              "classes": sorted(str(p.relative_to(CLASSES)) for p in CLASSES.rglob("*.class"))}
    (JAVA_DIR / "build.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"compiled {SOURCE.name} with {version} -> {CLASSES}")


if __name__ == "__main__":
    main()
