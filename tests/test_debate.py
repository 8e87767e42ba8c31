"""The devil's-advocate judge: rounds batched over all open pairs, the NO ISSUE stop rule, tie-breakers,
transcripts in the cache, and counts of answers the critic changed — on the scripted judge LLM (in
process and behind the real server), and on a tiny random-weight Mistral through transformers."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from berds.errors import BerdsError
from berds.judges.debate import DebateJudge, critic_accepts, debate_summary
from berds.judges import LLMJudge, load_judge
from berds.trust.labels import read_labelled_pairs
from conftest import berds_cmd, subprocess_env
from judge_trust_fixtures import ScriptedJudgeLLM, pair_hash, served, write_demo_subset
from llm_fixtures import tiny_mistral  # noqa: F401  (a pytest fixture)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    path = write_demo_subset(tmp_path_factory.mktemp("labels") / "pairs.tsv", ("demo-01", "demo-02"))
    return read_labelled_pairs(path)


def wrong_first(labelled, rate):
    return np.array([pair_hash(p.perspective, p.document, "errors") < rate for p in labelled])


def test_critic_reply_parsing():
    assert critic_accepts("NO ISSUE") and critic_accepts("  **No issue.**") and critic_accepts("no issues here")
    assert critic_accepts("I checked it twice. NO ISSUE")
    assert not critic_accepts("There is no issue with the tone, but the answer is wrong.")
    assert not critic_accepts("The answer Yes looks wrong.")


def test_critic_fixes_wrong_answers_in_batched_rounds(labelled):
    llm = ScriptedJudgeLLM(labelled.path, errors=0.3)
    judge = DebateJudge(LLMJudge(llm), rounds=3)
    pairs, gold = labelled.judge_pairs(), labelled.labels
    verdicts = judge.judge(pairs)
    wrong = wrong_first(labelled, 0.3)
    n, n_wrong = len(pairs), int(wrong.sum())
    assert 5 < n_wrong < n
    # round 0 answers all; round 1: the critic reads all, the scorer revises the wrong ones;
    # round 2: the critic accepts every revision; nothing is left for round 3
    assert llm.calls == [n, n, n_wrong, n_wrong]
    assert [v.label for v in verdicts] == gold.tolist()
    summary = debate_summary(verdicts, gold)
    assert summary.changed_yes_to_no == int((wrong & ~gold).sum())
    assert summary.changed_no_to_yes == int((wrong & gold).sum())
    assert (summary.changes_fixed, summary.changes_broke) == (n_wrong, 0)
    assert summary.closed_no_issue == n and summary.ended_max_rounds == 0
    assert summary.mean_rounds == pytest.approx((n + n_wrong) / n)
    assert judge.stats["changed_yes_to_no"] == summary.changed_yes_to_no
    i = int(np.flatnonzero(wrong)[0])
    roles = [(t["round"], t["role"]) for t in verdicts[i].detail["debate"]["transcript"]]
    assert roles == [(0, "scorer"), (1, "critic"), (1, "scorer"), (2, "critic")]
    assert verdicts[i].detail["debate"]["transcript"][-1]["text"] == "NO ISSUE"
    json.dumps([v.detail for v in verdicts])  # transcripts are JSON (the cache stores them)


def test_max_rounds_and_tie_breakers(labelled):
    pairs, gold = labelled.judge_pairs(), labelled.labels
    first = gold != wrong_first(labelled, 0.3)
    stubborn = ScriptedJudgeLLM(labelled.path, errors=0.3, critic="always-object", revision="stubborn")
    judge = DebateJudge(LLMJudge(stubborn), rounds=2)
    verdicts = judge.judge(pairs)
    assert stubborn.calls == [len(pairs)] * 5  # every pair stays open for both rounds
    assert [v.label for v in verdicts] == first.tolist()
    assert all(v.detail["debate"]["stop"] == "max-rounds" and v.detail["debate"]["tie_breaker"] is None for v in verdicts)

    fair = LLMJudge(ScriptedJudgeLLM(labelled.path))
    judge = DebateJudge(LLMJudge(ScriptedJudgeLLM(labelled.path, errors=0.3, critic="always-object",
                                                  revision="stubborn")), rounds=2, tie_breaker=fair)
    verdicts = judge.judge(pairs)
    assert [v.label for v in verdicts] == gold.tolist() and judge.stats["tie_breaks"] == len(pairs)
    assert verdicts[0].detail["debate"]["transcript"][-1]["role"] == "tie_breaker"
    assert judge.id == f"debate(rounds=2,critic=self,tie={fair.id}[{fair.prompt_version}])>{judge.inner.id}"

    # a scorer that flips on every objection: answers a, not a, a, not a ...
    for rounds, expected in ((2, first), (3, ~first)):  # majority of (a, ¬a, a) = a; (a, ¬a, a, ¬a) ties -> latest
        flipper = ScriptedJudgeLLM(labelled.path, errors=0.3, critic="always-object", revision="flip")
        verdicts = DebateJudge(LLMJudge(flipper), rounds=rounds, tie_breaker="majority").judge(pairs)
        assert [v.label for v in verdicts] == expected.tolist(), rounds


def test_a_separate_critic_llm(labelled):
    scorer = ScriptedJudgeLLM(labelled.path, errors=0.3)
    critic = ScriptedJudgeLLM(labelled.path, critic="always-object", id="harsh-critic")
    judge = DebateJudge(LLMJudge(scorer), rounds=1, critic=critic)
    verdicts = judge.judge(labelled.judge_pairs())
    assert [v.label for v in verdicts] == labelled.labels.tolist()  # every answer revised to the truth
    assert critic.calls == [len(labelled)] and scorer.calls == [len(labelled), len(labelled)]
    assert "critic=harsh-critic" in judge.id


def test_every_debate_setting_that_changes_a_verdict_changes_the_id(labelled):
    """The id keys the judgement cache: a shorter critic reply or a tie-breaker asked with another prompt gives
    other verdicts, and shared the default debate's id (cached verdicts of one were served for the other)."""
    def debate(**options):
        return DebateJudge(LLMJudge(ScriptedJudgeLLM(labelled.path)), **options)

    default = debate()
    assert debate(critic_max_new_tokens=96).id == default.id  # the default adds nothing: earlier ids stay valid
    assert debate(critic_max_new_tokens=8).id != default.id
    zero, one = (LLMJudge(ScriptedJudgeLLM(labelled.path), prompt=p) for p in ("zero-shot", "one-shot"))
    assert zero.id == one.id  # (an LLM judge's prompt is in its prompt version, not its id)
    assert debate(tie_breaker=zero).id != debate(tie_breaker=one).id
    with pytest.raises(BerdsError, match="critic_max_new_tokens"):
        debate(critic_max_new_tokens=0)


