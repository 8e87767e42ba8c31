"""`berds retrieve -r pyserini-faiss`: pyserini's FAISS indexes (prebuilt `wikipedia-dpr-100w.dpr-multi` or a folder
laid out as pyserini writes one), queries encoded as pyserini's query encoders do, texts from a Lucene index's
stored documents or a berds store. Tiny random-weight DPR / Contriever models are built here; the pyserini
comparisons run pyserini's own encoders and FaissSearcher on the same index."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager

import numpy as np
import pytest

from berds.errors import BerdsError, InputError
from berds.runs import load_run
from berds.testing import rankings_agree
from berds.types import Question
from cli_fixtures import cli
from retrieval_fixtures import SPECIALS, WORDS, dpr_style_lucene_index, random_passages, tiny_bert

PASSAGES = random_passages(40, seed=3, prefix="w")
QUESTIONS = [Question(f"q{i}", text, ("a", "b")) for i, text in enumerate(
    ["apple river stone", "market harbor bridge tower", "kiwi lemon mango", "cloud storm field forest olive"])]
DPR_MULTI = "faiss.wikipedia-dpr-100w.dpr_multi.20200127.f403c3.fe307ef2e60ab6e6f3ad66e24a4144ae"
WIKI_LUCENE = "lucene-index.wikipedia-dpr-100w.20210120.d1b9e6.7b58c08da992b2ea7e96667f0b176651"


def tiny_dpr(folder, cls_name, seed):
    import torch
    from transformers import BertTokenizer, DPRConfig
    import transformers

    folder.mkdir(parents=True)
    config = DPRConfig(vocab_size=len(SPECIALS) + len(WORDS), hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    torch.manual_seed(seed)
    getattr(transformers, cls_name)(config).save_pretrained(folder)
    BertTokenizer(vocab={w: i for i, w in enumerate(SPECIALS + WORDS)}).save_pretrained(folder)
    return folder


def write_layout(folder, ids, vectors, *, metric="ip"):
    """The folder pyserini's FaissRepresentationWriter writes: ``index`` (IndexFlatIP) and ``docid``."""
    import faiss

    folder.mkdir(parents=True)
    index = faiss.IndexFlatIP(vectors.shape[1]) if metric == "ip" else faiss.IndexFlatL2(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    faiss.write_index(index, str(folder / "index"))
    (folder / "docid").write_text("".join(f"{i}\n" for i in ids))
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"q": tiny_dpr(root / "tiny-dpr-q", "DPRQuestionEncoder", 0),
            "ctx": tiny_dpr(root / "tiny-dpr-ctx", "DPRContextEncoder", 1),
            "contriever": tiny_bert(root / "tiny-contriever", seed=2)}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from berds.corpora.docstore import PassageStore, PassageStoreWriter

    folder = tmp_path_factory.mktemp("store") / "store"
    with PassageStoreWriter(folder) as w:
        for p in PASSAGES:
            w.add(p)
    return PassageStore.open(folder)


@pytest.fixture(scope="module")
def contriever_index(models, tmp_path_factory):
    """A Contriever index in pyserini's layout, passages encoded by berds' mean-pooling encoder (no JVM)."""
    from berds.indexes.encoders import Encoder, encoder_spec

    vectors = Encoder(encoder_spec(f"transformers:{models['contriever']}")).encode_passages(PASSAGES)
    return write_layout(tmp_path_factory.mktemp("faiss") / "contriever", [p.id for p in PASSAGES], vectors)


@contextmanager
def pyserini_encode():
    """``pyserini.encode`` (and so pyserini.search.faiss): it starts the JVM through pyserini.util, so berds'
    Java 21 goes first, and its OpenAI module builds a client at import, which wants a key it never uses here."""
    from berds.java import start_jvm

    start_jvm()
    old = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = old or "unused-by-these-tests"
    try:
        import pyserini.encode
        import pyserini.search.faiss

        yield pyserini
    finally:
        if old is None:
            del os.environ["OPENAI_API_KEY"]


