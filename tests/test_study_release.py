"""The study's own released files, read as released (issue 32), each on a fixture in the release's format:
prediction files (``.mistralpred`` / ``.gpt4pred``, ctxs that repeat passages), the per-perspective
expansion files, the answer rule's edge cases, the T5 NLI baseline, the DELPHI release, hub split names,
tie-free ``run.trec``, duplicates reported beside Precision, pooled qrels, MMR's Sim1 constants, DebateQA
questions and Table 1's statistics. The expected numbers are worked out by hand from the rules of the
study's released code (Eval/eval.py and friends) as docs/parity.md states them. Nothing here reads ../shared.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from berds.errors import InputError


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ------------------------------------------------------------------ 2. prediction files (compute-only mode)

def _prediction_rows(field: str):
    """Two questions as the study's eval.py writes them (its retrieval output with the judge's booleans
    added per ctx): question 1 is a query-expansion run whose merge kept duplicates (passage 7 at ranks
    1 and 3, passage 9 at ranks 2 and 4)."""
    def ctx(pid, preds):
        return {"id": str(pid), "title": f"t{pid}", "text": f"passage {pid}", "score": 1.0, field: preds}

    return [
        {"question": "Q1?", "perspectives": ["a", "b"], "answers": [],
         "ctxs": [ctx(7, [True, False]), ctx(9, [False, False]), ctx(7, [True, False]), ctx(9, [False, False]),
                  ctx(3, [False, True])]},
        {"question": "Q2?", "perspectives": ["c", "d", "e"],
         "ctxs": [ctx(1, [False, False, False]), ctx(2, [False, True, False]), ctx(4, [True, False, False]),
                  ctx(5, [False, False, False]), ctx(6, [False, False, True])]},
    ]


def test_prediction_file_with_repeated_passages_scores_like_the_original(tmp_path):
    from berds.evaluate.evaluation import evaluate_predictions

    path = _write_jsonl(tmp_path / "kialo_query_exp_processed.jsonl.mistralpred", _prediction_rows("mistral-preds"))
    # The original (eval.py --compute_only --topk 4): every ctx counts. Q1: slots 1 and 3 support a ->
    # Precision 2/4, MRecall 0 (b only at rank 5); Q2: ranks 2, 3 -> 2/4, MRecall 0 (e at rank 5).
    # --topk 5: both questions 3/5, every perspective covered.
    _, kept = evaluate_predictions(path, (4, 5))
    avg = kept.averages["all"]
    assert avg["precision@4"] == pytest.approx((2 / 4 + 2 / 4) / 2)
    assert avg["mrecall@4"] == 0.0
    assert avg["precision@5"] == pytest.approx((3 / 5 + 3 / 5) / 2) and avg["mrecall@5"] == 1.0
    # de-duplicated (each repeat dropped with its own prediction): Q1 becomes 7, 9, 3 -> 2 of 3 ranks
    _, deduped = evaluate_predictions(path, (3,), duplicates="dedupe")
    per_q = list(deduped.per_question.values())
    assert per_q[0]["precision@3"] == pytest.approx(2 / 3) and per_q[0]["mrecall@3"] == 1.0
    with pytest.raises(InputError, match="listed twice"):
        evaluate_predictions(path, (3,), duplicates="refuse")


def test_gpt4_prediction_files_are_read_from_gpt4_preds(tmp_path):
    from berds.evaluate.evaluation import evaluate_predictions

    rows = _prediction_rows("gpt4-preds")
    named = _write_jsonl(tmp_path / "opinionqa_bm25.jsonl.gpt4pred", rows)
    _, result = evaluate_predictions(named, (4,))
    assert result.averages["all"]["precision@4"] == pytest.approx(0.5)
    # the original decides by the name: a .gpt4pred file is read from gpt4-preds even when mistral-preds is there
    for r in rows:
        for c in r["ctxs"]:
            c["mistral-preds"] = [False] * len(r["perspectives"])
    both = _write_jsonl(tmp_path / "both.gpt4pred.jsonl", rows)
    _, result = evaluate_predictions(both, (4,))
    assert result.averages["all"]["precision@4"] == pytest.approx(0.5)
    _, as_mistral = evaluate_predictions(_write_jsonl(tmp_path / "both.mistralpred.jsonl", rows), (4,))
    assert as_mistral.averages["all"]["precision@4"] == 0.0
    # a name with neither marker: the field the first ctx carries
    plain = _write_jsonl(tmp_path / "preds.jsonl", _prediction_rows("gpt4-preds"))
    _, result = evaluate_predictions(plain, (4,))
    assert result.averages["all"]["precision@4"] == pytest.approx(0.5)


def test_cli_from_predictions_reads_repeats_and_takes_duplicates(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    path = _write_jsonl(tmp_path / "qe.jsonl.mistralpred", _prediction_rows("mistral-preds"))
    runner = CliRunner()
    kept = runner.invoke(app, ["eval", "--from-predictions", str(path), "--k", "4", "--out", str(tmp_path / "k")])
    assert kept.exit_code == 0, kept.output
    assert json.loads((tmp_path / "k" / "metrics.json").read_text())["averages"]["all"]["precision@4"] == 0.5
    assert "Repeated passages" in kept.output and "2 of 8" in kept.output  # (Q1 repeats 7 and 9 in its top 4)
    dd = runner.invoke(app, ["eval", "--from-predictions", str(path), "--k", "3", "--duplicates", "dedupe",
                             "--out", str(tmp_path / "d")])
    assert dd.exit_code == 0, dd.output
    first = json.loads((tmp_path / "d" / "metrics.json").read_text())["per_question"]
    assert list(first.values())[0]["precision@3"] == pytest.approx(2 / 3)
    refused = runner.invoke(app, ["eval", "--from-predictions", str(path), "--k", "3", "--duplicates", "refuse"])
    assert refused.exit_code != 0 and "listed twice" in str(refused.exception)


# ------------------------------------------------------------------ 3. the released expansion files

RELEASED_EXPANSIONS = Path(__file__).parent / "study_fixtures" / "kialo_query_exp.dev.sample.jsonl"


def test_released_expansion_rows_are_grouped_per_question_with_their_recorded_queries():
    from berds.retrievers.expansion import read_expansions_and_questions

    rows = [json.loads(line) for line in RELEASED_EXPANSIONS.read_text().splitlines()]
    exps, texts = read_expansions_and_questions(RELEASED_EXPANSIONS)
    assert list(exps) == ["774", "775"] and texts == {"774": rows[0]["org_q"], "775": rows[3]["org_q"]}
    assert [e.name for e in exps["774"]] == [r["perspective"] for r in rows[:3]]  # generation order
    assert [(e.text, e.query) for e in exps["775"]] == [(r["text"], r["question"]) for r in rows[3:]]


def test_a_released_expansion_file_drives_retrieval_with_the_studys_queries_and_merge(tmp_path):
    from analysis_fixtures import OverlapRetriever

    from berds.retrievers.expansion import ExpandedRetriever, FileExpander
    from berds.types import Passage, Question

    rows = [json.loads(line) for line in RELEASED_EXPANSIONS.read_text().splitlines()]
    # the question set's own ids (not the file's org_id): matched by the question text, as the study's merge does
    questions = [Question("kialo-dev-0", rows[0]["org_q"], tuple(rows[0]["perspectives"])),
                 Question("kialo-dev-1", rows[3]["org_q"], tuple(rows[3]["perspectives"]))]
    passages = [Passage(f"p{i}", text) for i, text in enumerate([
        "affirmative action necessary tool disparities", "affirmative action relevant employment housing",
        "merit-based policies resentment stigma", "colorblind character abilities equality",
        "colorblind erasure cultural heritage identities", "society race ethnicity"])]
    base = OverlapRetriever(passages=passages)
    hits = ExpandedRetriever(base, FileExpander(RELEASED_EXPANSIONS)).search(questions, k=6)
    assert base.queries == [r["question"] for r in rows]  # the recorded queries, the stray quote of 775 included
    # the study's merge (process_query_exp_data.py): rank 1 of each perspective's list, then rank 2, ...,
    # duplicates kept, first k
    per_query = OverlapRetriever(passages=passages).search(
        [Question(f"x{i}", r["question"], ()) for i, r in enumerate(rows)], k=6)
    expected = [[h.passage.id for rank in range(6) for lst in per_query[a:b] if rank < len(lst)
                 for h in [lst[rank]]][:6] for a, b in ((0, 3), (3, 5))]
    assert [[h.passage.id for h in q] for q in hits] == expected
    assert len(set(expected[0])) < len(expected[0])  # a passage two perspectives found is kept twice


def test_released_expansion_rows_with_errors_name_the_line(tmp_path):
    from berds.retrievers.expansion import read_expansions

    row = json.loads(RELEASED_EXPANSIONS.read_text().splitlines()[0])
    bad = _write_jsonl(tmp_path / "x.jsonl", [row, {**row, "text": ""}])
    with pytest.raises(InputError, match="line 2.*non-empty 'text'"):
        read_expansions(bad)
    mixed = _write_jsonl(tmp_path / "m.jsonl", [row, {"id": "q", "question": "Q?", "expansions": ["a"]}])
    with pytest.raises(InputError, match="mixes"):
        read_expansions(mixed)


# ------------------------------------------------------------------ 5. the answer rule's remaining cases

class _Replies:
    """An LLM backend that answers from a list (the judge's reading of replies is under test, not a model)."""

    def __init__(self, id: str, replies):  # noqa: A002
        self.id, self.replies = id, list(replies)

    def generate(self, prompts, *, max_new_tokens=16, temperature=0.0, top_logprobs=0):
        from berds.llm.base import Generation

        return [Generation(self.replies[i]) for i in range(len(prompts))]


def test_a_dict_replys_answer_is_stripped_as_in_the_study():
    from berds.judges.llm_judge import parse_answer

    # the study: ast.literal_eval(reply)['Answer'].strip().lower() == 'yes'
    assert parse_answer("{'Answer': ' Yes '}") == (True, True)
    assert parse_answer('{"Answer": "\\tno\\n"}') == (False, True)


def test_a_mistral_reply_is_read_up_to_its_own_inst_or_eos_marker():
    from berds.judges.llm_judge import LLMJudge, study_mistral_reply
    from berds.types import JudgePair

    # the study decoded prompt + reply, cut at the first </s>, kept what lies between the first and the second
    # [/INST]: the reply up to an [/INST] or </s> of its own
    assert study_mistral_reply(" Yes [/INST] No") == "Yes"
    assert study_mistral_reply("No</s> Answer: Yes") == "No"
    assert study_mistral_reply("No [/INST] x </s> Yes") == "No"
    replies = ["No [/INST] The answer is Yes", "Yes</s>[INST] No", "The answer is Yes"]
    pairs = [JudgePair("S", f"D{i}") for i in range(3)]
    mistral = LLMJudge(_Replies("vllm:mistralai/Mistral-7B-Instruct-v0.2", replies))
    assert [v.label for v in mistral.judge(pairs)] == [False, True, True]
    assert [v.raw for v in mistral.judge(pairs)] == replies  # the reply itself is kept as it came
    # GPT-4's replies were parsed whole in the study (no [/INST] cut): "... The answer is Yes" is Yes there
    gpt4 = LLMJudge(_Replies("openai:gpt-4", replies))
    assert [v.label for v in gpt4.judge(pairs)] == [True, True, True]
    # the rule's version keys the cache: verdicts of the earlier reading are not reused
    assert mistral.prompt_version.endswith("+answer-rule-2") and gpt4.prompt_version.endswith("+answer-rule-2")
    assert "answer-rule" not in LLMJudge(_Replies("openai:gpt-4", replies), parse="strict").prompt_version


# ------------------------------------------------------------------ 4. the NLI baseline of Table 4 (T5)

def _build_t5_vocab_model(folder: Path) -> Path:
    """A random-weight T5 whose tokenizer has T5's ids where the study's code reads them: 3 = "▁" (the first
    piece of "0"), 209 = "▁1" (words are "▁word" pieces, as sentencepiece writes them)."""
    from tokenizers import pre_tokenizers

    from llm_fixtures import save_tiny_t5

    words = "premise: hypothesis: cats dogs are great loyal pets fish need clean water birds sing".split()
    tokens = ["<pad>", "</s>", "<unk>", "▁"] + [f"▁{w}" for w in words]
    tokens += [f"<extra_{i}>" for i in range(209 - len(tokens))] + ["▁1", "▁0"]
    vocab = {t: i for i, t in enumerate(tokens)}
    assert vocab["▁"] == 3 and vocab["▁1"] == 209
    return save_tiny_t5(folder, vocab, pre_tokenizers.Metaspace(), seed=1)


@pytest.mark.slow  # (four loads of a tiny T5: ~9 s on 2 shared cores)
def test_a_t5_vocabulary_nli_model_is_scored_as_the_studys_t5_code(tmp_path):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from berds.judges.catalogue import load_judge
    from berds.judges.nli import PROMPT_VERSION
    from berds.types import JudgePair

    folder = _build_t5_vocab_model(tmp_path / "t5")
    # 2,100 characters in 105 tokens (unknown words): past the 2,000-character cut, under the 256-token one
    long_premise = "abcdefghijklmnopqrs " * 105
    pairs = [JudgePair("cats are great pets", "cats are great pets"), JudgePair("dogs sing", "fish need clean water"),
             JudgePair("birds sing", long_premise + "cats"), JudgePair("birds sing", long_premise[:2000] + " fish dogs")]
    judge = load_judge(f"nli:{folder}")
    verdicts = judge.judge(pairs)
    assert judge.kind == "study-t5" and judge.max_length == 256 and judge.prompt_version == PROMPT_VERSION
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    expected = []
    for pair in pairs:  # the study's pred_decoder_models, step by step
        ids = tok("premise: %s hypothesis: %s" % (pair.passage[:2000], pair.perspective), truncation=True,
                  max_length=256, return_tensors="pt").input_ids
        start = tok("<pad>", return_tensors="pt").input_ids[:, :1]
        with torch.no_grad():
            logits = model(input_ids=ids, decoder_input_ids=start).logits
        both = torch.cat((logits[:, 0, 3:4], logits[:, 0, 209:210]), dim=-1)
        expected.append(torch.softmax(both, dim=-1)[0, 1].item())
    assert [v.p_yes for v in verdicts] == pytest.approx(expected, abs=1e-5)
    assert [v.label for v in verdicts] == [p > 0.5 for p in expected]
    # the premise is cut at 2,000 characters: what lies past them changes nothing
    assert verdicts[2].p_yes == pytest.approx(verdicts[3].p_yes, abs=1e-6)
    # label p > threshold, strictly: at a threshold equal to a pair's P it says "no"
    at = load_judge(f"nli:{folder}", threshold=verdicts[0].p_yes).judge(pairs[:1])[0]
    assert at.label is False
    # berds' earlier T5 reading stays one option away, under its own id
    tokens = load_judge(f"nli:{folder}", scoring="tokens", entail_token="1", other_token="0")
    assert tokens.id.endswith("|scoring=tokens") and tokens.id != judge.id
    uncut = tokens.judge(pairs)
    assert tokens.kind == "seq2seq" and tokens.max_length == 512
    assert uncut[2].p_yes != pytest.approx(uncut[3].p_yes, abs=1e-6)  # (so the cut is what made them equal)


@pytest.mark.slow  # (builds and loads a tiny T5)
def test_study_t5_scoring_is_refused_for_another_vocabulary(tmp_path):
    from llm_fixtures import build_tiny_t5_nli

    from berds.errors import BerdsError
    from berds.judges.catalogue import load_judge
    from berds.types import JudgePair

    folder = build_tiny_t5_nli(tmp_path / "words")
    judge = load_judge(f"nli:{folder}")
    [verdict] = judge.judge([JudgePair("cats", "dogs")])
    assert judge.kind == "seq2seq" and judge.max_length == 512  # auto: not T5's vocabulary, berds' reading
    assert verdict.label == (verdict.p_yes >= 0.5)
    with pytest.raises(BerdsError, match="scoring=study-t5 reads T5's token ids 3 and 209"):
        load_judge(f"nli:{folder}", scoring="study-t5").load()
    with pytest.raises(BerdsError, match="unknown nli scoring"):
        load_judge(f"nli:{folder}", scoring="t5")


# ------------------------------------------------------------------ 1. the DELPHI release

DELPHI_RELEASE = Path(__file__).parent / "study_fixtures" / "controversial_questions_annotated_id_removed.tsv"


def _quora_file(path: Path, qids, *, tsv: bool = True) -> Path:
    """A Quora Question Pairs file in that data's layout (texts written here, one pair per two qids)."""
    import csv

    qids = list(qids) + ([99999] if len(qids) % 2 else [])
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t" if tsv else ",", quoting=csv.QUOTE_MINIMAL if tsv else csv.QUOTE_ALL)
        w.writerow(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])
        for i in range(0, len(qids), 2):
            w.writerow([i // 2, qids[i], qids[i + 1], f"Question {qids[i]}, is it?", f"Question {qids[i + 1]}?", 0])
    return path


def test_the_delphi_release_is_read_with_the_papers_rule_and_quora_texts(tmp_path):
    from berds.questions import read_delphi

    rows = [line.split("\t") for line in DELPHI_RELEASE.read_text().splitlines()[1:]]
    quora = _quora_file(tmp_path / "quora_duplicate_questions.tsv", [int(r[0]) for r in rows])
    questions = read_delphi(DELPHI_RELEASE, question_texts=quora)
    assert [q.id for q in questions] == [r[0] for r in rows]
    assert questions[0].text == "Question 3, is it?" and questions[1].text == "Question 19?"
    # both mean ratings >= 4 -> controversial (4.0/4.8, 4.0/4.0, 4.4/4.0 yes; 3.6/4.2, 4.33/3.67 no)
    assert [q.extra["controversial"] for q in questions] == [r[3] == "TRUE" for r in rows]
    assert [q.extra["release_label"] for q in questions] == [r[3] == "TRUE" for r in rows]
    assert questions[4].extra["r1"] == pytest.approx(2.33333333333333) and questions[4].extra["r2"] == 4.0
    hot = read_delphi(DELPHI_RELEASE, question_texts=quora, controversial_only=True)
    assert [q.id for q in hot] == ["71", "1002", "1084", "5796"]
    # Kaggle's train.csv layout (quoted csv) works the same
    kaggle = _quora_file(tmp_path / "train.csv", [int(r[0]) for r in rows], tsv=False)
    assert [q.text for q in read_delphi(DELPHI_RELEASE, question_texts=kaggle)] == [q.text for q in questions]


def test_the_rule_decides_where_a_label_disagrees_and_errors_name_the_row(tmp_path):
    from berds.questions import read_delphi

    text = DELPHI_RELEASE.read_text().replace("31\t3.6\t4.2\tFALSE", "31\t3.6\t4.2\tTRUE")
    edited = tmp_path / "controversial_questions_annotated_id_removed.tsv"
    edited.write_text(text)
    quora = _quora_file(tmp_path / "q.tsv", [3, 19, 31, 71, 251, 1002, 1084, 5796, 7076])
    q31 = read_delphi(edited, question_texts=quora)[2]
    assert q31.extra["controversial"] is False and q31.extra["release_label"] is True
    with pytest.raises(InputError, match="line 4.*Quora question id 31 is not in"):
        read_delphi(edited, question_texts=_quora_file(tmp_path / "short.tsv", [3, 19]))
    edited.write_text(text.replace("71\t4.0\t4.8", "71\tfour\t4.8"))
    with pytest.raises(InputError, match="line 5.*rating r1='four' is not a number"):
        read_delphi(edited, question_texts=quora)


def test_load_questions_delphi_finds_the_release_and_the_quora_file(tmp_path, monkeypatch):
    from berds.questions import load_questions

    monkeypatch.setenv("BERDS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("BERDS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BERDS_DELPHI_QUESTIONS", raising=False)
    (tmp_path / DELPHI_RELEASE.name).write_bytes(DELPHI_RELEASE.read_bytes())
    with pytest.raises(InputError, match="no question text.*BERDS_DELPHI_QUESTIONS"):
        load_questions("delphi", require_perspectives=False)
    _quora_file(tmp_path / "quora_duplicate_questions.tsv", [3, 19, 31, 71, 251, 1002, 1084, 5796, 7076])
    hot = load_questions("delphi-controversial", require_perspectives=False)
    assert [q.id for q in hot] == ["71", "1002", "1084", "5796"] and {q.dataset for q in hot} == {"delphi"}
    monkeypatch.setenv("BERDS_DELPHI_QUESTIONS", str(tmp_path / "missing.tsv"))
    with pytest.raises(InputError, match="missing.tsv.*file not found"):
        load_questions("delphi", require_perspectives=False)


# ------------------------------------------------------------------ 6. the hub's split names

def test_a_question_set_in_the_hubs_layout_loads_under_dev_and_test(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    from berds.questions import load_questions

    repo = tmp_path / "Kialo"  # the study's hub repository as it stores the set: {name}.{split}.jsonl, no config
    repo.mkdir()
    for split, n in (("dev", 2), ("test", 3)):
        _write_jsonl(repo / f"kialo.{split}.jsonl", [
            {"question": f"{split} question {i}?", "perspectives": [f"yes {i}", f"no {i}"]} for i in range(n)])
    for var, sub in (("BERDS_HOME", "home"), ("HF_HOME", "hf"), ("HF_DATASETS_CACHE", "hf-datasets")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.delenv("BERDS_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # a local copy loads offline too
    monkeypatch.setenv("BERDS_HF_REPO_KIALO", str(repo))
    import datasets

    with pytest.raises(Exception, match="Unknown split"):  # what `--split dev` met before: datasets says validation
        datasets.load_dataset(str(repo), split="dev")
    dev = load_questions("kialo", "dev")
    assert [q.text for q in dev] == ["dev question 0?", "dev question 1?"]
    assert [q.id for q in dev] == ["kialo-dev-0", "kialo-dev-1"] and dev[0].perspectives == ("yes 0", "no 0")
    assert [q.id for q in load_questions("kialo", "test")] == ["kialo-test-0", "kialo-test-1", "kialo-test-2"]
    assert (tmp_path / "home" / "benchmarks" / "kialo.dev.jsonl").is_file()  # written once into the cache


# ------------------------------------------------------------------ 7. ties every TREC tool reads alike

@pytest.mark.slow  # (ranx compiles its metrics with numba: ~10 s the first time in a process)
def test_a_tied_run_100_deep_reads_the_same_in_trec_eval_ranx_and_berds(tmp_path):
    import random

    import ir_measures
    import ranx
    from ir_measures import P, nDCG

    from berds.runs import load_run, read_trec, save_run
    from berds.types import Hit, Passage, Question, Run

    rng = random.Random(32)
    questions, lists, qrels = [], [], {}
    for q in range(12):
        docs = [f"d{rng.randrange(10**6):06d}" for _ in range(100)]
        docs = list(dict.fromkeys(docs))[:100]
        # blocks of 20 tied scores (the case ranx reorders itself past 16), a few distinct scores between
        scores = [float(10 - i // 20) if i % 7 else 10.5 - i / 10 for i in range(len(docs))]
        scores.sort(reverse=True)
        lists.append([Hit(Passage(d, d), s) for d, s in zip(docs, scores)])
        questions.append(Question(f"q{q}", "?", ("p",)))
        qrels[f"q{q}"] = {d: 1 for d in rng.sample(docs, 15)}
    folder = save_run(Run.from_lists(questions, lists, name="tied100"), tmp_path / "run")
    trec = folder / "run.trec"
    berds_order = {qid: [h.passage.id for h in hits] for qid, hits in load_run(folder).hits.items()}
    assert {q: [d for d, _ in v] for q, v in read_trec(trec).items()} == berds_order
    for qid, ranked in read_trec(trec).items():
        assert all(a[1] > b[1] for a, b in zip(ranked, ranked[1:])), qid  # strictly decreasing
    # the original scores stay in run.ctxs.jsonl
    assert {float(c["score"]) for line in (folder / "run.ctxs.jsonl").read_text().splitlines()
            for c in json.loads(line)["ctxs"]} <= {h.score for hits in lists for h in hits}
    measures = [m @ k for m in (P, nDCG) for k in (5, 10, 20, 50, 100)]
    by_ir = {(m, r.query_id): r.value for r in ir_measures.iter_calc(measures, qrels, ir_measures.read_trec_run(str(trec)))
             for m in [r.measure]}
    names = [f"{'precision' if m.NAME == 'P' else 'ndcg'}@{m['cutoff']}" for m in measures]
    rx_run = ranx.Run.from_file(str(trec), kind="trec")
    ranx.evaluate(ranx.Qrels(qrels), rx_run, names, return_mean=False)
    disagree = [(m, q) for m, name in zip(measures, names) for q in qrels
                if by_ir[(m, q)] != pytest.approx(rx_run.scores[name][q], abs=1e-9)]
    assert disagree == []
    # and berds' own Precision@k counts the same relevant passages in the same top k
    for q, order in berds_order.items():
        for k in (5, 10, 20, 50, 100):
            assert by_ir[(P @ k, q)] == pytest.approx(sum(d in qrels[q] for d in order[:k]) / k)


# ------------------------------------------------------------------ 9. repeated passages beside Precision

def _repeating_runs(tmp_path: Path):
    """A base run and an expansion-style run of the same two questions whose top 4 repeat passages (as the
    study's keep-duplicates merge leaves them), saved as run folders."""
    from berds.runs import save_run
    from berds.types import Hit, Passage, Question, Run

    cats, dogs, fish, birds = (Passage("cats", "cats are great pets"), Passage("dogs", "dogs are loyal pets"),
                               Passage("fish", "fish need clean water"), Passage("birds", "birds sing"))
    qs = [Question("q1", "Best pet?", ("cats are great pets", "dogs are loyal pets")),
          Question("q2", "Fish?", ("fish need clean water", "birds sing"))]

    def run(name, lists):
        return save_run(Run.from_lists(qs, [[Hit(p, 9.0 - i) for i, p in enumerate(ps)] for ps in lists], name=name),
                        tmp_path / name)

    base = run("base", [[cats, dogs, fish, birds], [fish, cats, birds, dogs]])
    # q1: cats, cats, dogs, cats -> 2 repeats in the top 4, Precision@4 4/4 as counted, 2/4 once
    # q2: fish, fish, birds, birds -> 2 repeats, 4/4 and 2/4
    expanded = run("expanded", [[cats, cats, dogs, cats, fish], [fish, fish, birds, birds, dogs]])
    return base, expanded


def test_eval_reports_repeated_slots_and_precision_once(tmp_path):
    from judges_for_tests import OverlapJudge

    from berds.evaluate.evaluation import evaluate_paths, repeats_table

    base, expanded = _repeating_runs(tmp_path)
    results = evaluate_paths([base, expanded], OverlapJudge(threshold=0.7), (2, 4), cache_path=tmp_path / "c.sqlite",
                             progress=False)
    plain, kept = results[0][1], results[1][1]
    assert plain.repeats == {} and "repeats" not in plain.to_json()
    assert kept.averages["all"]["precision@4"] == 1.0
    assert kept.repeats["q1"] == {"repeats@2": 1.0, "precision_once@2": 0.5, "repeats@4": 2.0, "precision_once@4": 0.5}
    written = kept.to_json()["repeats"]
    assert written["averages"]["all"]["precision_once@4"] == 0.5 and written["averages"]["all"]["repeats@4"] == 2.0
    from rich.console import Console

    console = Console(width=80, record=True)
    console.print(repeats_table([plain, kept]))
    text = console.export_text()
    assert "expanded" in text and "4 of 8" in text and "100.0" in text and "50.0" in text and "base" not in text


def test_cli_eval_and_compare_say_how_many_slots_repeat(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    base, expanded = _repeating_runs(tmp_path)
    runner = CliRunner()
    args = ["--judge", "judges_for_tests:OverlapJudge", "--cache", str(tmp_path / "c.sqlite"), "--k", "4", "-q"]
    ev = runner.invoke(app, ["eval", str(expanded), *args, "--out", str(tmp_path / "m")])
    assert ev.exit_code == 0, ev.output
    assert "Repeated passages" in ev.output and "4 of 8" in ev.output
    written = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert written["repeats"]["averages"]["all"]["precision_once@4"] == 0.5
    cmp = runner.invoke(app, ["compare", str(base), str(expanded), *args[:-1], "--resamples", "100"])
    assert cmp.exit_code == 0, cmp.output
    assert "4 of 8 top-4 slots repeat a passage ranked above; Precision@4 100.0, with each passage counted once 50.0" \
        in " ".join(cmp.output.split())


# ------------------------------------------------------------------ 8. pooled qrels for alpha-nDCG / ERR-IA

def test_runs_evaluated_together_are_measured_against_their_pooled_judgements(tmp_path):
    pytest.importorskip("pyndeval")
    from typer.testing import CliRunner

    from berds.cli import app
    from berds.evaluate.qrels import compute_measures, pool_qrels, read_judgements
    from berds.runs import save_run
    from berds.types import Hit, Passage, Question, Run

    ps = {n: Passage(n, t) for n, t in [("a", "cats are great pets"), ("b", "cats are great pets indeed"),
                                        ("c", "dogs are loyal pets"), ("x", "rain falls"), ("y", "snow falls"),
                                        ("z", "wind blows")]}
    qs = [Question("q1", "Best pet?", ("cats are great pets", "dogs are loyal pets"))]

    def run(name, ids):
        return save_run(Run.from_lists(qs, [[Hit(ps[i], 9.0 - j) for j, i in enumerate(ids)]], name=name),
                        tmp_path / name)

    # "found" retrieves all three supporting passages; "fewer" only one, so its own ideal ranking is smaller
    found, fewer = run("found", ["x", "a", "b", "c"]), run("fewer", ["a", "x", "y", "z"])
    runner = CliRunner()
    common = ["--judge", "judges_for_tests:OverlapJudge", "--cache", str(tmp_path / "c.sqlite"), "--k", "4", "-q",
              "--measure", "alpha_nDCG@4"]
    pooled = runner.invoke(app, ["eval", str(found), str(fewer), *common, "--out", str(tmp_path / "pooled")])
    assert pooled.exit_code == 0, pooled.output
    assert "judgements of all 2 runs pooled" in " ".join(pooled.output.split())
    single = runner.invoke(app, ["eval", str(found), str(fewer), *common, "--qrels-pool", "single",
                                 "--out", str(tmp_path / "single")])
    assert single.exit_code == 0, single.output

    def measured(out, name):
        [metrics] = (tmp_path / out).glob(f"{name}*/metrics.json")  # (eval --out gives each run a sub-folder)
        return json.loads(metrics.read_text())["ir_measures"]

    rows = {name: read_judgements(next((tmp_path / "pooled").rglob(f"{name}*/judgements.jsonl"))) for name in
            ("found", "fewer")}
    pool = pool_qrels(r[0] for r in rows.values())
    for name, (own, ranking) in rows.items():
        by_pool = compute_measures(["alpha_nDCG@4"], pool, ranking)[0]["alpha_nDCG@4"]
        by_own = compute_measures(["alpha_nDCG@4"], own, ranking)[0]["alpha_nDCG@4"]
        assert measured("pooled", name)["mean"]["alpha_nDCG@4"] == pytest.approx(by_pool)
        assert measured("pooled", name)["qrels"] == "runs"
        assert measured("single", name)["mean"]["alpha_nDCG@4"] == pytest.approx(by_own)
        assert measured("single", name)["qrels"] == "single"
    # the run that found fewer supporting passages looked better against its own smaller ideal
    assert measured("single", "fewer")["mean"]["alpha_nDCG@4"] > measured("pooled", "fewer")["mean"]["alpha_nDCG@4"]
    assert measured("single", "found")["mean"]["alpha_nDCG@4"] == pytest.approx(
        measured("pooled", "found")["mean"]["alpha_nDCG@4"])  # (its own judgements are the whole pool)


# ------------------------------------------------------------------ 10. study details: Sim1 presets, DebateQA, Table 1

def test_sim1_constant_presets_are_the_studys_and_divide_a_zero_topped_question():
    import numpy as np

    from berds.errors import BerdsError
    from berds.rerank.mmr import SIM1_CONSTANT_PRESETS, mmr_rerank, parse_sim1_constant
    from berds.types import Hit, Passage, Question, Run

    # the study's MMR code: {'wiki': {bm25 63.5, dpr 100.6, contriever 2.20}, 'sphere': {99.9, 243.9, 2.55},
    # 'google_api': {bm25 181.5, contriever 2.52}}
    assert SIM1_CONSTANT_PRESETS == {
        ("bm25", "wikipedia"): 63.5, ("dpr", "wikipedia"): 100.6, ("contriever", "wikipedia"): 2.20,
        ("bm25", "sphere"): 99.9, ("dpr", "sphere"): 243.9, ("contriever", "sphere"): 2.55,
        ("bm25", "google-search"): 181.5, ("contriever", "google-search"): 2.52}
    assert parse_sim1_constant("bm25-wiki") == 63.5 and parse_sim1_constant("contriever-google_api") == 2.52
    assert parse_sim1_constant("dpr-sphere") == 243.9 and parse_sim1_constant("7.5") == 7.5
    # the docs name them (analyses.md said "its values are not in our reference" after they were presets)
    docs = Path(__file__).parent.parent / "docs"
    analyses, parity = (docs / "analyses.md").read_text(), (docs / "parity.md").read_text()
    assert "not in our reference" not in analyses and "--sim1-constant bm25-wikipedia" in analyses
    import re

    for (retriever, corpus), value in SIM1_CONSTANT_PRESETS.items():
        found = re.search(rf"`{retriever}-{corpus}` ([0-9.]+)", parity)
        assert found and float(found.group(1)) == value, (retriever, corpus, value)
    for bad in ("dpr-google-search", "bm25", "-3"):
        with pytest.raises(BerdsError, match="sim1-constant"):
            parse_sim1_constant(bad)

    class Encoder:  # fixed 2-d embeddings by text
        name = "fixed"
        table = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [0.9, 0.1]}

        def encode(self, texts, **_):
            return np.asarray([self.table[t] for t in texts], dtype=np.float32)

    q = Question("q", "Q?", ("x",))
    run = Run.from_lists([q], [[Hit(Passage(t, t), s) for t, s in (("a", 0.0), ("b", -20.0), ("c", -1.0))]])
    reranked, _ = mmr_rerank(run, lam=0.9, encoder=Encoder(), sim1_constant=parse_sim1_constant("contriever-sphere"))
    assert reranked.manifest["rerank"]["sim1_constant"] == 2.55
    # Sim1 = score / 2.55: b -7.84, c -0.39; after a, c: .9*-.39 - .1*.99 = -.45 > b: .9*-7.84 - 0 -> a, c, b
    assert [h.passage.id for h in reranked.hits["q"]] == ["a", "c", "b"]


def _debateqa_rows():
    """Two records in DebateQA's dataset/{test,dev}.jsonl shape (its eval scripts read id, question and
    partial_answers: [{point_of_view, explanation}]); the first is the paper's Table 1 example, shortened."""
    return [
        {"id": 0, "question": "Does birth order influence personality traits?", "partial_answers": [
            {"point_of_view": "Birth order does not have a meaningful and lasting effect on broad Big Five "
                              "personality traits", "explanation": "The influence of birth order ..."},
            {"point_of_view": "Firstborns score higher on intelligence and intellect",
             "explanation": "Yes, birth order does influence ..."}]},
        {"id": 1, "question": "Is remote work better than office work?", "partial_answers": [
            {"point_of_view": "Remote work raises productivity", "explanation": "Studies of ..."},
            {"point_of_view": "Offices foster collaboration", "explanation": "Teams that ..."},
            {"point_of_view": "It depends on the job", "explanation": ""}]},
    ]


def test_debateqa_questions_load_with_their_partial_answers(tmp_path, monkeypatch):
    from berds.errors import BerdsError
    from berds.questions import load_questions

    monkeypatch.setenv("BERDS_DATA_DIR", str(tmp_path))
    with pytest.raises(BerdsError, match="DebateQA \\(test\\) is not available locally"):
        load_questions("debateqa")
    (tmp_path / "debateqa").mkdir()
    _write_jsonl(tmp_path / "debateqa" / "test.jsonl", _debateqa_rows())  # the repository's dataset/ folder
    questions = load_questions("debateqa")
    assert [q.id for q in questions] == ["0", "1"] and {q.dataset for q in questions} == {"debateqa"}
    # each partial answer as DebateQA's P.D. scores it: f"{point_of_view}. {explanation}"
    assert questions[0].perspectives[1] == "Firstborns score higher on intelligence and intellect. Yes, birth order does influence ..."
    assert questions[1].extra["points_of_view"] == ["Remote work raises productivity", "Offices foster collaboration",
                                                    "It depends on the job"]
    _write_jsonl(tmp_path / "debateqa.dev.jsonl", _debateqa_rows()[:1])
    assert len(load_questions("debateqa", "dev")) == 1
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"id": 2, "question": "Q?", "partial_answers": [{"explanation": "x"}]}])
    with pytest.raises(InputError, match="line 1.*partial_answers\\[0\\] needs a 'point_of_view'"):
        load_questions(str(bad))


def test_table_1_statistics_of_question_sets(tmp_path, monkeypatch):
    pytest.importorskip("nltk")
    from typer.testing import CliRunner

    from berds.cli import app
    from berds.errors import BerdsError
    from berds.questions import load_questions, question_set_statistics

    monkeypatch.setenv("BERDS_DATA_DIR", str(tmp_path))

    def q(i, *persp):
        return {"id": f"q{i}", "question": f"Question {i}?", "perspectives": list(persp)}

    # arguana: 3 questions (1 dev / 2 test), 2 perspectives each; word_tokenize counts "pets." as 2 tokens
    _write_jsonl(tmp_path / "arguana.dev.jsonl", [q(0, "Cats are great pets.", "Dogs are loyal.")])
    _write_jsonl(tmp_path / "arguana.test.jsonl", [q(1, "Yes.", "No, it isn't."), q(2, "Fish swim", "Birds can't fly")])
    # kialo: 1 dev question with 4 perspectives, 1 test question with 2
    _write_jsonl(tmp_path / "kialo.dev.jsonl", [q(3, "A b c", "D e", "F", "G h i j")])
    _write_jsonl(tmp_path / "kialo.test.jsonl", [q(4, "K l", "M n o")])
    sets = {name: {s: load_questions(name, s) for s in ("dev", "test")} for name in ("arguana", "kialo")}
    rows = question_set_statistics(sets, tokenizer="nltk-line")
    # arguana words: 5 + 4 | 2 + 6 ("No , it is n't .") | 2 + 4 ("Birds ca n't fly") = 23 over 6 perspectives
    assert rows[0] == {"set": "arguana", "questions": 3, "splits": {"dev": 1, "test": 2}, "perspectives": 2.0,
                       "words": pytest.approx(23 / 6)}
    # kialo: 3 + 2 + 1 + 4 + 2 + 3 = 15 words over 6 perspectives, 6 perspectives over 2 questions
    assert rows[1]["perspectives"] == 3.0 and rows[1]["words"] == pytest.approx(15 / 6)
    # all: every question and every perspective weighs the same (the study's All row)
    assert rows[2] == {"set": "all", "questions": 5, "splits": {"dev": 2, "test": 3}, "perspectives": 12 / 5,
                       "words": pytest.approx(38 / 12)}
    try:  # the study's tokenizer: word_tokenize with NLTK's sentence model (its data may not be installed)
        assert question_set_statistics(sets)[2]["words"] == pytest.approx(38 / 12)
    except BerdsError as exc:
        assert "punkt_tab" in str(exc) and "--tokenizer nltk-line" in str(exc)
    result = CliRunner().invoke(app, ["questions", "stats", "arguana", "kialo", "--tokenizer", "nltk-line",
                                      "--out", str(tmp_path / "t1.json")])
    assert result.exit_code == 0, result.output
    assert "5 (2/3)" in result.output and "2.40" in result.output and "3.17" in result.output
    assert json.loads((tmp_path / "t1.json").read_text())["rows"][2]["questions"] == 5


def test_an_nli_max_length_given_by_name_keys_the_cache_apart():
    from berds.judges.nli import NLIJudge

    # under study-t5 an unnamed max_length is 256 and a named 512 is 512: two judges, two ids
    assert NLIJudge("org/t5").id != NLIJudge("org/t5", max_length=512).id
    assert NLIJudge("org/t5", max_length=256).id.endswith("|max_length=256")
