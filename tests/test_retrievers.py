"""The retriever registry, retrieve() into run folders (contract checks, resume), TART, the contract test."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from berds.errors import BerdsError, UnknownNameError
from berds.retrievers import RETRIEVERS, load_retriever, retrieve
from berds.runs import load_run
from berds.testing import TINY_PASSAGES, check_retriever, tiny_questions
from berds.types import Hit, Passage, Question, rank_hits

QUESTIONS = [Question(f"q{i}", f"question {i}", ("a", "b")) for i in range(5)]


class FixedRetriever:
    """Returns the same three tiny passages for every question, scores 3, 2, 2 (a tie broken by id)."""

    name = "fixed"

    def __init__(self, *, flavour: str = "ok"):
        self.flavour = flavour
        self.calls: list[list[str]] = []

    def search(self, questions, *, k):
        self.calls.append([q.id for q in questions])
        hits = [Hit(TINY_PASSAGES[0], 3.0), Hit(TINY_PASSAGES[2], 2.0), Hit(TINY_PASSAGES[1], 2.0)]
        if self.flavour == "unsorted":
            return [list(reversed(rank_hits(hits)))[:k] for _ in questions]  # worst first
        if self.flavour == "too-many":
            return [hits for _ in questions]
        if self.flavour == "duplicates":
            return [[hits[0], hits[0]][:k] for _ in questions]
        if self.flavour == "boom-after-first" and len(self.calls) > 1:
            raise RuntimeError("killed")
        return [rank_hits(hits)[:k] for _ in questions]


FIXED = f"{__name__}:FixedRetriever"


def test_listing_retrievers_imports_nothing_heavy():
    code = ("import sys; from berds.retrievers.registry import RETRIEVERS; names = RETRIEVERS.names(); "
            "from berds.cli import main; "
            "heavy = [m for m in ('torch', 'faiss', 'jnius', 'transformers', 'pyserini', 'sentence_transformers') if m in sys.modules]; "
            "print(names, heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'bm25'" in out and "'tart'" in out and "'contriever'" in out and out.strip().endswith("[]")


def test_unknown_names_suggest_and_module_attr_works():
    with pytest.raises(UnknownNameError, match="Did you mean 'contriever'"):
        RETRIEVERS.spec("contriver")
    retriever = load_retriever(FIXED, flavour="ok")
    assert isinstance(retriever, FixedRetriever)
    with pytest.raises(BerdsError, match="does not take option\\(s\\) 'index'.*it takes: flavour"):
        load_retriever(FIXED, index="somewhere")
    assert load_retriever(FIXED, index=None).flavour == "ok"  # unset CLI flags are dropped
    with pytest.raises(BerdsError, match="needs a `name` string"):
        load_retriever("berds.types:Passage", id="x", text="y")
    with pytest.raises(BerdsError, match="cannot import module"):
        load_retriever("no_such_module_xyz:Thing")


def test_retrieve_writes_a_run_folder_with_provenance(tmp_path):
    run = retrieve(FIXED, QUESTIONS, k=2, out=tmp_path / "run", batch_size=2, progress=False)
    assert [h.passage.id for h in run.hits["q0"]] == ["bees-1", "bees-2"]  # tie at 2.0: bees-2 < bees-3
    loaded = load_run(tmp_path / "run")
    assert list(loaded.questions) == [q.id for q in QUESTIONS]
    assert [h.passage.text for h in loaded.hits["q3"]] == [TINY_PASSAGES[0].text, TINY_PASSAGES[1].text]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["retriever"]["class"].endswith(":FixedRetriever") and manifest["k"] == 2
    assert manifest["question_set"]["count"] == 5
    assert not (tmp_path / "run" / ".partial.jsonl").exists()
    trec = (tmp_path / "run" / "run.trec").read_text().splitlines()
    assert trec[0].split()[:4] == ["q0", "Q0", "bees-1", "1"] and len(trec) == 10


def test_a_question_id_holding_whitespace_is_refused_before_any_search(tmp_path):
    questions = [QUESTIONS[0], dataclasses.replace(QUESTIONS[1], id="q 1")]
    with pytest.raises(BerdsError, match="question id 'q 1' holds whitespace, which a TREC run file"):
        retrieve(FIXED, questions, k=2, out=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flavour, message", [
    ("unsorted", "not ordered best first"),
    ("too-many", "3 hits for k=2"),
    ("duplicates", "appears twice"),
])
def test_retrieve_refuses_results_that_break_the_contract(flavour, message, tmp_path):
    with pytest.raises(BerdsError, match=message):
        retrieve(FIXED, QUESTIONS, k=2, options={"flavour": flavour}, progress=False)


def test_an_interrupted_retrieval_resumes_after_the_last_finished_batch(tmp_path):
    retriever = FixedRetriever(flavour="boom-after-first")
    with pytest.raises(RuntimeError, match="killed"):
        retrieve(retriever, QUESTIONS, k=2, out=tmp_path / "run", batch_size=2, progress=False)
    assert not (tmp_path / "run" / "manifest.json").exists()
    partial = (tmp_path / "run" / ".partial.jsonl").read_text().splitlines()
    assert len(partial) == 3  # header + the 2 questions of the first batch
    again = FixedRetriever()
    run = retrieve(again, QUESTIONS, k=2, out=tmp_path / "run", batch_size=2, progress=False)
    assert again.calls == [["q2", "q3"], ["q4"]]  # q0, q1 were not searched again
    assert run.manifest["timing"]["resumed"] == 2 and list(run.questions) == [q.id for q in QUESTIONS]
    assert [h.passage.id for h in load_run(tmp_path / "run").hits["q0"]] == ["bees-1", "bees-2"]
    # Other settings (here k) do not reuse a partial file: everything is retrieved again.
    with pytest.raises(RuntimeError):
        retrieve(FixedRetriever(flavour="boom-after-first"), QUESTIONS, k=1, out=tmp_path / "run2", batch_size=2, progress=False)
    fresh = FixedRetriever()
    retrieve(fresh, QUESTIONS, k=3, out=tmp_path / "run2", batch_size=2, progress=False)
    assert fresh.calls[0] == ["q0", "q1"]
    # Nor does an edited question text under the same ids: its old hits would be paired with the new text.
    with pytest.raises(RuntimeError):
        retrieve(FixedRetriever(flavour="boom-after-first"), QUESTIONS, k=2, out=tmp_path / "run3", batch_size=2,
                 progress=False)
    edited = [dataclasses.replace(q, text=q.text + " (edited)") if q.id == "q0" else q for q in QUESTIONS]
    fresh = FixedRetriever()
    retrieve(fresh, edited, k=2, out=tmp_path / "run3", batch_size=2, progress=False)
    assert fresh.calls[0] == ["q0", "q1"]


def test_contract_checker_reports_each_broken_rule():
    assert check_retriever(FixedRetriever()).ok
    report = check_retriever(FixedRetriever(flavour="unsorted"))
    assert not report.ok and "not ordered best first" in report.failures[0].detail

    class Flaky(FixedRetriever):
        counter = 0

        def search(self, questions, *, k):
            Flaky.counter += 1
            hits = super().search(questions, k=k)
            return [[Hit(h.passage, h.score + Flaky.counter) for h in row] for row in hits]

    report = check_retriever(Flaky())
    assert [c.name for c in report.failures] == ["deterministic", "batch = one by one"]

    class NoKeyword:
        name = "nok"

        def search(self, questions, depth):
            return [[] for _ in questions]

    assert [c.name for c in check_retriever(NoKeyword()).failures] == ["search signature"]
    with pytest.raises(AssertionError, match="FAILED"):
        from berds.testing import assert_retriever_contract

        assert_retriever_contract(FixedRetriever(flavour="duplicates"))
    report = check_retriever("not_a_module_abc:Thing")
    assert report.failures[0].name == "builds" and "cannot import" in report.failures[0].detail


@pytest.mark.java
def test_builtin_bm25_passes_the_contract_on_the_tiny_corpus(tmp_path):
    report = check_retriever("bm25", workdir=tmp_path)
    assert report.ok, report.summary()
    assert next(c for c in report.checks if c.name == "sanity").status == "pass"


def test_tart_reranks_the_first_stage_by_cross_encoder_probability(tmp_path):
    pytest.importorskip("transformers")
    import torch

    from berds.indexes.encoders import EncoderSpec
    from berds.indexes.faiss import build_dense_index
    from berds.retrievers.tart import TartRetriever, TartScorer, enc_t5_class
    from retrieval_fixtures import tiny_bert, tiny_t5_classifier, word_store

    store = word_store(tmp_path / "store", n=40)
    bert = tiny_bert(tmp_path / "bert")
    build_dense_index(store, tmp_path / "idx", encoder=EncoderSpec(name="tiny", model=str(bert), max_length=32), progress=False)
    t5 = tiny_t5_classifier(tmp_path / "t5")
    with pytest.raises(BerdsError, match="not 'contriever-msmarco'"):
        TartRetriever(index=tmp_path / "idx", model=str(t5))  # the study's first stage is Contriever
    tart = TartRetriever(index=tmp_path / "idx", model=str(t5), first_stage_encoder="index", candidates=10)
    question = Question("q1", "apple river storm", ("x",))
    first = tart.first_stage.search([question], k=10)[0]
    reranked = tart.search([question], k=5)[0]
    # Independently: the same classifier applied by hand to "<s> instruction [SEP] q </s> passage </s>".
    from transformers import T5Tokenizer

    tok, model = T5Tokenizer.from_pretrained(t5), enc_t5_class().from_pretrained(t5).eval()
    unk = tok.unk_token_id  # T5 has no "<s>": TART's bos maps to the unknown token
    expected = {}
    for h in first:
        p = f"{h.passage.title} {h.passage.text}" if h.passage.title else h.passage.text
        ids = [unk] + tok(f"Retrieve a passage that answers this question. [SEP] {question.text}", add_special_tokens=False)["input_ids"]
        ids += [tok.eos_token_id] + tok(p, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        with torch.no_grad():
            hidden = model.encoder(input_ids=torch.tensor([ids])).last_hidden_state[:, 0]
            expected[h.passage.id] = torch.softmax(model.classifier(hidden), -1)[0, 1].item()
    best = sorted(expected, key=lambda pid: (-expected[pid], pid))[:5]
    assert [h.passage.id for h in reranked] == best
    assert [h.score for h in reranked] == pytest.approx([expected[p] for p in best], abs=1e-5)
    with pytest.raises(BerdsError, match="k <= 10"):
        tart.search([question], k=20)
    provenance = tart.provenance()
    assert provenance["reranker"]["bos_token_id"] == unk and provenance["first_stage"]["encoder"]["name"] == "tiny"
    assert isinstance(TartScorer(str(t5)).score("q", ["a", "b"])[0], float)


def test_cli_lists_retrievers_and_checks_one(capsys):
    from berds.cli import main

    main(["retrievers", "list"])
    out = capsys.readouterr().out
    assert "bm25" in out and "tart" in out and "built-in" in out
    main(["check-retriever", FIXED])
    assert "deterministic" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["check-retriever", FIXED, "--option", "flavour=unsorted"])
    assert exited.value.code == 1
    main(["encoders", "list"])
    assert "contriever-msmarco" in capsys.readouterr().out


def test_tiny_questions_have_their_answers_in_the_tiny_corpus():
    ids = {p.id for p in TINY_PASSAGES}
    from berds.testing import EXPECTED

    assert all(EXPECTED[q.id] in ids for q in tiny_questions())
    assert isinstance(TINY_PASSAGES[0], Passage)


def test_hits_from_store_attaches_texts_and_ranks_only_when_needed(tmp_path):
    from berds.corpora.docstore import write_passage_store
    from berds.retrievers.base import hits_from_store, is_ranked
    from berds.types import Passage, rank_hits

    store = write_passage_store([Passage(id=f"d{i}", text=f"text {i}", title=f"T{i}") for i in range(5)], tmp_path / "s")
    found = [[("d3", 2.0), ("d1", 1.5), ("d2", 1.5)],  # already in rank_hits order
             [("d4", 0.5), ("d0", 0.9), ("d2", 0.9)],  # not: scores rise, then a tie out of id order
             []]
    hits = hits_from_store(store, found)
    assert [[(h.passage.id, h.score) for h in hs] for hs in hits] == [
        [("d3", 2.0), ("d1", 1.5), ("d2", 1.5)], [("d0", 0.9), ("d2", 0.9), ("d4", 0.5)], []]
    assert hits[0][0].passage == store.get("d3") and all(is_ranked(hs) and hs == rank_hits(hs) for hs in hits)
    with pytest.raises(ValueError, match="must be a number"):
        hits_from_store(store, [[("d1", float("nan"))]])
    with pytest.raises(KeyError):
        hits_from_store(store, [[("nope", 1.0)]])

    class ShortStore:  # a store of someone else's that hands back fewer passages than ids
        def get_many(self, ids):
            return store.get_many(ids)[:-1]

    with pytest.raises(BerdsError, match="gave 2 passages for the 3 hits"):
        hits_from_store(ShortStore(), found[:1])


class _IndexedRetriever(FixedRetriever):
    """FixedRetriever whose provenance names the corpus its index was built from."""

    fingerprint = "corpus-a"

    def provenance(self):
        return {"corpus": {"path": "corpus", "passages": 12, "fingerprint": self.fingerprint}}


def test_a_partial_run_of_another_corpus_is_not_resumed(tmp_path):
    # Same retriever, options, k and questions, but the index at the same path was rebuilt over another corpus
    # between the stop and the restart: the old hits must not be mixed into the new run.
    with pytest.raises(RuntimeError, match="killed"):
        retrieve(_IndexedRetriever(flavour="boom-after-first"), QUESTIONS, k=2, out=tmp_path / "run", batch_size=2,
                 progress=False)
    rebuilt = _IndexedRetriever()
    rebuilt.fingerprint = "corpus-b"
    run = retrieve(rebuilt, QUESTIONS, k=2, out=tmp_path / "run", batch_size=2, progress=False)
    assert rebuilt.calls[0] == ["q0", "q1"] and run.manifest["timing"]["resumed"] == 0
    # the same corpus still resumes
    with pytest.raises(RuntimeError, match="killed"):
        retrieve(_IndexedRetriever(flavour="boom-after-first"), QUESTIONS, k=2, out=tmp_path / "run2", batch_size=2,
                 progress=False)
    same = _IndexedRetriever()
    assert retrieve(same, QUESTIONS, k=2, out=tmp_path / "run2", batch_size=2, progress=False).manifest["timing"]["resumed"] == 2


def test_a_hit_holding_an_id_instead_of_a_passage_is_named():
    # Hit("p1", 1.0) builds (Hit does not check its passage); the contract check ended in an AttributeError
    from berds.retrievers.base import contract_problems

    problems = contract_problems(QUESTIONS[:1], [[Hit("p1", 2.0), Hit("p2", 1.0)]], 2)
    assert problems == ["question 'q0': a Hit holds a str where a berds.types.Passage belongs "
                        "(Hit(Passage(id, text, title), score))"]


READY = FixedRetriever()  # a ready instance named by module:attr


class _CloseRaises(FixedRetriever):
    def close(self):
        raise OSError("close failed")


def test_contract_check_of_a_ready_instance_by_name_and_of_a_close_that_raises():
    # module:attr naming an instance failed "builds" (it was handed corpus=, which an instance cannot take);
    # a close() that raised ended the checker in a traceback instead of a failed check
    report = check_retriever(f"{__name__}:READY")
    assert report.ok, report.summary()
    assert report.checks[0].detail == "a ready instance, checked as it is"
    report = check_retriever(f"{__name__}:_CloseRaises")
    assert [(c.name, c.detail) for c in report.failures] == [("close", "close() raised OSError: close failed")]


def test_a_retriever_whose_close_raises_keeps_its_run(tmp_path, capsys):
    # the hits were found and the partial file held them, but close() raised before the run was saved: each rerun
    # resumed, finished, and failed the same way
    from berds.types import Question

    questions = [Question("q1", "first?", ("a", "b")), Question("q2", "second?", ("c", "d"))]
    run = retrieve(f"{__name__}:_CloseRaises", questions, k=3, out=tmp_path / "run", progress=False)
    assert load_run(tmp_path / "run").hits.keys() == run.hits.keys() == {"q1", "q2"}
    assert "failed to close (OSError: close failed); its hits are kept" in " ".join(capsys.readouterr().err.split())


def test_tart_and_mmr_embeddings_run_in_float32_from_a_half_precision_checkpoint(tmp_path):
    """transformers 5 keeps a float16 checkpoint in float16 when no dtype is passed (4.x: float32), so scores
    changed with the library version; TART and the MMR sentence encoder ask for float32 unless told otherwise."""
    import numpy as np
    import torch

    from berds.rerank.embeddings import SentenceEncoder
    from berds.retrievers.tart import TartScorer, enc_t5_class
    from retrieval_fixtures import tiny_bert, tiny_t5_classifier

    t5 = tiny_t5_classifier(tmp_path / "t5")
    enc_t5_class().from_pretrained(t5).half().save_pretrained(t5)
    assert next(TartScorer(str(t5)).model.parameters()).dtype == torch.float32
    assert next(TartScorer(str(t5), dtype="bfloat16").model.parameters()).dtype == torch.bfloat16

    from transformers import AutoModel

    bert = tiny_bert(tmp_path / "bert")
    AutoModel.from_pretrained(bert).half().save_pretrained(bert)
    encoder = SentenceEncoder(str(bert), pooling="cls", device="cpu")
    vectors = encoder.encode(["apple river storm"])
    assert vectors.dtype == np.float32 and next(encoder._load().parameters()).dtype == torch.float32
