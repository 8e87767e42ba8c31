"""A NUL character in an id is refused where whitespace is (issue 33, item 10): trec_eval and other C readers end
a field at it, so run.trec, an index's docids.txt and qrels could not carry it."""

from __future__ import annotations

import json

import pytest

from berds.errors import BerdsError, InputError
from berds.types import Hit, Passage, Question, Run

NUL_ID = "d\x001"


def test_run_files_ids_lists_and_qrels_refuse_a_nul_in_an_id(tmp_path):
    from berds.evaluate.qrels import qrels_text
    from berds.indexes.base import check_row_ids, write_ids
    from berds.runs import write_trec

    run = Run.from_lists([Question("q1", "why?", ("a",))], [[Hit(Passage(NUL_ID, "text"), 1.0)]])
    with pytest.raises(InputError, match=r"passage id 'd\\x001' holds a NUL character, which a TREC run file"):
        write_trec(run, tmp_path / "run.trec")
    assert not (tmp_path / "run.trec").exists()
    with pytest.raises(InputError, match=r"passage id 'd\\x001' holds a NUL character, which the index's id list"):
        check_row_ids(["d0", NUL_ID])
    with pytest.raises(InputError, match="holds a NUL character"):
        write_ids(tmp_path / "docids.txt", ["d0", NUL_ID])
    with pytest.raises(BerdsError, match="holds a NUL character, which the TREC qrels"):
        qrels_text([("q1", "0", NUL_ID, 1)])
    assert qrels_text([("q1", "0", "d1", 1)]) == "q1 0 d1 1\n"


def test_a_corpus_record_or_a_question_with_a_nul_in_its_id_is_refused_before_any_work(tmp_path):
    from berds.corpora.web import iter_jsonl_documents
    from berds.retrievers.retrieve import retrieve

    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "ok", "text": "a b"}) + "\n" + json.dumps({"id": NUL_ID, "text": "c d"}) + "\n")
    with pytest.raises(InputError, match=r"c.jsonl, line 2: the id 'd\\x001' \(field 'id'\) holds a NUL character"):
        list(iter_jsonl_documents([corpus]))

    class Never:
        name = "never"

        def search(self, questions, *, k):
            raise AssertionError("searched")

    with pytest.raises(InputError, match=r"question id 'q\\x00' holds a NUL character"):
        retrieve(Never(), [Question("q\x00", "why?", ("a",))], k=1, progress=False)


def test_exporting_judgements_with_a_nul_id_names_the_file_and_the_check_names_nul(tmp_path):
    # `berds export qrels EVAL` said only "question/passage id ... holds a NUL character" (no file), and eval's
    # early --qrels check told the user to "give ids without spaces" for a NUL
    from berds.evaluate.qrels import check_trec_ids, export_qrels

    judgements = tmp_path / "judgements.jsonl"
    judgements.write_text(json.dumps({"qid": "q1", "docid": NUL_ID, "rank": 1, "perspective": 0, "label": 1}) + "\n")
    with pytest.raises(InputError, match=r"judgements.jsonl: question/passage id 'q1' / 'd\\x001' holds a NUL "
                                         r"character, which the TREC qrels format cannot carry — evaluate a run"):
        export_qrels(judgements, tmp_path / "out.qrels")
    assert not (tmp_path / "out.qrels").exists()
    run = Run.from_lists([Question("q1", "why?", ("a",))], [[Hit(Passage(NUL_ID, "text"), 1.0)]])
    with pytest.raises(InputError, match="holds a NUL character, .* give ids without whitespace or NUL characters"):
        check_trec_ids("run.jsonl", run)