def test_load_judge_routes_options_and_rejects_judges_without_an_llm():
    judge = load_judge("debate:openai:some-model", rounds=4, tie_breaker="majority", base_url="http://127.0.0.1:9/v1")
    assert isinstance(judge, DebateJudge) and judge.rounds == 4 and judge.tie_breaker == "majority"
    assert judge.inner.llm.base_url == "http://127.0.0.1:9/v1"
    assert judge.id.startswith("debate(rounds=4,critic=self,tie=majority)>openai:some-model@127.0.0.1:9/v1")
    with pytest.raises(BerdsError, match="needs an LLM scorer"):
        load_judge("debate:judges_for_tests:OverlapJudge")
    with pytest.raises(BerdsError, match="rounds must be a positive integer"):
        load_judge("debate:openai:m", rounds=0, base_url="http://127.0.0.1:9/v1")


@pytest.mark.network
def test_berds_eval_with_a_debate_judge_behind_the_server_keeps_transcripts_in_the_cache(labelled, tmp_path):
    from berds.evaluate.cache import JudgementCache
    from berds.trust.validate import validate
    from berds.runs import save_run
    from berds.types import Hit, Passage, Question, Run

    by_q: dict = {}
    for p in labelled:
        by_q.setdefault(p.id, (p.question, []))[1].append(p)
    questions, hits = [], []
    for qid, (text, rows) in by_q.items():
        perspectives = tuple(dict.fromkeys(r.perspective for r in rows))
        docs = list(dict.fromkeys(r.document for r in rows))[:5]
        questions.append(Question(qid, text, perspectives))
        # records without a title field: the judge sees the document exactly (no " " + title)
        hits.append([Hit(Passage(f"{qid}-{i}", d, title_field=False), 5.0 - i) for i, d in enumerate(docs)])
    run_dir = save_run(Run.from_lists(questions, hits, name="demo"), tmp_path / "run")
    cache = tmp_path / "cache.sqlite"
    with served("judge_trust_fixtures:ScriptedJudgeLLM", labelled.path, options=["errors=0.3"],
                extra_args=["--served-model-name", "scripted"], log_dir=tmp_path) as url:
        proc = subprocess.run(berds_cmd("eval", str(run_dir), "--judge", "debate:openai:scripted", "--rounds", "3",
                                        "-o", f"base_url={url}", "--k", "5", "--cache", str(cache), "-q"),
                              capture_output=True, text=True, env=subprocess_env(), timeout=300)
        assert proc.returncode == 0, proc.stderr
        judge_id = json.loads((run_dir / "metrics.json").read_text())["judge"]["id"]
        assert judge_id.startswith("debate(rounds=3,critic=self,tie=none)>openai:scripted@")
        with JudgementCache(cache) as c:
            ((jid, prompt, count),) = [row for row in c.judges() if row[0] == judge_id]
            assert count == 20 and prompt.endswith("+debate-v1:berds-debate-critic-v1")
            # all pairs of the run, read back from the cache with their transcripts
            pairs = [p for p in labelled.judge_pairs() if p.passage in {h.passage.text for hs in hits for h in hs}]
            cached = c.get_many(jid, prompt, pairs)
            assert all(v is not None and v.detail["debate"]["transcript"][0]["role"] == "scorer" for v in cached)
            # the critic corrected every wrong first answer
            truth = {(p.perspective, p.document): p.label for p in labelled}
            assert all(v.label == truth[(p.perspective, p.passage)] for p, v in zip(pairs, cached))
            # validating the same judge reuses those 20 cached verdicts, judges the other pairs, counts the changes
            judge = load_judge("debate:openai:scripted", rounds=3, base_url=url)
            report = validate(labelled, [judge], cache=c, n_boot=0, progress=False)
        (row,) = report.judges
        wrong = wrong_first(labelled, 0.3)
        assert row.debate.changes_fixed == int(wrong.sum()) and row.debate.changes_broke == 0
        assert row.metrics["accuracy"] == 1.0


