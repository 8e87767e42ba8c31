"""The bias audit must find a bias injected on purpose — and must not find one in an unbiased judge.

Judges: the scripted judge LLM (``judge_trust_fixtures``), unbiased or with an injected bias, behind the
real OpenAI-compatible server process or in process; a tiny random-weight Mistral through transformers;
the embedded judge. Plus the statistics (Fisher, Kendall's τ-b) and the stance-corrected sycophancy Δ
checked by hand.
"""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest

from berds.errors import BerdsError, UnknownNameError
from berds.trust.audit import (
    VARIANTS, InputTransformJudge, audit, fisher_exact, holm_adjust, kendall_tau_b, negate_statement, p_label_from_logprobs,
    parse_label_word, prompt_variant, ranks_desc, reverse_sentences, variant_judge,
)
from berds.judges.llm_judge import LLMJudge
from berds.trust.labels import read_labelled_pairs
from berds.evaluate.metrics import mrecall_at_k
from berds.judges.prompts import (
    ONE_SHOT, PARAPHRASE_ONE_SHOT, PARAPHRASE_ZERO_SHOT, PLAIN_ONE_SHOT, ZERO_SHOT, PromptTemplate,
)
from berds.types import Hit, JudgePair, Passage, Question, Run
from conftest import berds_cmd, subprocess_env
from judge_trust_fixtures import ScriptedJudgeLLM, pair_hash, served, write_demo_subset
from judge_trust_fixtures import embedded_judge, embedded_small  # noqa: F401  (pytest fixtures)
from llm_fixtures import tiny_mistral  # noqa: F401  (a pytest fixture)

# ----------------------------------------------------------------------------------- variants


def test_prompt_variants_rewrite_the_study_prompt():
    t, pos, neg = prompt_variant(ZERO_SHOT, "labels-no-yes")
    assert (pos, neg) == ("Yes", "No") and 'Answer with only "No" or "Yes".' in t.template
    assert 'can only answer with "No" or "Yes".' in t.template  # the system turn too
    assert t.version == "berds-study-chat-v1~labels-no-yes" and t.form == "study-chat"
    t, pos, neg = prompt_variant(ZERO_SHOT, "labels-a-b")
    assert (pos, neg) == ("A", "B") and "Does the document support the statement? (A) Yes (B) No" in t.template
    assert '"Yes"' not in t.template and 'the answer is "B"' in t.template
    t, *_ = prompt_variant(ZERO_SHOT, "statement-first")
    assert t.template.index("Statement: [Doc 2]") < t.template.index("Document: [Doc 1]")
    # the one-shot example is rewritten too: its answer in the new words, its blocks in the new order
    t, pos, _ = prompt_variant(ONE_SHOT, "labels-true-false")
    messages = t.render(document="DOC", perspective="PER")
    assert messages[2] == {"role": "assistant", "content": "False"}  # the Prop. 19 example's "No"
    assert t.template.count("True or False: the document supports the statement.") == 2
    t, *_ = prompt_variant(ONE_SHOT, "statement-first")
    assert t.template.index("Statement for Example 1:") < t.template.index("Document for Example 1:")
    rendered = t.render(document="DOC", perspective="PER")[-1]["content"]
    assert rendered.startswith("Statement: PER\nDocument: DOC\nInstruction: ")
    t, *_ = prompt_variant(PLAIN_ONE_SHOT, "labels-true-false")
    assert "Answer for Example 1:\nFalse\n" in t.template and t.plain
    # berds' earlier paraphrase prompts keep their variants
    t, pos, neg = prompt_variant(PARAPHRASE_ZERO_SHOT, "labels-no-yes")
    assert 'Answer with "No" or "Yes" only.' in t.template and t.version == "berds-t14-zeroshot-v1~labels-no-yes"
    t, pos, _ = prompt_variant(PARAPHRASE_ONE_SHOT, "labels-true-false")
    assert "Answer: True\n\nNow the real task." in t.template and t.template.count("True or False:") == 2
    t, *_ = prompt_variant(PARAPHRASE_ONE_SHOT, "statement-first")
    assert t.template.index("Perspective: Protected") < t.template.index("Document: Cities")
    # a custom prompt without the study's wording: the variant does not apply
    custom = PromptTemplate("mine-v1", "Doc {document} / claim {perspective}? yes or no")
    assert prompt_variant(custom, "labels-a-b") is None and prompt_variant(custom, "statement-first") is None


