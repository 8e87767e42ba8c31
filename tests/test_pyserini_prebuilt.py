"""`berds retrieve -r pyserini`: a Lucene index built the way pyserini's are (JsonCollection, `contents`, stored
raw docs and docvectors), searched by path and by a prebuilt name resolved through pyserini's table and cache."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from berds.errors import BerdsError
from berds.retrievers.pyserini_index import passage_from_raw
from berds.runs import load_run
from conftest import berds_cmd, subprocess_env
from retrieval_fixtures import dpr_style_lucene_index

DOCS = [("w1", "Aaron", "Aaron is a prophet and high priest, the brother of Moses."),
        ("w2", "Zoo", "A zoo keeps animals in enclosures for the public to see."),
        ("w3", "Phones", "Smartphones in schools distract pupils from learning and teachers from teaching."),
        ("w4", "School phones", "Schools that allow phones say pupils use them for homework and to call home."),
        ("w5", "Nuclear power", "Nuclear power emits little carbon but leaves long-lived waste.")]


def test_raw_documents_to_passages():
    assert passage_from_raw("a", json.dumps({"id": "a", "contents": '"T"\nbody'})) == \
        passage_from_raw("a", json.dumps({"id": "a", "title": "T", "text": "body"}))
    p = passage_from_raw("a", json.dumps({"id": "a", "contents": '"T"\nbody'}), title="none")
    assert (p.title, p.text) == ("", '"T"\nbody')
    p = passage_from_raw("a", json.dumps({"id": "a", "contents": "Head\nbody"}), title="first-line")
    assert (p.title, p.text) == ("Head", "body")
    assert passage_from_raw("a", json.dumps({"contents": "just text"})).text == "just text"
    with pytest.raises(BerdsError, match="--storeRaw"):
        passage_from_raw("a", None)


@pytest.fixture(scope="module")
def pyserini_index(tmp_path_factory):
    """``python -m pyserini.index.lucene --collection JsonCollection ... --storePositions --storeDocvectors
    --storeRaw``, run in-process through Anserini's IndexCollection as pyserini's module does."""
    return dpr_style_lucene_index(tmp_path_factory.mktemp("pyserini"), DOCS)


def questions_file(folder):
    path = folder / "q.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "Should smartphones be banned in schools?",
                                "perspectives": ["Phones distract pupils.", "Phones help homework."]}) + "\n")
    return path


@pytest.mark.java
def test_search_by_path_reads_raw_passages(pyserini_index, tmp_path):
    from berds.retrievers.pyserini_index import PyseriniIndexRetriever
    from berds.types import Question

    retriever = PyseriniIndexRetriever(index=pyserini_index)
    [hits] = retriever.search([Question("q1", "Should smartphones be banned in schools?", ("a", "b"))], k=3)
    # the two passages about phones in schools, the school-and-phones one... only those share the query's words
    assert [h.passage.id for h in hits] == ["w3", "w4"] and hits[0].score > hits[1].score > 0
    texts = {i: (t, x) for i, t, x in DOCS}
    assert [(h.passage.title, h.passage.text) for h in hits] == [texts["w3"], texts["w4"]]
    info = retriever.provenance()
    assert info["prebuilt"] is None and info["documents"] == len(DOCS) and info["index_type"] == "pyserini-lucene"
    with pytest.raises(BerdsError, match="not a Lucene index"):
        PyseriniIndexRetriever(index=tmp_path)


@pytest.mark.java
@pytest.mark.slow  # two CLI processes that each start a JVM (about 10 s)
def test_prebuilt_name_resolves_through_pyserini_table_and_cache(pyserini_index, tmp_path):
    env = subprocess_env(PYSERINI_CACHE=str(tmp_path / "cache"))
    args = ["retrieve", "-r", "pyserini", "--index", "wikipedia-dpr-100w", "--questions",
            str(questions_file(tmp_path)), "--k", "2", "--out", str(tmp_path / "run"), "--quiet"]
    proc = subprocess.run(berds_cmd(*args), capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and "'wikipedia-dpr-100w' is not downloaded" in lines[0]
    expected = tmp_path / "cache" / "indexes" / ("lucene-index.wikipedia-dpr-100w.20210120.d1b9e6."
                                                 "7b58c08da992b2ea7e96667f0b176651")
    assert str(expected) in lines[0] and "Traceback" not in proc.stderr
    # the index where pyserini would have unpacked it: found by its name, no download
    shutil.copytree(pyserini_index, expected)
    proc = subprocess.run(berds_cmd(*args), capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "run")
    assert [h.passage.id for h in run.hits["q1"]][:1] == ["w3"] and run.hits["q1"][0].passage.title == "Phones"
    prebuilt = run.manifest["retriever"]["prebuilt"]
    assert prebuilt["name"] == "wikipedia-dpr-100w"
    assert prebuilt["tarball"] == "lucene-index.wikipedia-dpr-100w.20210120.d1b9e6.tar.gz"
    assert prebuilt["md5"] == "7b58c08da992b2ea7e96667f0b176651"
    assert run.manifest["index"] == str(expected.resolve()) and run.manifest["retriever"]["pyserini"]
    # names pyserini does not know, and its dense variants, are refused in one line (in-process: the JVM is up)
    from berds.retrievers.pyserini_index import resolve_index

    for name, message in (("wikipedia-dpr-100", "did you mean 'wikipedia-dpr-100w'"),
                          ("wikipedia-dpr-100w.dpr-multi", "is a dense index")):
        with pytest.raises(BerdsError, match=message) as caught:
            resolve_index(name)
        assert "\n" not in str(caught.value)
