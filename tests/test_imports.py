"""`import berds` and the CLI's listing commands stay light: no torch, faiss, pyserini, Java, ray or vllm."""

import subprocess
import sys

HEAVY = ["torch", "transformers", "faiss", "pyserini", "jnius", "ray", "vllm", "sentence_transformers", "matplotlib"]


def loaded_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint(' '.join(sorted(m for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120).stdout
    return set(out.split())


def test_import_berds_is_light():
    mods = loaded_after("import berds, berds.types, berds.io, berds.runs, berds.questions, berds.evaluate")
    assert not [m for m in HEAVY if m in mods]


def test_listing_commands_are_light():
    code = (
        "import sys\nfrom berds.cli import main\n"
        "for args in (['judges', 'list'], ['--help']):\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
    )
    mods = loaded_after(code)
    assert not [m for m in HEAVY if m in mods]