def test_answer_word_parsing_and_probabilities():
    assert parse_label_word(" (A) because ...", "A", "B") == (True, True)
    assert parse_label_word("false.", "True", "False") == (False, True)
    assert parse_label_word("Answer: A", "A", "B") == (False, False)
    p = p_label_from_logprobs({"▁A": math.log(0.3), "A": math.log(0.1), "B": math.log(0.2), "C": math.log(0.4)}, "A", "B")
    assert p == pytest.approx(0.4 / 0.6)
    assert p_label_from_logprobs({"x": 0.0}, "A", "B") is None


def test_input_transforms():
    assert negate_statement("Protected bike lanes make streets safer.") == \
        "It is not the case that protected bike lanes make streets safer."
    assert negate_statement("NASA should fund it.") == "It is not the case that NASA should fund it."
    assert negate_statement("I think so.") == "It is not the case that I think so."
    assert reverse_sentences("One two. Three four! Five six? A Title") == "Five six? Three four! One two. A Title"
    assert reverse_sentences("no sentence end") == "no sentence end"
    with pytest.raises(UnknownNameError, match="Did you mean .labels-a-b."):
        variant_judge(object(), "labels-a-c")


def test_fisher_exact_kendall_tau_and_ranks_by_hand():
    # the classic 2x2 table [[1, 9], [11, 3]]: two-sided p = 0.0027594561852...
    assert fisher_exact(1, 9, 11, 3) == pytest.approx(0.0027594561852200836, rel=1e-9)
    # [[3, 1], [1, 3]]: P(a) for a = 0..4 is 1, 16, 36, 16, 1 over 70; two-sided sums those <= 16/70
    assert fisher_exact(3, 1, 1, 3) == pytest.approx(34 / 70)
    assert fisher_exact(0, 0, 0, 0) == 1.0
    assert kendall_tau_b([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(2 * 3))
    assert math.isnan(kendall_tau_b([1, 2], [5, 5]))
    assert ranks_desc([0.5, 0.9, 0.5, 0.1]) == [2.5, 1.0, 2.5, 4.0]
    # Holm: sorted 0.01, 0.02, 0.04, 0.5 -> 4*0.01, 3*0.02, max(0.06, 2*0.04), max(0.08, 1*0.5)
    assert holm_adjust([0.5, 0.01, 0.04, 0.02]) == pytest.approx([0.5, 0.04, 0.08, 0.06])
    assert holm_adjust([]) == []


# ----------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def labelled_path(tmp_path_factory):
    return write_demo_subset(tmp_path_factory.mktemp("labels") / "pairs.tsv")


@pytest.fixture(scope="module")
def labelled(labelled_path):
    return read_labelled_pairs(labelled_path)


@pytest.fixture(scope="module")
def unbiased_server(labelled_path, tmp_path_factory):
    with served("judge_trust_fixtures:ScriptedJudgeLLM", str(labelled_path), extra_args=["--served-model-name", "fair"],
                log_dir=tmp_path_factory.mktemp("fair")) as url:
        yield url


@pytest.fixture(scope="module")
def label_order_server(labelled_path, tmp_path_factory):
    """Says Yes to half the gold negatives (by pair hash) when the instruction lists "No" before "Yes"."""
    with served("judge_trust_fixtures:ScriptedJudgeLLM", str(labelled_path), options=["bias=label-order", "rate=0.5"],
                extra_args=["--served-model-name", "biased"], log_dir=tmp_path_factory.mktemp("biased")) as url:
        yield url


def http_judge(url: str, name: str) -> LLMJudge:
    from berds.llm.openai_backend import OpenAILLM

    return LLMJudge(OpenAILLM(name, base_url=url, concurrency=8), top_logprobs=2)


def label_order_hits(labelled, rate=0.5):
    """Pairs the label-order bias turns from No to Yes: gold negatives whose bias hash is below ``rate``."""
    return np.array([not p.label and pair_hash(p.perspective, p.document, "bias") < rate for p in labelled])


def make_runs(labelled) -> dict[str, Run]:
    """Three runs over the labelled questions, top 5 each, from documents with known labels:
    ``diverse`` covers both perspectives of every question, ``half`` covers them for half the questions,
    ``background`` holds only passages that support neither perspective."""
    by_q: dict[str, dict] = {}
    for p in labelled:
        entry = by_q.setdefault(p.id, {"text": p.question, "persp": [], "docs": {}})
        if p.perspective not in entry["persp"]:
            entry["persp"].append(p.perspective)
        entry["docs"].setdefault(p.document, set())
        if p.label:
            entry["docs"][p.document].add(entry["persp"].index(p.perspective))
    runs: dict[str, list] = {"diverse": [], "half": [], "background": []}
    questions = []
    for qi, (qid, e) in enumerate(sorted(by_q.items())):
        questions.append(Question(qid, e["text"], tuple(e["persp"])))
        neither = [d for d, s in e["docs"].items() if not s]
        first = [d for d, s in e["docs"].items() if s == {0}]
        second = [d for d, s in e["docs"].items() if s == {1}]
        diverse = [first[0], second[0]] + neither[:3]
        half = diverse if qi % 2 == 0 else [first[0], first[1]] + neither[:3]
        for name, docs in (("diverse", diverse), ("half", half), ("background", neither[:5])):
            runs[name].append([Hit(Passage(f"{qid}-{name}-{i}", d), score=5.0 - i) for i, d in enumerate(docs)])
    return {name: Run.from_lists(questions, hits, name=name) for name, hits in runs.items()}


# ----------------------------------------------------------------------------------- the audit


@pytest.mark.network
def test_unbiased_judge_behind_the_server_shows_no_bias(labelled, unbiased_server):
    report = audit(labelled, http_judge(unbiased_server, "fair"), runs=make_runs(labelled), k=5, progress=False)
    assert report.biases_found == []
    assert report.base_metrics["accuracy"] == 1.0
    for v in report.variants:
        assert v.applicable
        if v.expectation == "same":
            assert (v.yes_to_no, v.no_to_yes, v.unparsed) == (0, 0, 0), v.name
            assert v.runs.tau == pytest.approx(1.0) and not v.runs.ranking_changed
        else:  # negation: every supported statement becomes unsupported once negated
            assert v.negation_still_yes == 0 and v.negation_base_true_positives == int(labelled.labels.sum())
    assert report.base_runs == {"diverse": 1.0, "half": 0.5, "background": 0.0}
    assert report.stance.fisher_fp_p == 1.0 and not report.stance.biased


@pytest.mark.network
def test_label_order_bias_is_found_with_exact_counts_and_its_effect_on_runs(labelled, label_order_server):
    runs = make_runs(labelled)
    report = audit(labelled, http_judge(label_order_server, "biased"), runs=runs, k=5, progress=False)
    assert report.biases_found == ["labels-no-yes"]
    v = report.variant("labels-no-yes")
    hits = label_order_hits(labelled)
    assert (v.yes_to_no, v.no_to_yes) == (0, int(hits.sum())) and hits.sum() > 20
    assert v.mcnemar_answers.exact_p == pytest.approx(2 / 2 ** int(hits.sum()))
    assert v.delta("positive_share") == pytest.approx(hits.mean())
    assert v.delta("accuracy") == pytest.approx(-hits.mean())
    for other in ("statement-first", "labels-true-false", "labels-a-b", "sentence-order"):
        assert report.variant(other).flips == 0 and not report.variant(other).biased
    # MRecall@5 under the No/Yes prompt, computed here from the labels and the bias hashes
    hit_pairs = {(p.perspective, p.document) for p, h in zip(labelled, hits) if h}
    gold_pairs = {(p.perspective, p.document) for p in labelled if p.label}
    expected = {}
    for name, run in runs.items():
        scores = []
        for qid, q in run.questions.items():
            docs = [h.passage.text for h in run.hits[qid]]
            support = np.array([[(pp, d) in gold_pairs or (pp, d) in hit_pairs for d in docs] for pp in q.perspectives])
            scores.append(mrecall_at_k(support, 5))
        expected[name] = float(np.mean(scores))
    assert v.runs.variant == expected
    assert v.runs.base == {"diverse": 1.0, "half": 0.5, "background": 0.0}
    assert expected["background"] > 0.5 and v.runs.ranking_changed  # the bias reorders the retrievers
    expected_tau = kendall_tau_b([1.0, 0.5, 0.0], list(expected.values()))  # NaN when the bias makes all equal
    assert v.runs.tau == pytest.approx(expected_tau, nan_ok=True)


@pytest.mark.network
def test_cli_audit_writes_the_report_and_names_the_bias(labelled_path, label_order_server, tmp_path):
    from berds.runs import save_run

    labelled = read_labelled_pairs(labelled_path)
    run_dirs = [save_run(run, tmp_path / name) for name, run in make_runs(labelled).items()]
    out = tmp_path / "audit.json"
    args = ["judge", "audit", "--labels", str(labelled_path), "--judge", "openai:biased", "-o", f"base_url={label_order_server}",
            "--variant", "labels-no-yes", "--variant", "labels-a-b", "--out", str(out), "--cache", str(tmp_path / "c.sqlite"), "-q"]
    for d in run_dirs:
        args += ["--run", str(d)]
    proc = subprocess.run(berds_cmd(*args), capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "biases found: labels-no-yes" in proc.stdout
    data = json.loads(out.read_text())
    assert [v["name"] for v in data["variants"]] == ["labels-no-yes", "labels-a-b"]
    assert data["variants"][0]["flips"] == {"yes_to_no": 0, "no_to_yes": int(label_order_hits(labelled).sum())}
    assert data["variants"][0]["runs"]["ranking_changed"] is True
    assert data["variants"][1]["bias_found"] is False
    bad = subprocess.run(berds_cmd("judge", "audit", "--labels", str(labelled_path), "--judge", "embedded",
                                   "--variant", "label-no-yes"), capture_output=True, text=True, env=subprocess_env())
    assert bad.returncode == 2 and "unknown audit variant 'label-no-yes'. Did you mean 'labels-no-yes'" in bad.stderr


def test_negation_blind_judge_is_flagged_and_nothing_else(labelled):
    report = audit(labelled, LLMJudge(ScriptedJudgeLLM(labelled.path, bias="negation-blind")), progress=False)
    assert report.biases_found == ["negation"]
    v = report.variant("negation")
    assert v.negation_still_yes == v.negation_base_true_positives == int(labelled.labels.sum())
    assert v.yes_to_no == 0


def test_stance_bias_is_found_and_the_sycophancy_delta_corrected(labelled):
    from berds.trust.stance_corrected import stance_corrected_sycophancy, stance_error_rates
    from berds.evaluate.analyses.sycophancy import sycophancy_result
    from berds.evaluate.evaluation import evaluate_run

    biased = LLMJudge(ScriptedJudgeLLM(labelled.path, bias="stance-yes", rate=0.5))
    report = audit(labelled, biased, variants=["labels-no-yes"], progress=False)
    assert report.biases_found == ["stance"]
    support_fp = sum(1 for p in labelled if p.stance == "support" and not p.label
                     and pair_hash(p.perspective, p.document, "bias") < 0.5)
    assert report.stance.counts["support"]["fp"] == support_fp > 10
    assert report.stance.counts["oppose"]["fp"] == 0
    assert report.stance.fisher_fp_p == pytest.approx(
        fisher_exact(support_fp, 54 - support_fp, 0, 54))  # 54 gold negatives per stance in this subset

    # Sycophancy runs: the query is one side's perspective; each question's top 6 leans to the query's side.
    pred = np.array([v.label for v in biased.judge(labelled.judge_pairs())])
    rates = stance_error_rates(labelled, pred)
    assert rates["support"].specificity == pytest.approx(1 - support_fp / 54) and rates["oppose"].specificity == 1.0
    runs = {}
    for side in ("supporting", "opposing"):
        questions, hits = [], []
        for q_run in make_runs(labelled)["diverse"].questions.values():
            sup, opp = q_run.perspectives
            docs = {p.document: set() for p in labelled if p.id == q_run.id}
            for p in labelled:
                if p.id == q_run.id and p.label:
                    docs[p.document].add(p.perspective)
            mine = [d for d, s in docs.items() if s == {sup if side == "supporting" else opp}]
            theirs = [d for d, s in docs.items() if s == {opp if side == "supporting" else sup}]
            neither = [d for d, s in docs.items() if not s]
            top = mine[:3] + theirs[:1] + neither[:2]
            questions.append(Question(q_run.id, sup if side == "supporting" else opp, (sup, opp)))
            hits.append([Hit(Passage(f"{q_run.id}-{side}-{i}", d), 6.0 - i) for i, d in enumerate(top)])
        runs[side] = Run.from_lists(questions, hits, name=side)
    exact = LLMJudge(ScriptedJudgeLLM(labelled.path))

    def delta(judge):
        return sycophancy_result("tiny", {s: evaluate_run(runs[s], judge, (6,), progress=False).support
                                          for s in ("supporting", "opposing")}, 6)

    truth, observed = delta(exact), delta(biased)
    corrected = stance_corrected_sycophancy(observed, labelled, pred, n_boot=200, seed=0)
    sup = rates["support"]
    for t, o, c in zip(truth.rows, observed.rows, corrected.rows):
        assert t["query"] == o["query"] == c["query"]
        # the judge's extra Yes on supporting statements inflates p (the supporting perspective's count) ...
        assert o["p_docs"] > t["p_docs"] and o["n_docs"] == t["n_docs"] and o["delta"] > t["delta"]
        # ... and the correction, with the rates measured on the labelled file, takes the excess out of p
        # (Rogan-Gladen with the supporting stance's rates; on 24 documents it can overshoot the truth)
        expected = (o["p_docs"] / 24 + sup.specificity - 1) / (sup.sensitivity + sup.specificity - 1)
        assert c["p_corrected"] == pytest.approx(min(1.0, max(0.0, expected))) and c["p_corrected"] < c["p_share"]
        # Δ corrected is lower, or undefined when no supporting document is left (π_p clipped to 0)
        assert c["delta_corrected"] < o["delta"] or (c["p_corrected"] == 0.0 and math.isnan(c["delta_corrected"]))
        # the opposing perspective's count: no stance errors, so its share is unchanged
        assert c["n_corrected"] == pytest.approx(c["n_share"])
        lo, hi = c["delta_corrected_ci95"]
        assert math.isnan(c["delta_corrected"]) or lo <= c["delta_corrected"] <= hi


def test_rogan_gladen_and_corrected_delta_by_hand():
    from berds.trust.stance_corrected import StanceErrorRates, corrected_delta, rogan_gladen

    assert rogan_gladen(0.3, 0.8, 0.9) == pytest.approx(0.2 / 0.7)
    assert rogan_gladen(0.05, 0.8, 0.9) == 0.0 and rogan_gladen(0.99, 0.8, 0.9) == 1.0  # clipped
    assert math.isnan(rogan_gladen(0.3, 0.5, 0.5))  # no better than chance: undefined
    rates = StanceErrorRates("support", tp=8, fn=2, tn=9, fp=1)  # sensitivity 0.8, specificity 0.9
    row = corrected_delta(30, 10, 100, rates)
    assert row["delta"] == pytest.approx(20 / 30)
    assert row["p_corrected"] == pytest.approx(0.2 / 0.7) and row["n_corrected"] == 0.0
    assert row["delta_corrected"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------------- other real judges


def test_tiny_transformers_judge_runs_prompt_variants(labelled, tiny_mistral, tmp_path):
    from berds.evaluate.cache import JudgementCache
    from berds.llm.transformers_backend import TransformersLLM

    small = labelled.subset(range(0, len(labelled), 30))  # 6 pairs
    judge = LLMJudge(TransformersLLM(str(tiny_mistral), device="cpu", batch_size=8), top_logprobs=5, max_new_tokens=3)
    with JudgementCache(tmp_path / "c.sqlite") as cache:
        report = audit(small, judge, variants=["labels-no-yes", "labels-a-b"], cache=cache,
                       progress=False)
        versions = {prompt for _, prompt, _ in cache.judges()}
        for v in report.variants:
            assert v.applicable and v.prompt_version in versions
            cached = cache.get_many(v.judge_id, v.prompt_version, small.judge_pairs())
            base = cache.get_many(judge.id, judge.prompt_version, small.judge_pairs())
            assert v.yes_to_no == sum(b.label and not c.label for b, c in zip(base, cached))
            assert v.no_to_yes == sum(c.label and not b.label for b, c in zip(base, cached))
    assert report.variant("labels-a-b").judge_id.endswith("|answers=A/B")


class _NotAnLLMJudge:
    """A judge without an LLM (prompt variants cannot apply): says Yes when the perspective's first word
    occurs in the passage."""

    id = "first-word-judge"
    prompt_version = "none"

    def judge(self, pairs):
        from berds.types import Verdict

        return [Verdict(p.perspective.split()[0].lower() in p.passage.lower()) for p in pairs]


def test_prompt_variants_are_not_applicable_to_a_judge_without_an_llm(labelled):
    report = audit(labelled, _NotAnLLMJudge(), progress=False)
    kinds = {v.name: v.applicable for v in report.variants}
    assert kinds == {name: VARIANTS[name].kind == "input" for name in VARIANTS}
    assert isinstance(variant_judge(_NotAnLLMJudge(), "negation"), InputTransformJudge)
    pair = JudgePair("Cats purr.", "Cats purr a lot. Dogs bark.")
    seen = InputTransformJudge(_NotAnLLMJudge(), "sentence-order").transform(pair)
    assert seen.passage == "Dogs bark. Cats purr a lot." and seen.perspective == pair.perspective
    with pytest.raises(BerdsError, match="unknown input transform"):
        InputTransformJudge(_NotAnLLMJudge(), "shuffle")


@pytest.fixture(scope="module")
def last_label_server(tmp_path_factory):
    """A tiny Mistral with hand-set weights that answers whichever of Yes/No its prompt lists last,
    served by the real server process through the transformers backend."""
    from judge_trust_fixtures import build_last_label_mistral

    folder = build_last_label_mistral(tmp_path_factory.mktemp("last-label"))
    with served("transformers", str(folder), options=["device=cpu", "batch_size=16"],
                extra_args=["--served-model-name", "last-label"], log_dir=tmp_path_factory.mktemp("ll")) as url:
        yield url


@pytest.mark.network
def test_audit_finds_the_position_bias_built_into_a_transformer(labelled, last_label_server):
    import re

    from berds.llm.openai_backend import OpenAILLM

    # documents and perspectives free of the words Yes/No, so the only label words are the instruction's
    clean = [i for i, p in enumerate(labelled) if not re.search(r"\b(Yes|No)\b", p.document + p.perspective)]
    small = labelled.subset(clean[::10])
    # berds' earlier paraphrase prompt: it names the labels once ('Answer with "Yes" or "No" only.'); the study's
    # prompt ends its instruction with 'The answer is "Yes" only if ...', so "Yes" is always last there
    judge = LLMJudge(OpenAILLM("last-label", base_url=last_label_server, concurrency=8), max_new_tokens=2, top_logprobs=5,
                     prompt="paraphrase-zero-shot", parse="strict")
    report = audit(small, judge, progress=False)
    assert report.base_metrics["positive_share"] == 0.0  # 'Answer with "Yes" or "No"': No is last -> always No
    v = report.variant("labels-no-yes")                   # '"No" or "Yes"': Yes is last -> always Yes
    assert (v.yes_to_no, v.no_to_yes) == (0, len(small)) and v.biased
    assert v.delta("positive_share") == 1.0 and v.delta("accuracy") == pytest.approx(2 * small.labels.mean() - 1)  # acc: 1-pos -> pos
    assert report.biases_found == ["labels-no-yes"]
    assert report.variant("statement-first").flips == 0
    # it never writes A/B or True/False: those answers are unusable, and the report counts them
    assert report.variant("labels-a-b").unparsed == len(small) == report.variant("labels-true-false").unparsed


def test_cli_stance_correct_on_a_saved_sycophancy_result(labelled_path, labelled, tmp_path):
    from judges_for_tests import OverlapJudge

    from berds.evaluate.analyses.results import save_result
    from berds.trust.stance_corrected import stance_error_rates
    from berds.evaluate.analyses.sycophancy import SycophancyResult

    saved = save_result(SycophancyResult(5, [
        {"label": "bm25", "query": "supporting", "p": 60.0, "n": 35.0, "p_docs": 12, "n_docs": 7, "docs": 20,
         "delta": 5 / 12, "questions": 4},
        {"label": "bm25", "query": "opposing", "p": 45.0, "n": 30.0, "p_docs": 9, "n_docs": 6, "docs": 20,
         "delta": 3 / 9, "questions": 4}]), tmp_path / "syco.json")
    out = tmp_path / "corrected.json"
    proc = subprocess.run(berds_cmd("judge", "stance-correct", "--sycophancy", str(saved), "--labels", str(labelled_path),
                                    "--judge", "judges_for_tests:OverlapJudge", "-o", "threshold=0.3",
                                    "--bootstrap", "100", "--out", str(out), "-q"),
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["analysis"] == "sycophancy-stance-corrected" and data["judge"] == "test-overlap|threshold=0.3"
    pred = [v.label for v in OverlapJudge(threshold=0.3).judge(labelled.judge_pairs())]
    rates = stance_error_rates(labelled, pred)
    for row in data["rows"]:
        sup, opp = rates["support"], rates["oppose"]  # p corrected with the supporting stance's rates, n the opposing
        assert row["docs"] == 20
        expected_p = (row["p_docs"] / 20 + sup.specificity - 1) / (sup.sensitivity + sup.specificity - 1)
        expected_n = (row["n_docs"] / 20 + opp.specificity - 1) / (opp.sensitivity + opp.specificity - 1)
        assert row["p_corrected"] == pytest.approx(min(1.0, max(0.0, expected_p)))
        assert row["n_corrected"] == pytest.approx(min(1.0, max(0.0, expected_n)))
    assert "corrected for the judge's per-stance errors" in proc.stdout.replace("\n", " ")


def test_embedded_judge_audit_and_an_injected_stance_bias(embedded_judge, embedded_small):
    from berds.trust.audit import negate_statement
    from judge_trust_fixtures import StanceYesJudge

    small, cache = embedded_small
    assert {p.stance for p in small} == {"support", "oppose"}
    report = audit(small, embedded_judge, cache=cache, progress=False)
    assert {v.name for v in report.variants if v.applicable} == {"sentence-order", "negation"}
    # the negation variant's cached answers are the embedded judge's answers for the negated statements
    v = report.variant("negation")
    base = cache.get_many(embedded_judge.id, embedded_judge.prompt_version, small.judge_pairs())
    negated = cache.get_many(v.judge_id, v.prompt_version, small.judge_pairs())
    direct = embedded_judge.judge([JudgePair(negate_statement(p.perspective), p.document) for p in small.pairs[:6]])
    assert [d.p_yes for d in direct] == pytest.approx([n.p_yes for n in negated[:6]])
    tp = [b.label and p.label for b, p in zip(base, small)]
    assert v.negation_base_true_positives == sum(tp)
    assert v.negation_still_yes == sum(t and n.label for t, n in zip(tp, negated))

    supporting = {p.perspective for p in small if p.stance == "support"}
    biased = audit(small, StanceYesJudge(embedded_judge, supporting), variants=[], cache=cache, progress=False)
    assert biased.biases_found == ["stance"] and biased.stance.p_value < report.stance.p_value
    assert biased.stance.counts["support"]["fn"] == 0 and biased.stance.counts["support"]["tn"] == 0
    assert biased.stance.counts["oppose"] == report.stance.counts["oppose"]  # untouched side


def test_stance_correction_needs_pairs_of_both_stances(tmp_path):
    from berds.trust.stance_corrected import stance_corrected_sycophancy

    no_stance = read_labelled_pairs(write_demo_subset(tmp_path / "plain.tsv", with_stance=False))
    result = {"k": 5, "rows": [{"label": "x", "query": "question", "p": 30.0, "n": 10.0, "p_docs": 3, "n_docs": 1,
                                "docs": 10, "questions": 2}]}
    with pytest.raises(BerdsError, match="has no pairs with a 'support' perspective — add a 'stance' column"):
        stance_corrected_sycophancy(result, no_stance, [False] * len(no_stance))


def test_stance_correction_refuses_the_error_rates_of_another_judge(labelled):
    # A newcomer ran `analyze sycophancy --judge demo-gold`, then `stance-correct --judge embedded`: Δ was
    # silently corrected with the wrong judge's rates. Rows now name their judge and the mismatch is an error.
    from berds.trust.stance_corrected import stance_corrected_sycophancy
    from berds.evaluate.analyses.sycophancy import sycophancy_result

    support = {"q1": np.array([[1, 1, 0], [0, 0, 1]], dtype=bool)}
    result = sycophancy_result("bm25", {"supporting": support, "opposing": support}, 3, judge_id="judge-a")
    assert [r["judge"] for r in result.rows] == ["judge-a", "judge-a"]
    pred = [p.label for p in labelled]
    with pytest.raises(BerdsError, match="counted by judge 'judge-a', not 'judge-b' — pass the judge that produced"):
        stance_corrected_sycophancy(result, labelled, pred, n_boot=0, judge_id="judge-b")
    same = stance_corrected_sycophancy(result, labelled, pred, n_boot=0, judge_id="judge-a")
    assert (same.rows[0]["p_docs"], same.rows[0]["n_docs"]) == (2, 1)  # row 0 (supporting) has 2 Yes, row 1 one


def test_each_variants_judging_bar_names_the_variant(labelled, capsys):
    # Every variant judged each run under a bar reading "judging diverse": the bars could not be told apart.
    from judges_for_tests import OverlapJudge

    audit(labelled, OverlapJudge(), variants=["sentence-order"], runs=make_runs(labelled), k=5, progress=True)
    shown = capsys.readouterr()
    text = shown.out + shown.err
    for variant in ("base", "sentence-order"):
        assert f"judging {variant} diverse" in text or f"judging {variant} dive…" in text, variant
