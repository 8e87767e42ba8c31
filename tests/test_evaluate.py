"""berds eval: judging through the cache, overwrite policies, outputs, CLI errors, kill-and-resume."""

import hashlib
import json
import signal
import sqlite3
import subprocess
import time
import zlib

import numpy as np
import pytest

from berds.errors import BerdsError, InputError, UnknownNameError
from berds.evaluate.cache import JudgementCache
from berds.evaluate.evaluation import evaluate_paths, evaluate_run
from berds.judges import load_judge
from berds.judges.llm_judge import p_yes_from_logprobs, parse_answer
from berds.runs import save_run
from berds.types import Hit, JudgePair, Passage, Question, Run, Verdict
from conftest import berds_cmd, make_run, subprocess_env
from judges_for_tests import OverlapJudge


class CountingJudge(OverlapJudge):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.calls = 0
        self.seen = 0

    def judge(self, pairs):
        self.calls += 1
        self.seen += len(pairs)
        return super().judge(pairs)


def test_evaluate_matches_hand_computed_support(tiny_run):
    judge = OverlapJudge(threshold=0.99)
    res = evaluate_run(tiny_run, judge, ks=(1, 3), progress=False)
    # q0 passages: r0 states perspective 0, r1 unrelated, r2 states both -> support matrix top-3
    assert res.support["q0"].tolist() == [[True, False, True], [False, False, True]]
    assert res.per_question["q0"] == {"mrecall@1": 1.0,  # m=2 > k=1: one covered is enough
         "precision@1": 1.0, "mrecall@3": 1.0, "precision@3": 2 / 3}
    # q1 has 3 perspectives; top-3: r0 supports p0, r2 supports p0 and p2 -> p1 never -> 0 at k=3
    assert res.per_question["q1"]["mrecall@3"] == 0.0
    assert res.averages["all"]["precision@3"] == pytest.approx(2 / 3)
    assert set(res.averages) == {"all", "arguana", "kialo", "macro"}


def test_the_cyclic_gc_runs_while_the_judge_does(tiny_run):
    """evaluate_run pauses the cyclic GC while it builds digests and matrices, never while a judge runs (a model may
    make cyclic garbage for hours); and it leaves the GC as it found it."""
    import gc

    class GcWatchingJudge(OverlapJudge):
        seen: list[bool] = []

        def judge(self, pairs):
            self.seen.append(gc.isenabled())
            return super().judge(pairs)

    judge = GcWatchingJudge(threshold=0.99)
    assert gc.isenabled()
    evaluate_run(tiny_run, judge, ks=(3,), progress=False)
    assert judge.seen and all(judge.seen) and gc.isenabled()


def test_no_gc_moves_what_it_made_to_the_oldest_generation_and_keeps_a_frozen_set():
    """Leaving no_gc puts the objects made inside in the oldest generation (young-generation passes would walk
    them all again); a set frozen by other code (gc.freeze before a fork) stays frozen."""
    import gc

    from berds.io import no_gc

    def in_generation(obj, generation):
        return any(o is obj for o in gc.get_objects(generation=generation))

    with no_gc():
        made = [[i] for i in range(1000)]
        assert not gc.isenabled() and in_generation(made[0], 0)
    assert gc.isenabled() and in_generation(made[0], 2) and not in_generation(made[0], 0)
    assert gc.get_freeze_count() == 0

    probe = [[0]]  # a container the collector tracks, frozen below
    gc.freeze()
    try:
        with no_gc():
            more = [[i] for i in range(100)]
        # still in the permanent generation (the freeze count itself moves when another thread frees a frozen object)
        assert more and gc.get_freeze_count() > 0 and not any(in_generation(probe, g) for g in (0, 1, 2))
    finally:
        gc.unfreeze()
    assert in_generation(probe, 2)  # (the check above can fail: unfrozen, the probe is in the oldest generation)


def test_cache_reuse_and_overwrite_policies(tmp_path, tiny_run):
    cache = JudgementCache(tmp_path / "c.sqlite")
    judge = CountingJudge()
    first = evaluate_run(tiny_run, judge, ks=(5,), cache=cache, progress=False)
    assert first.stats.judged == first.stats.pairs > 0 and first.stats.cached == 0
    seen = judge.seen
    again = evaluate_run(tiny_run, judge, ks=(5,), cache=cache, progress=False)
    assert judge.seen == seen and again.stats.cached == again.stats.pairs
    assert again.per_question == first.per_question
    # deeper k only judges the new ranks
    deeper = evaluate_run(tiny_run, judge, ks=(6,), cache=cache, progress=False)
    assert deeper.stats.judged == judge.seen - seen < deeper.stats.pairs
    always = evaluate_run(tiny_run, judge, ks=(5,), cache=cache, overwrite="always", progress=False)
    assert always.stats.judged == always.stats.pairs
    never_cache = JudgementCache(tmp_path / "empty.sqlite")
    with pytest.raises(BerdsError, match="--overwrite never"):
        evaluate_run(tiny_run, judge, ks=(5,), cache=never_cache, overwrite="never", progress=False)
    with pytest.raises(BerdsError, match="unknown overwrite policy"):
        evaluate_run(tiny_run, judge, ks=(5,), overwrite="sometimes", progress=False)
    with pytest.raises(BerdsError, match=r"unknown --title-position \(title_position=\) 'middle'"):
        evaluate_run(tiny_run, judge, ks=(5,), title_position="middle", progress=False)