class CountingLLM:
    """Passes every call to a real LLM backend and records the batch size of each ``generate()`` call."""

    def __init__(self, inner):
        self.inner, self.id, self.calls = inner, inner.id, []

    def generate(self, prompts, **options):
        self.calls.append(len(prompts))
        return self.inner.generate(prompts, **options)


def test_debate_on_a_tiny_transformers_model(labelled, tiny_mistral, tmp_path):
    from berds.evaluate.cache import JudgementCache
    from berds.evaluate.judging import judge_missing
    from berds.llm.transformers_backend import TransformersLLM

    llm = CountingLLM(TransformersLLM(str(tiny_mistral), device="cpu", batch_size=8))
    judge = DebateJudge(LLMJudge(llm, max_new_tokens=3), rounds=2, critic_max_new_tokens=4)
    pairs = labelled.subset(range(0, len(labelled), 15)).judge_pairs()  # 6 pairs
    with JudgementCache(tmp_path / "c.sqlite") as cache:
        judged = judge_missing(judge, pairs, cache, batch_size=len(pairs), progress=False)
        stored = cache.get_many(judge.id, judge.prompt_version, pairs)
    # a random model never says NO ISSUE: both rounds run, each as one batched call per role over all pairs
    assert llm.calls == [len(pairs)] * 5
    for p, v in zip(pairs, stored):
        assert v.detail == judged[(p.perspective, p.passage)].detail
        assert [t["role"] for t in v.detail["debate"]["transcript"]] == ["scorer", "critic", "scorer", "critic", "scorer"]
        assert v.detail["debate"]["stop"] == "max-rounds"
    summary = debate_summary(stored)
    assert summary.changed_yes_to_no + summary.changed_no_to_yes == sum(
        v.detail["debate"]["initial"] != v.label for v in stored)