@pytest.fixture(scope="module")
def dpr_index(models, tmp_path_factory):
    """The DPR index as ``python -m pyserini.encode ... output --to-faiss`` builds it: pyserini's DPR context
    encoder (``title [SEP] text``) and its FaissRepresentationWriter."""
    with pyserini_encode():
        from pyserini.encode import DprDocumentEncoder
        from pyserini.encode.optional import FaissRepresentationWriter

        encoder = DprDocumentEncoder(str(models["ctx"]), device="cpu")
        vectors = encoder.encode(texts=[p.text for p in PASSAGES], titles=[p.title for p in PASSAGES])
        folder = tmp_path_factory.mktemp("faiss") / "dpr"
        writer = FaissRepresentationWriter(str(folder), dimension=vectors.shape[1])
        with writer:  # (its __enter__ returns None)
            writer.write({"id": [p.id for p in PASSAGES], "vector": vectors})
    return folder


@pytest.fixture(scope="module")
def lucene_texts(tmp_path_factory):
    """The passages as a Lucene index with stored raw documents, DPR-Wikipedia style (``"Title"\\ntext``)."""
    return dpr_style_lucene_index(tmp_path_factory.mktemp("lucene"), [(p.id, p.title, p.text) for p in PASSAGES])


def pairs(hits):
    return [(h.passage.id, h.score) for h in hits]


def test_encoder_class_follows_pyserinis_keywords(models):
    from berds.retrievers.pyserini_faiss import infer_encoder_class, query_encoder_spec

    assert infer_encoder_class("facebook/dpr-question_encoder-multiset-base") == "dpr"
    assert infer_encoder_class("facebook/contriever-msmarco") == "contriever"
    assert infer_encoder_class("castorini/dkrr-dpr-nq-retriever") == "dkrr"  # (dkrr comes before dpr)
    assert infer_encoder_class("BAAI/bge-base-en-v1.5") == "auto"
    assert infer_encoder_class(str(models["contriever"])) == "contriever"  # a folder: its own name only
    spec = query_encoder_spec("facebook/dpr-question_encoder-multiset-base")
    assert (spec.model_class, spec.pooling, spec.normalize) == ("DPRQuestionEncoder", "pooler", False)
    spec = query_encoder_spec("facebook/contriever", query_prefix="query:")
    assert (spec.pooling, spec.normalize, spec.query_prefix) == ("mean", False, "query: ")
    assert query_encoder_spec("x/y", "auto", pooling="mean", l2_norm=True).normalize
    for args, kwargs, message in ((("castorini/dkrr-dpr-nq-retriever",), {}, "'dkrr' query encoder"),
                                  (("facebook/dpr-x",), {"query_prefix": "q:"}, "takes no query_prefix"),
                                  (("facebook/contriever",), {"pooling": "cls"}, "apply to encoder_class=auto")):
        with pytest.raises(BerdsError, match=message):
            query_encoder_spec(*args, **kwargs)


def test_search_a_folder_with_texts_from_a_store(models, store, contriever_index):
    """No JVM: a folder index, an encoder named by path, passages from a berds store; FAISS's inner products."""
    import faiss

    from berds.retrievers.pyserini_faiss import PyseriniFaissRetriever

    r = PyseriniFaissRetriever(index=contriever_index, encoder=str(models["contriever"]), corpus=store)
    found = r.search(QUESTIONS, k=5)
    vectors = r.encode(QUESTIONS)
    scores, rows = faiss.read_index(str(contriever_index / "index")).search(vectors, 5)
    for hits, srow, irow in zip(found, scores, rows):
        assert [h.passage.id for h in hits] == [PASSAGES[i].id for i in irow]
        assert np.allclose([h.score for h in hits], srow) and [h.passage for h in hits] == [PASSAGES[i] for i in irow]
    info = r.provenance()
    assert info["index_type"] == "pyserini-faiss" and info["prebuilt"] is None and info["documents"] == len(PASSAGES)
    assert info["query_encoder"]["encoder_class"] == "contriever" and info["query_encoder"]["default_from"] is None
    assert info["corpus"]["fingerprint"] == store.fingerprint and info["texts"]["kind"] == "berds passage store"