def test_cache_is_keyed_by_judge_and_prompt(tmp_path):
    cache = JudgementCache(tmp_path / "c.sqlite")
    pair = JudgePair("p", "passage")
    cache.put_many("judge-a", "v1", [pair], [Verdict(True, 0.9, "Yes")])
    assert cache.get_many("judge-a", "v1", [pair])[0] == Verdict(True, 0.9, "Yes", None)
    assert cache.get_many("judge-b", "v1", [pair]) == [None]
    assert cache.get_many("judge-a", "v2", [pair]) == [None]
    assert cache.get_many("judge-a", "v1", [JudgePair("p", "passage ")]) == [None]
    assert cache.judges() == [("judge-a", "v1", 1)]


def test_starting_the_default_cache_is_said_once(capsys):
    from berds.evaluate.cache import default_cache_path

    with JudgementCache():  # $BERDS_HOME is this test's own folder, with no cache in it yet
        pass
    assert f"starting the default judgement cache at {default_cache_path()}" in capsys.readouterr().err
    with JudgementCache():
        pass
    assert capsys.readouterr().err == ""


def test_lazy_judge_is_not_built_when_everything_is_cached(tmp_path, tiny_run):
    cache = JudgementCache(tmp_path / "c.sqlite")
    evaluate_run(tiny_run, OverlapJudge(), ks=(3,), cache=cache, progress=False)

    class IdOnly:
        id, prompt_version = OverlapJudge().id, OverlapJudge.prompt_version

        def judge(self, pairs):
            raise AssertionError("the model must not run when everything is cached")

    res = evaluate_run(tiny_run, IdOnly(), ks=(3,), cache=cache, progress=False)
    assert res.stats.judged == 0


def test_fewer_passages_than_k(tiny_run):
    with pytest.raises(InputError, match="has 6 passages but k=10 needs 10.*--allow-short"):
        evaluate_run(tiny_run, OverlapJudge(), ks=(10,), progress=False)
    res = evaluate_run(tiny_run, OverlapJudge(), ks=(10,), allow_short=True, progress=False)
    assert res.support["q0"].shape == (2, 10) and not res.support["q0"][:, 6:].any()
    for k in (10_001, 10**21):  # an absurd k is refused in one line, not by numpy failing to allocate
        with pytest.raises(BerdsError, match="more than berds evaluates"):
            evaluate_run(tiny_run, OverlapJudge(), ks=(5, k), allow_short=True, progress=False)


def test_fewer_passages_than_k_names_the_file_and_line_of_the_question(tmp_path, tiny_run):
    from berds.runs import load_run

    from berds.types import Run

    qids = list(tiny_run.questions)
    short = Run.from_lists([tiny_run.questions[q] for q in qids],
                           [tiny_run.hits[q][:4] if q == qids[1] else tiny_run.hits[q] for q in qids], name="short")
    folder = save_run(short, tmp_path / "run")
    with pytest.raises(InputError, match=rf"run.ctxs.jsonl, line 2, record '{qids[1]}': question has 4 passages but k=5"):
        evaluate_run(load_run(folder), OverlapJudge(), ks=(5,), progress=False)


def test_evaluate_paths_writes_outputs(tmp_path, tiny_run, ctxs_file):
    folder = save_run(tiny_run, tmp_path / "run")
    results = evaluate_paths([folder, ctxs_file], "judges_for_tests:OverlapJudge", (2, 4),
                             cache_path=tmp_path / "c.sqlite", progress=False, write_legacy=True)
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["ks"] == [2, 4] and metrics["judge"]["prompt_version"] == "overlap-v1"
    assert "mrecall@4" in metrics["averages"]["all"]
    eval_dir = ctxs_file.with_name("legacy.eval")
    assert (eval_dir / "metrics.json").exists()
    rows = [json.loads(l) for l in (eval_dir / "judgements.jsonl").read_text().splitlines()]
    assert len(rows) == sum(len(q.perspectives) * 4 for q in tiny_run.questions.values())
    legacy = [json.loads(l) for l in (eval_dir / "run.mistralpred.jsonl").read_text().splitlines()]
    assert len(legacy[0]["ctxs"]) == 4 and all(len(c["mistral-preds"]) == 2 for c in legacy[0]["ctxs"])
    assert {type(x) for c in legacy[0]["ctxs"] for x in c["mistral-preds"]} == {bool}
    # both inputs hold the same passages: the second run is answered from the cache
    assert results[1][1].stats.judged == 0


def test_parse_modes():
    assert parse_answer(" Yes, it does.", "strict") == (True, True)
    assert parse_answer("**No**", "strict") == (False, True)
    assert parse_answer("The answer is yes", "strict") == (False, False)       # strict: first word decides
    assert parse_answer("The answer is yes") == (True, True)                    # default: the study's rule
    assert parse_answer("The answer is yes", "yes-anywhere") == (True, True)
    assert parse_answer("Nobody knows", "yes-anywhere") == (False, True)
    assert parse_answer("I cannot say yes or no", "yes-anywhere") == (True, True)  # why it is not the default
    assert parse_answer("I cannot say yes or no") == (False, True)
    with pytest.raises(BerdsError, match="renamed yes-anywhere"):
        parse_answer("Yes", "berds-parity")
    assert p_yes_from_logprobs({"▁Yes": np.log(0.6), "▁No": np.log(0.2), "▁Maybe": np.log(0.2)}) == pytest.approx(0.75)
    assert p_yes_from_logprobs({"Hello": -0.1}) is None


