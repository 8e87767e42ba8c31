"""berds: benchmark retrieval systems for diverse perspectives.

Importing ``berds`` is cheap: heavy stacks (torch, faiss, pyserini/Java, ray, vllm) load only when used, so
nothing is re-exported here. The public API lives in submodules, one per stage::

    from berds.questions import load_questions              # "demo", "kialo", a jsonl path
    from berds.corpora import write_passage_store, load_passages_jsonl, PassageStore
    from berds.indexes.bm25 import build_bm25_index
    from berds.indexes.faiss import build_dense_index
    from berds.retrievers import retrieve, load_retriever, RETRIEVERS
    from berds.rerank.catalogue import load_reranker, RERANKERS   # load_reranker("mmr", lam=0.75).rerank(run)
    from berds.runs import load_run, save_run
    from berds.judges import load_judge, JUDGES
    from berds.evaluate import evaluate_run, evaluate_paths, EvalOptions, JudgementCache
    from berds.evaluate.compare import compare_results, compare_paths
    from berds.evaluate.analyses.coverage import analyze_coverage     # also .leaning, .docs_needed, .sycophancy
    from berds.testing import check_retriever, check_reranker       # the plug-in contract checks

The data model (``Question``, ``Passage``, ``Hit``, ``Run``, ``JudgePair``, ``Verdict``, ``Judgement``) is in
``berds.types``; errors a user can fix are ``berds.errors.BerdsError``. Functions that do long work take
``progress=`` (a rich progress bar; ``retrieve`` and the index builders show one unless ``progress=False``).
"""

__version__ = "0.1.0"