def test_refusals_are_one_line(models, store, contriever_index, tmp_path):
    from berds.retrievers.pyserini_faiss import PyseriniFaissRetriever

    def refused(error, match, **options):
        with pytest.raises(error, match=match) as caught:
            PyseriniFaissRetriever(**{"encoder": str(models["contriever"]), "corpus": store, **options})
        assert "\n" not in str(caught.value)
        return str(caught.value)

    vectors = np.random.default_rng(0).standard_normal((len(PASSAGES), 16)).astype(np.float32)
    ids = [p.id for p in PASSAGES]
    short = write_layout(tmp_path / "short", ids, vectors)
    (short / "docid").write_text("".join(f"{i}\n" for i in ids[:-1]))
    message = refused(InputError, "has 39 ids but the FAISS index beside it holds 40 vectors", index=short)
    assert str(short / "docid") in message
    refused(InputError, "not an inner-product", index=write_layout(tmp_path / "l2", ids, vectors, metric="l2"))
    no_docid = write_layout(tmp_path / "nodocid", ids, vectors)
    (no_docid / "docid").unlink()
    refused(InputError, "has no 'docid' file", index=no_docid)
    refused(BerdsError, "name the query encoder", index=contriever_index, encoder=None)
    refused(BerdsError, "ef_search applies to HNSW indexes", index=contriever_index, ef_search=64)
    refused(BerdsError, "not both", index=contriever_index, texts="wikipedia-dpr-100w")
    refused(BerdsError, "say where the passage texts", index=contriever_index, corpus=None)
    # a passage id the text source does not hold: one line naming it, the index and the source
    other = write_layout(tmp_path / "other", ids[:-1] + ["not-in-store"], vectors)
    r = PyseriniFaissRetriever(index=other, encoder=str(models["contriever"]), corpus=store)
    with pytest.raises(BerdsError) as caught:
        r.search_vectors(vectors[-1:], k=1)  # (its own vector: the missing passage ranks first)
    assert "'not-in-store'" in str(caught.value) and str(other) in str(caught.value)
    assert str(store.path) in str(caught.value) and "\n" not in str(caught.value)
    # an encoder of another width than the index
    wide = write_layout(tmp_path / "wide", ids, np.ones((len(ids), 8), dtype=np.float32))
    r = PyseriniFaissRetriever(index=wide, encoder=str(models["contriever"]), corpus=store)
    with pytest.raises(BerdsError, match="gives 16-d vectors but the index .* holds 8-d"):
        r.search(QUESTIONS, k=3)