def test_unknown_judge_suggests():
    with pytest.raises(UnknownNameError, match="Did you mean 'embedded'"):
        load_judge("embeded")
    with pytest.raises(BerdsError, match="names no model"):
        load_judge("openai:")


def test_cli_eval_prints_table_and_errors(tmp_path, tiny_run):
    folder = save_run(tiny_run, tmp_path / "run")
    ok = subprocess.run(berds_cmd("eval", str(folder), "--judge", "judges_for_tests:OverlapJudge", "--k", "2",
                                  "--cache", str(tmp_path / "c.sqlite"), "-q"),
                        capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "MRecall@2" in ok.stdout and "Prec@2" in ok.stdout
    bad = subprocess.run(berds_cmd("eval", str(folder), "--judge", "mistral-berdz"),
                         capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert bad.returncode == 2 and "Did you mean 'mistral-berds'" in bad.stderr and "Traceback" not in bad.stderr
    missing = subprocess.run(berds_cmd("eval", str(tmp_path / "nope.jsonl"), "--judge", "embedded"), capture_output=True, text=True,
                             env=subprocess_env(), timeout=120)
    assert missing.returncode == 2 and "nope.jsonl" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.slow
def test_killed_evaluation_resumes_and_judges_only_missing(tmp_path):
    run = make_run(n_questions=3, depth=10)
    folder = save_run(run, tmp_path / "run")
    cache = tmp_path / "c.sqlite"
    log = tmp_path / "judged.log"
    args = berds_cmd("eval", str(folder), "--judge", "judges_for_tests:OverlapJudge", "--k", "10",
                     "-o", "delay=0.05", "-o", "batch_size=1", "--cache", str(cache), "-q")
    proc = subprocess.Popen(args, env=subprocess_env(BERDS_TEST_JUDGE_LOG=str(log)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    cached_before = 0
    while time.time() < deadline:
        if cache.exists():
            try:
                with sqlite3.connect(cache) as db:
                    cached_before = db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0]
            except sqlite3.OperationalError:
                cached_before = 0
        if cached_before >= 8:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    total = sum(len(q.perspectives) for q in run.questions.values()) * 10
    assert 8 <= cached_before < total, "the kill must land mid-evaluation"
    with sqlite3.connect(cache) as db:
        cached_after_kill = db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0]
    log.unlink()
    done = subprocess.run(args, env=subprocess_env(BERDS_TEST_JUDGE_LOG=str(log)), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    resumed = json.loads((folder / "metrics.json").read_text())
    assert resumed["judging"]["cached"] == cached_after_kill
    assert resumed["judging"]["judged"] == resumed["judging"]["pairs"] - cached_after_kill
    assert len(log.read_text().splitlines()) == resumed["judging"]["judged"]
    # identical metrics to an uninterrupted evaluation without any cache
    fresh = evaluate_run(run, OverlapJudge(), ks=(10,), progress=False)
    assert resumed["per_question"] == fresh.per_question


def test_fully_cached_evaluation_never_loads_the_embedded_model(tmp_path, tiny_run):
    from berds.judges.embedded import EmbeddedJudge

    cache = JudgementCache(tmp_path / "c.sqlite")
    first = evaluate_run(tiny_run, EmbeddedJudge(), ks=(2,), cache=cache, progress=False)
    fresh = EmbeddedJudge()
    again = evaluate_run(tiny_run, fresh, ks=(2,), cache=cache, progress=False)
    assert again.stats.judged == 0 and again.per_question == first.per_question
    assert fresh.cross_encoder._network is None, "the model must only load when a pair needs judging"


def test_judgement_lines_are_the_json_of_each_judgement_including_short_questions_and_missing_p_yes():
    """judgements.jsonl is written without a json.dumps per line; it must say exactly what json.dumps would."""
    from berds.evaluate.evaluation import EvalResult, JudgeStats

    questions = [Question('q"1', "?", ("a", "b")), Question("q2", "?", ("c",))]
    hits = [[Hit(Passage("d1", "t"), 1.0), Hit(Passage("dé2", "t"), 0.5)], [Hit(Passage("x", "t"), 1.0)]]
    run = Run.from_lists(questions, hits)
    support = {'q"1': np.array([[True, False, False], [False, True, False]]), "q2": np.array([[True, False, False]])}
    p_yes = {'q"1': np.array([[0.9, np.nan, np.nan], [0.1, 0.7, np.nan]]), "q2": np.array([[1 / 3, np.nan, np.nan]])}
    result = EvalResult("r", 'judge"x', "v", (3,), 3, support, p_yes, {}, {}, JudgeStats())
    expected = [json.dumps({"qid": j.qid, "docid": j.docid, "rank": j.rank, "perspective": j.perspective_index,
                            "label": int(j.label), "p_yes": j.p_yes, "judge": result.judge_id}, ensure_ascii=False) + "\n"
                for j in result.judgements(run)]
    assert len(expected) == 5  # 2 perspectives x 2 passages + 1 x 1: the short questions' missing ranks have none
    assert list(result.judgement_lines(run)) == expected


def test_an_unchanged_judgements_file_is_kept_and_any_change_rewrites_it(tmp_path, tiny_run):
    from berds.evaluate.evaluation import write_eval_outputs
    from berds.io import sha256_file

    result = evaluate_run(tiny_run, OverlapJudge(), ks=(2, 4), progress=False)
    paths = write_eval_outputs(result, tiny_run, tmp_path / "eval")
    judgements, metrics = paths["judgements"], paths["metrics"]
    first = judgements.read_bytes()
    record = json.loads(metrics.read_text())["judgements_file"]
    assert record["sha256"] == sha256_file(judgements) and record["bytes"] == len(first)
    assert b"".join(line.encode() for line in result.judgement_lines(tiny_run)) == first

    inode = judgements.stat().st_ino
    write_eval_outputs(result, tiny_run, tmp_path / "eval")  # the same judgements: the file is left alone
    assert judgements.stat().st_ino == inode and judgements.read_bytes() == first

    edited = first.replace(b'"label": 1', b'"label": 0', 1)  # same size, other bytes
    assert edited != first and len(edited) == len(first)
    judgements.write_bytes(edited)
    write_eval_outputs(result, tiny_run, tmp_path / "eval")
    assert judgements.read_bytes() == first  # checked against the record, so written again

    flipped = evaluate_run(tiny_run, OverlapJudge(), ks=(2, 4), progress=False)
    flipped.support["q0"][0, 0] = not flipped.support["q0"][0, 0]  # other verdicts: another key
    assert flipped.judgements_key(tiny_run) != result.judgements_key(tiny_run)
    write_eval_outputs(flipped, tiny_run, tmp_path / "eval")
    assert judgements.read_bytes() != first
    assert json.loads(metrics.read_text())["judgements_file"]["sha256"] == sha256_file(judgements)

    metrics.write_text("{not json", encoding="utf-8")  # an unreadable earlier record: both written afresh
    write_eval_outputs(result, tiny_run, tmp_path / "eval")
    assert judgements.read_bytes() == first and json.loads(metrics.read_text())["judgements_file"] == record


def test_a_judge_whose_model_cannot_be_had_fails_before_the_progress_bar(tmp_path, tiny_run, capsys):
    """The model is loaded (prepare) before judging starts: a missing model fails without a 0/N bar first, and a
    judge that loads fine is prepared once, before its first batch."""
    from berds.errors import BerdsError

    class Unavailable(OverlapJudge):
        def prepare(self):
            raise BerdsError("cannot load model m: not in the local Hugging Face cache")

        def judge(self, pairs):
            raise AssertionError("judging must not start")

    with pytest.raises(BerdsError, match="not in the local Hugging Face cache"):
        evaluate_run(tiny_run, Unavailable(), ks=(3,), progress=True)
    captured = capsys.readouterr()
    assert "judging" not in captured.out + captured.err

    events = []

    class Loads(OverlapJudge):
        def prepare(self):
            events.append("prepare")

        def judge(self, pairs):
            events.append("judge")
            return super().judge(pairs)

    evaluate_run(tiny_run, Loads(), ks=(3,), progress=False)
    assert events[0] == "prepare" and events.count("prepare") == 1 and "judge" in events


class RecordingJudge(OverlapJudge):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.pairs: list[tuple[str, str]] = []

    def judge(self, pairs):
        self.pairs += [(p.perspective, p.passage) for p in pairs]
        return super().judge(pairs)


def test_a_perspective_shared_by_questions_is_judged_once_per_passage_and_no_more(tmp_path):
    # The evaluation asks the cache and the judge for each perspective's passages, merged over the questions
    # that share its text (one question even lists it twice): every needed pair once, none it does not need.
    shared, other = "cats are better pets than dogs", "dogs are better pets than cats"
    q0 = Question("q0", "Cats or dogs?", (shared, other))
    q1 = Question("q1", "Which pet?", (shared, shared))
    hits0 = [Hit(Passage(f"a{i}", f"cats pets better text {i}")) for i in range(3)]
    hits1 = [Hit(Passage(f"b{i}", f"dogs pets text {i}")) for i in range(2)] + [hits0[0]]
    run = Run.from_lists([q0, q1], [hits0, hits1], name="shared")
    judge_text = lambda h: f"{h.passage.text} {h.passage.title}"  # noqa: E731  (the study's text + " " + title)
    needed = {(p, judge_text(h)) for q, hits in ((q0, hits0), (q1, hits1)) for p in q.perspectives for h in hits}
    cache = JudgementCache(tmp_path / "c.sqlite")
    judge = RecordingJudge(threshold=0.5)
    first = evaluate_run(run, judge, ks=(3,), cache=cache, progress=False)
    assert sorted(judge.pairs) == sorted(needed) and first.stats.pairs == len(needed)
    # the same verdicts fill both questions' matrices, in each question's own order
    assert first.support["q1"][0].tolist() == first.support["q1"][1].tolist()
    assert first.support["q1"][0, 2] == first.support["q0"][0, 0]
    judge.pairs.clear()
    again = evaluate_run(run, judge, ks=(3,), cache=cache, progress=False)
    assert judge.pairs == [] and again.stats.cached == len(needed)
    assert {q: m.tolist() for q, m in again.support.items()} == {q: m.tolist() for q, m in first.support.items()}


def kind(text: str) -> int:  # 0..4, the same in every process (hash() of a str is not)
    return zlib.crc32(text.encode()) % 5


class DetailedJudge:
    """Verdicts with every kind of detail: a transcript that mentions the word, a parsed flag, the unparsed flag."""

    id, prompt_version, batch_size = "detailed", "v1", 8

    def judge(self, pairs):
        details = [{"debate": {"critic": "an answer left unparsed here was re-asked"}}, {"unparsed": False}, None,
                   {"unparsed": True, "debate": {"critic": "no answer"}}, {"seed": 1}]
        return [Verdict(i % 2 == 0, 0.5, "x", details[kind(p.passage)]) for i, p in enumerate(pairs)]


def test_unparsed_answers_are_counted_exactly_from_cached_details(tmp_path):
    run = make_run(n_questions=3, depth=6)
    cache = JudgementCache(tmp_path / "c.sqlite")
    fresh = evaluate_run(run, DetailedJudge(), ks=(5,), progress=False, cache=cache, allow_unparsed=True)
    cached = evaluate_run(run, DetailedJudge(), ks=(5,), progress=False, cache=cache, allow_unparsed=True)
    assert cached.stats.judged == 0 and fresh.stats.judged > 0
    from berds.evaluate.evaluation import pairs_for_run

    expected = sum(kind(p.passage) == 3 for rows in pairs_for_run(run, 5).values() for row in rows for p in row)
    assert 0 < expected == cached.stats.unparsed == fresh.stats.unparsed


class HashJudge:
    """Yes for about a third of pairs, P(Yes) from the pair's hash (None for some), 'unparsed' for a few."""

    id, prompt_version, batch_size = "hash-judge", "v1", 8

    def judge(self, pairs):
        out = []
        for p in pairs:
            h = int.from_bytes(hashlib.sha256((p.perspective + "|" + p.passage).encode()).digest()[:4], "big")
            out.append(Verdict(h % 3 == 0, None if h % 7 == 0 else (h % 1000) / 1000, "x",
                               {"unparsed": True} if h % 11 == 0 else None))
        return out


def test_verdicts_land_at_their_ranks_whatever_the_cache_holds(tmp_path):
    """The matrices equal a pair-by-pair judging of each question, with the cache empty, partly filled, shared
    with another run's verdicts for the same perspectives, and with a passage listed twice in one ranking."""
    import dataclasses

    from berds.evaluate.evaluation import pairs_for_run

    run = make_run(n_questions=4, depth=8)
    other = make_run(n_questions=4, depth=8, name="other")
    for qid, hits in other.hits.items():  # same perspectives, other passages: the cache holds both runs' verdicts
        other.hits[qid] = [Hit(dataclasses.replace(h.passage, id=f"o-{h.passage.id}", text=h.passage.text + " (other)"),
                               h.score) for h in hits]
    twice = Run(dict(run.questions), {q: [*hits[:3], hits[1], *hits[3:7]] for q, hits in run.hits.items()}, name="twice")

    def expected(r, k):
        judge = HashJudge()
        support, probs, unparsed = {}, {}, 0
        for qid, rows in pairs_for_run(r, k).items():
            verdicts = [[judge.judge([p])[0] for p in row] for row in rows]
            support[qid] = np.array([[v.label for v in row] for row in verdicts])
            probs[qid] = np.array([[np.nan if v.p_yes is None else v.p_yes for v in row] for row in verdicts])
            unparsed += sum(bool(v.detail) for row in verdicts for v in row)
        return support, probs, unparsed

    cache = JudgementCache(tmp_path / "c.sqlite")
    half = make_run(n_questions=2, depth=5)  # fills part of the cache first
    evaluate_run(half, HashJudge(), ks=(5,), progress=False, cache=cache, allow_unparsed=True)
    evaluate_run(other, HashJudge(), ks=(8,), progress=False, cache=cache, allow_unparsed=True)
    for r, k in ((run, 8), (run, 8), (twice, 8)):  # partly cached, then fully cached; then a repeated passage
        got = evaluate_run(r, HashJudge(), ks=(k,), progress=False, cache=cache, allow_unparsed=True, duplicates="keep")
        support, probs, unparsed = expected(r, k)
        for qid in r.questions:
            assert (got.support[qid] == support[qid]).all(), qid
            np.testing.assert_array_equal(got.p_yes[qid], probs[qid])
        assert got.stats.unparsed == unparsed and got.stats.verdicts == sum(m.size for m in support.values())
    assert got.stats.judged == 0 and got.stats.cached == got.stats.pairs


def test_a_judge_runner_that_leaves_a_pair_out_is_refused_even_when_it_answers_a_cached_one(tmp_path):
    """A runner's verdict for a pair it was not given (already cached) neither replaces the cached verdict nor
    stands in for a pair it left out: that rank was left unsupported with no error."""
    from berds.evaluate.evaluation import pairs_for_run
    from berds.evaluate.judging import judge_missing

    run = make_run(n_questions=1, depth=4)
    cache = JudgementCache(tmp_path / "c.sqlite")
    first = evaluate_run(run, HashJudge(), ks=(2,), progress=False, cache=cache, allow_unparsed=True)  # ranks 1-2
    cached = pairs_for_run(run, 2)["q0"][0][0]

    def runner(judge, pairs, cache, *, leave_out=True, **kw):
        out = judge_missing(judge, pairs, cache, **kw)
        if leave_out:
            del out[next(iter(out))]
        out[(cached.perspective, cached.passage)] = Verdict(not first.support["q0"][0, 0], 0.123)
        return out

    with pytest.raises(BerdsError, match="answered 3 of the 4 pairs"):
        evaluate_run(run, HashJudge(), ks=(4,), progress=False, cache=cache, allow_unparsed=True, judge_runner=runner)
    cache = JudgementCache(tmp_path / "c2.sqlite")
    evaluate_run(run, HashJudge(), ks=(2,), progress=False, cache=cache, allow_unparsed=True)
    got = evaluate_run(run, HashJudge(), ks=(4,), progress=False, cache=cache, allow_unparsed=True,
                       judge_runner=lambda *a, **kw: runner(*a, leave_out=False, **kw))
    assert got.support["q0"][0, 0] == first.support["q0"][0, 0] and got.p_yes["q0"][0, 0] != 0.123


def test_judge_text_digests_are_the_digests_of_the_judge_texts():
    # the evaluation hashes each passage as its judge text is built; the key must stay sha256(judge_text)
    from berds.evaluate.cache import judge_text_digests, text_digest

    passages = [Passage("a", "plain text"), Passage("b", "text", title="Title"), Passage("c", "text", title=""),
                Passage("d", "tëxt ☃", title="T", title_field=False), Passage("e", "x", title="Ünïcode")]
    for position in ("after", "before", "none"):
        assert judge_text_digests(passages, position) == [text_digest(p.judge_text(position)) for p in passages]


def test_a_cache_that_cannot_be_written_is_named_as_such(tmp_path):
    # a cache on a read-only mount (or without write permission) failed as "unable to open database file — is it
    # a berds cache file?", which sent users looking for damage in a good file
    import os
    import shutil
    import sys

    folder = tmp_path / "shared"
    folder.mkdir()
    JudgementCache(folder / "c.sqlite").close()
    code = ("from berds.evaluate.cache import JudgementCache\n"
            "try:\n    JudgementCache(%r)\nexcept Exception as e:\n    print(e)\n" % str(folder / "c.sqlite"))
    if os.geteuid() != 0:
        (folder / "c.sqlite").chmod(0o444)
        folder.chmod(0o555)
        try:
            said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env()).stdout
        finally:
            folder.chmod(0o755)
    else:  # root writes through permission bits: a read-only bind mount in a private mount namespace
        if shutil.which("unshare") is None:
            pytest.skip("needs unshare(1) to make a read-only folder as root")
        script = (f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} && "
                  f"exec {sys.executable} -c \"$CODE\"")
        done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                              env=subprocess_env(CODE=code))
        if "mount" in done.stderr or "unshare" in done.stderr:
            pytest.skip(f"cannot make a read-only mount here: {done.stderr.strip()[:100]}")
        said = done.stdout
    assert "cannot open the judgement cache" in said and "not writable" in said, said
    assert "is it a berds cache file" not in said


