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