def test_cli_with_a_store(models, store, contriever_index, tmp_path, capsys, monkeypatch):
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": q.id, "question": q.text, "perspectives": list(q.perspectives)})
                                 + "\n" for q in QUESTIONS))
    code, _, err = cli(capsys, monkeypatch, "retrieve", "-r", "pyserini-faiss", "--index", contriever_index,
                       "-o", f"encoder={models['contriever']}", "--corpus", store.path, "--questions", questions,
                       "--k", "3", "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    run = load_run(tmp_path / "run")
    assert all(len(run.hits[q.id]) == 3 for q in QUESTIONS)
    assert run.manifest["retriever"]["query_encoder"]["encoder"] == str(models["contriever"])
    assert run.manifest["corpus"]["fingerprint"] == store.fingerprint
    assert run.manifest["index"] == str(contriever_index.resolve())


@pytest.mark.java
@pytest.mark.slow  # imports pyserini.encode (about 10 s here)
def test_equals_pyserinis_faiss_searcher(models, store, dpr_index, contriever_index):
    """Query vectors as pyserini's DprQueryEncoder / contriever AutoQueryEncoder make them, and the same rankings
    and scores as pyserini's FaissSearcher on the index pyserini built."""
    from berds.retrievers.pyserini_faiss import PyseriniFaissRetriever

    with pyserini_encode():
        from pyserini.encode import AutoQueryEncoder, DprQueryEncoder
        from pyserini.search.faiss import FaissSearcher

        for folder, make, encoder in (
                (dpr_index, lambda: DprQueryEncoder(str(models["q"])), models["q"]),
                (contriever_index, lambda: AutoQueryEncoder(str(models["contriever"]), pooling="mean", l2_norm=False),
                 models["contriever"])):
            theirs = make()
            ours = PyseriniFaissRetriever(index=folder, encoder=str(encoder), corpus=store)
            vectors = ours.encode(QUESTIONS)
            assert np.allclose(vectors, np.stack([theirs.encode(q.text) for q in QUESTIONS]), atol=1e-5)
            searcher = FaissSearcher(str(folder), theirs)
            by_text = searcher.batch_search([q.text for q in QUESTIONS], [q.id for q in QUESTIONS], k=10)
            by_vector = searcher.batch_search(vectors, [q.id for q in QUESTIONS], k=10)
            found = ours.search(QUESTIONS, k=10)
            for q, hits in zip(QUESTIONS, found):
                assert [(h.docid, float(h.score)) for h in by_vector[q.id]] == pairs(hits)  # the same vectors
                assert rankings_agree(pairs(hits), [(h.docid, h.score) for h in by_text[q.id]])  # its own encoding
                assert len(hits) == 10


@pytest.mark.java
@pytest.mark.slow  # a Lucene index and pyserini's table (JVM)
def test_prebuilt_names_with_texts_from_the_paired_lucene_index(models, dpr_index, lucene_texts, tmp_path,
                                                                capsys, monkeypatch):
    from berds.retrievers.pyserini_faiss import PyseriniFaissRetriever, resolve_faiss_index

    monkeypatch.setenv("PYSERINI_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BerdsError) as caught:
        resolve_faiss_index("wikipedia-dpr-100w.dpr-multi")
    message = str(caught.value)
    assert "'wikipedia-dpr-100w.dpr-multi' is not downloaded" in message and DPR_MULTI in message
    assert "download_prebuilt_index" in message and "\n" not in message
    for name, match in (("wikipedia-dpr-100w", "is a BM25 .* -r pyserini"),
                        ("wikipedia-dpr-100w.dpr-mult", "did you mean 'wikipedia-dpr-100w.dpr-multi'")):
        with pytest.raises(BerdsError, match=match):
            resolve_faiss_index(name)
    # where pyserini unpacks them: both found by name, the texts by the FAISS index's pairing
    shutil.copytree(dpr_index, tmp_path / "cache" / "indexes" / DPR_MULTI)
    shutil.copytree(lucene_texts, tmp_path / "cache" / "indexes" / WIKI_LUCENE)
    # the default encoder is pyserini's (a hub name, not in this machine's cache): refused, naming it
    with pytest.raises(BerdsError, match="facebook/dpr-question_encoder-multiset-base"):
        PyseriniFaissRetriever(index="wikipedia-dpr-100w.dpr-multi")
    assert "note: query encoder facebook/dpr-question_encoder-multiset-base, the one pyserini/2cr/triviaqa.yaml" \
        in capsys.readouterr().err
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": q.id, "question": q.text, "perspectives": list(q.perspectives)})
                                 + "\n" for q in QUESTIONS))
    code, _, err = cli(capsys, monkeypatch, "retrieve", "-r", "pyserini-faiss", "--index",
                       "wikipedia-dpr-100w.dpr-multi", "-o", f"encoder={models['q']}", "--questions", questions,
                       "--k", "4", "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    run = load_run(tmp_path / "run")
    by_id = {p.id: p for p in PASSAGES}
    for q in QUESTIONS:  # title and text from the stored '"Title"\ntext' contents
        assert [(h.passage.title, h.passage.text) for h in run.hits[q.id]] == \
            [(by_id[h.passage.id].title, by_id[h.passage.id].text) for h in run.hits[q.id]]
    # and the same ranking as with the store for texts
    direct = PyseriniFaissRetriever(index=dpr_index, encoder=str(models["q"]), texts=lucene_texts)
    assert [pairs(h) for h in direct.search(QUESTIONS, k=4)] == \
        [[(h.passage.id, h.score) for h in run.hits[q.id]] for q in QUESTIONS]
    retriever = run.manifest["retriever"]
    assert retriever["prebuilt"]["name"] == "wikipedia-dpr-100w.dpr-multi"
    assert retriever["prebuilt"]["tarball"] == "faiss.wikipedia-dpr-100w.dpr_multi.20200127.f403c3.tar.gz"
    assert retriever["prebuilt"]["md5"] == "fe307ef2e60ab6e6f3ad66e24a4144ae" and retriever["pyserini"]
    assert retriever["texts"]["prebuilt"]["name"] == "wikipedia-dpr-100w"
    assert retriever["query_encoder"]["encoder_class"] == "dpr"
    # a docid the Lucene index lacks: one line naming it and the Lucene index
    odd = tmp_path / "odd"
    shutil.copytree(dpr_index, odd)
    lines = (odd / "docid").read_text().splitlines()
    (odd / "docid").write_text("\n".join(["nowhere"] + lines[1:]) + "\n")
    r = PyseriniFaissRetriever(index=odd, encoder=str(models["q"]), texts="wikipedia-dpr-100w")
    import faiss

    with pytest.raises(BerdsError, match="passage 'nowhere' of the FAISS index .* is not in the Lucene index "
                                         "wikipedia-dpr-100w"):
        r.search_vectors(faiss.read_index(str(odd / "index")).reconstruct(0)[None, :], k=1)


def test_an_hnsw_index_with_ef_search(models, store, tmp_path):
    """pyserini.index.faiss --hnsw writes IndexHNSWFlat (inner product); ef_search sets its search depth."""
    import faiss

    from berds.retrievers.pyserini_faiss import PyseriniFaissRetriever

    vectors = np.random.default_rng(1).standard_normal((len(PASSAGES), 16)).astype(np.float32)
    hnsw = faiss.IndexHNSWFlat(16, 8, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(vectors)
    (tmp_path / "hnsw").mkdir()
    faiss.write_index(hnsw, str(tmp_path / "hnsw" / "index"))
    (tmp_path / "hnsw" / "docid").write_text("".join(f"{p.id}\n" for p in PASSAGES))
    r = PyseriniFaissRetriever(index=tmp_path / "hnsw", encoder=str(models["contriever"]), corpus=store, ef_search=64)
    assert r.index.hnsw.efSearch == 64 and r.provenance()["faiss_index"] == "IndexHNSWFlat"
    [hits] = r.search_vectors(vectors[7:8], k=3)
    exact = np.argsort(-(vectors @ vectors[7]))[:3]  # 40 vectors, ef 64: the graph search is exact here
    assert [h.passage.id for h in hits] == [PASSAGES[i].id for i in exact]


def test_equal_scores_are_ranked_by_passage_id_as_the_retriever_contract_says(models, store, tmp_path):
    """FAISS leaves equal scores in row order; the contract ranks them by passage id, or `retrieve` refuses the
    batch as a broken contract (an index holding a passage twice, as Wikipedia dumps do, ties exactly)."""
    from berds.retrievers.base import contract_problems
    from berds.retrievers.pyserini_faiss import PyseriniFaissRetriever

    vectors = np.random.default_rng(2).standard_normal((len(PASSAGES), 16)).astype(np.float32)
    vectors[10] = vectors[3]  # rows 3 and 10 tie (flat FAISS hands them back as rows 10, 3)
    ids = [p.id for p in PASSAGES]
    folder = write_layout(tmp_path / "ties", ids, vectors)
    r = PyseriniFaissRetriever(index=folder, encoder=str(models["contriever"]), corpus=store)
    [hits] = r.search_vectors(vectors[3:4], k=3)
    assert ids[3] < ids[10] and [h.passage.id for h in hits[:2]] == [ids[3], ids[10]]
    assert hits[0].score == hits[1].score
    assert contract_problems(QUESTIONS[:1], [hits], 3) == []