def test_results_and_rerankers_have_short_reprs_for_notebooks():
    """EvalResult's dataclass repr printed every support matrix; rerankers showed <... object at 0x...>."""
    from analysis_fixtures import LettersEncoder
    from berds.rerank.mmr import MMRReranker

    result = evaluate_run(make_run(), OverlapJudge(), ks=(2, 5), progress=False)
    assert repr(result) == ("EvalResult(run='tiny', judge='test-overlap|threshold=0.5', questions=3, "
                            "mrecall@2=0.333, precision@2=0.500, mrecall@5=1.000, precision@5=0.600)")
    reranker = MMRReranker(lam=0.9, encoder=LettersEncoder())
    assert repr(reranker) == "MMRReranker(lambda=0.9, first='rank1', depth=100, top=None)"


def test_a_cached_evaluation_reads_the_run_without_texts_and_writes_the_same_files(tmp_path, tiny_run):
    """evaluate_paths reads runs with each passage's judge text hashed and dropped (issue 36: eval's memory):
    the digests are those of the texts, the outputs byte-identical to an evaluation of the full run, and a run
    with a pair still to judge is read again with its texts (and judged, not refused)."""
    from berds.evaluate.cache import judge_text_digests
    from berds.evaluate.evaluation import TextsDropped, write_eval_outputs
    from berds.runs import load_run

    folder = save_run(tiny_run, tmp_path / "run")
    for position in ("after", "before"):
        sink: dict = {}
        lean = load_run(folder, judge_digests=sink, title_position=position)
        assert {(h.passage.text, h.passage.title) for hits in lean.hits.values() for h in hits} == {("", "")}
        assert [[h.passage.id for h in hits] for hits in lean.hits.values()] == \
            [[h.passage.id for h in hits] for hits in tiny_run.hits.values()]
        assert sink == {qid: judge_text_digests([h.passage for h in hits], position)
                        for qid, hits in tiny_run.hits.items()}
    cache_path = tmp_path / "c.sqlite"
    judge = CountingJudge()
    # half the pairs cached: the lean reading raises, evaluate_paths reads the texts and judges the rest
    with JudgementCache(cache_path) as cache:
        evaluate_run(tiny_run, judge, ks=(2,), cache=cache, progress=False)
        sink = {}
        with pytest.raises(TextsDropped):
            evaluate_run(load_run(folder, judge_digests=sink), judge, ks=(4,), cache=cache, progress=False,
                         digests=sink)
    seen = judge.seen
    [(_, partly, _)] = evaluate_paths([folder], judge, (2, 4), cache_path=cache_path, progress=False,
                                      out=tmp_path / "partly")
    assert partly.stats.judged == judge.seen - seen > 0
    # fully cached now: read without texts, nothing judged, the same bytes as the full run's evaluation
    [(_, cached, _)] = evaluate_paths([folder], judge, (2, 4), cache_path=cache_path, progress=False,
                                      out=tmp_path / "lean")
    assert cached.stats.judged == 0 and judge.seen - seen == partly.stats.judged
    with JudgementCache(cache_path) as cache:
        full = evaluate_run(load_run(folder), judge, ks=(2, 4), cache=cache, progress=False)
    write_eval_outputs(full, load_run(folder), tmp_path / "full")
    for name in ("metrics.json", "judgements.jsonl"):
        assert (tmp_path / "lean" / name).read_bytes() == (tmp_path / "full" / name).read_bytes()
    # (the partly cached run's metrics.json differs only in its judging counts and time)
    assert (tmp_path / "partly" / "judgements.jsonl").read_bytes() == (tmp_path / "full" / "judgements.jsonl").read_bytes()
    assert partly.per_question == full.per_question


def test_a_short_run_among_several_is_refused_before_any_is_judged(tmp_path):
    # `eval deep shallow --k 10` judged every pair of `deep` first, then stopped at `shallow`'s 5 passages
    deep = save_run(make_run(n_questions=2, depth=10, name="deep"), tmp_path / "deep")
    shallow = save_run(make_run(n_questions=2, depth=5, name="shallow"), tmp_path / "shallow")

    class NeverJudge(OverlapJudge):
        def judge(self, pairs):
            raise AssertionError("judged before the short run was refused")

    with pytest.raises(InputError, match=r"shallow.*question has 5 passages but k=10 needs 10"):
        evaluate_paths([deep, shallow], NeverJudge(), (5, 10), use_cache=False, progress=False)
    assert not (deep / "metrics.json").exists()
    results = evaluate_paths([deep, shallow], OverlapJudge(), (5, 10), use_cache=False, progress=False,
                             allow_short=True)
    assert [len(r.support) for _, r, _ in results] == [2, 2]


class RecordingHashJudge(HashJudge):
    """HashJudge that records each batch it is given."""

    def __init__(self):
        self.batches = []

    def judge(self, pairs):
        self.batches.append([(p.perspective, p.passage) for p in pairs])
        return super().judge(pairs)


def _mixed_run() -> Run:
    """Several datasets, tied scores, a passage listed twice in one ranking, one shared by two questions whose
    perspectives are the same (q0 and q3), a short question."""
    base = make_run(n_questions=7, depth=8, name="mixed")
    hits = {qid: list(h) for qid, h in base.hits.items()}
    hits["q3"][2] = hits["q0"][0]
    hits["q1"] = [Hit(h.passage, 5.0) for h in hits["q1"]]
    hits["q2"] = [*hits["q2"][:3], hits["q2"][1], *hits["q2"][3:6]]
    hits["q4"] = hits["q4"][:3]
    return Run(dict(base.questions), hits, dict(base.manifest), "mixed")


def test_a_streamed_evaluation_writes_what_the_whole_run_path_writes(tmp_path, monkeypatch):
    """evaluate_paths reads a run question by question (the streamed evaluation, issue 36: memory flat with the run)
    and must write what the whole-run path (stream=False) writes, judge the same pairs in the same batches, and
    return the same results: on a run with ties, repeats, a passage and perspectives shared by two questions, a
    short question, several datasets, unparsed verdicts and pairs missing from the cache; then fully cached."""
    import shutil

    from berds.evaluate import evaluation

    monkeypatch.setattr(evaluation, "STREAM_BATCH", 2)  # (lookups across batch boundaries)
    passes = []
    monkeypatch.setattr(evaluation, "_stream_pass",
                        lambda *a, _real=evaluation._stream_pass, **k: passes.append(1) or _real(*a, **k))
    folder = save_run(_mixed_run(), tmp_path / "run")
    with JudgementCache(tmp_path / "c.sqlite") as cache:  # part of the verdicts cached
        evaluate_run(make_run(n_questions=3, depth=4), HashJudge(), ks=(4,), cache=cache, progress=False,
                     allow_unparsed=True)
    shutil.copy(tmp_path / "c.sqlite", tmp_path / "c-whole.sqlite")
    opts = dict(ks=(3, 8), allow_short=True, allow_unparsed=True, progress=False)
    for round_ in ("partly cached", "cached"):
        got = {}
        for way, stream in (("streamed", True), ("whole", False)):
            judge = RecordingHashJudge()
            cache = tmp_path / ("c.sqlite" if stream else "c-whole.sqlite")
            [(_, result, files)] = evaluate_paths([folder], judge, cache_path=cache, out=tmp_path / round_ / way,
                                                  stream=stream, **opts)
            metrics = json.loads(files["metrics"].read_text())
            metrics["judging"].pop("seconds")
            got[way] = (judge.batches, files["judgements"].read_bytes(), files["metrics"].read_bytes(), metrics,
                        result)
        (batches, lines, raw, metrics, result), (w_batches, w_lines, w_raw, w_metrics, whole) = got.values()
        assert batches == w_batches and lines == w_lines and metrics == w_metrics
        assert result.per_question == whole.per_question and result.averages == whole.averages
        assert result.repeats == whole.repeats and result.repeats
        assert {q: m.tolist() for q, m in result.support.items()} == {q: m.tolist() for q, m in whole.support.items()}
        np.testing.assert_array_equal(np.concatenate([m.ravel() for m in result.p_yes.values()]),
                                      np.concatenate([m.ravel() for m in whole.p_yes.values()]))
        assert len(result.averages) > 2 and result.stats.unparsed > 0
        if round_ == "partly cached":  # read to find what is missing, for its texts, and to write the outputs
            assert 0 < result.stats.judged < result.stats.pairs and batches and len(passes) == 3
        else:
            assert result.stats.judged == 0 and batches == [] and raw == w_raw and len(passes) == 4


def test_a_streamed_evaluation_can_keep_no_matrices_and_leaves_nothing_when_refused(tmp_path):
    """matrices=False (berds eval): the results hold metrics only. A run refused after its first pass (a short
    question, found while reading) leaves no output folder and no temporary file behind."""
    folder = save_run(make_run(n_questions=3, depth=6), tmp_path / "run")
    cache = tmp_path / "c.sqlite"
    [(_, first, _)] = evaluate_paths([folder], HashJudge(), ks=(5,), cache_path=cache, progress=False,
                                     allow_unparsed=True, out=tmp_path / "a")
    [(_, lean, files)] = evaluate_paths([folder], HashJudge(), ks=(5,), cache_path=cache, progress=False,
                                        allow_unparsed=True, out=tmp_path / "b", matrices=False)
    assert lean.support == lean.p_yes == {} and lean.per_question == first.per_question and first.support
    assert files["judgements"].read_bytes() == (tmp_path / "a" / "judgements.jsonl").read_bytes()
    deep = save_run(make_run(n_questions=2, depth=10, name="deep"), tmp_path / "deep")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(InputError, match="question has 6 passages but k=10 needs 10"):  # (--out c/deep, c/run)
        evaluate_paths([deep, folder], HashJudge(), ks=(10,), cache_path=cache, progress=False, out=tmp_path / "c")
    with pytest.raises(InputError, match="question has 6 passages but k=10 needs 10"):  # (in place: RUN/eval/JUDGE)
        evaluate_paths([folder], HashJudge(), ks=(10,), cache_path=cache, progress=False)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if "-wal" not in p.name
                  and "-shm" not in p.name) == [p for p in before if "-wal" not in p.name and "-shm" not in p.name]


def test_a_streamed_re_evaluation_keeps_an_unchanged_judgements_file_and_rewrites_a_changed_one(tmp_path):
    """As write_eval_outputs does for the whole-run path: the same judgements leave the file alone (same inode); an
    edited file, or other verdicts in the cache, write it again, and it is what an evaluation afresh writes."""
    from berds.evaluate.evaluation import pairs_for_run
    from berds.io import sha256_file

    run = make_run(n_questions=3, depth=6)
    folder = save_run(run, tmp_path / "run")
    cache = tmp_path / "c.sqlite"
    kw = dict(ks=(5,), cache_path=cache, progress=False, allow_unparsed=True)
    [(_, _, files)] = evaluate_paths([folder], HashJudge(), **kw)  # in place: RUN/eval/hash-judge/
    judgements = files["judgements"]
    first, inode = judgements.read_bytes(), judgements.stat().st_ino
    evaluate_paths([folder], HashJudge(), **kw)
    assert judgements.stat().st_ino == inode and judgements.read_bytes() == first
    judgements.write_bytes(first.replace(b'"label": 1', b'"label": 0', 1))  # same size, other bytes
    evaluate_paths([folder], HashJudge(), **kw)
    assert judgements.read_bytes() == first
    pair = pairs_for_run(run, 5)["q0"][0][0]  # another verdict for one pair: another key, the file written again
    with JudgementCache(cache) as c:
        c.put_many(HashJudge.id, HashJudge.prompt_version, [pair], [Verdict(True, 0.123, "x")])
    [(_, again, _)] = evaluate_paths([folder], HashJudge(), **kw)
    assert judgements.read_bytes() != first and again.stats.judged == 0
    record = json.loads((judgements.parent / "metrics.json").read_text())["judgements_file"]
    assert record["sha256"] == sha256_file(judgements)
    [(_, _, fresh)] = evaluate_paths([folder], HashJudge(), out=tmp_path / "fresh", **kw)
    assert fresh["judgements"].read_bytes() == judgements.read_bytes()
