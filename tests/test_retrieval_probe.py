"""Retrieval probe findings: each test failed before the fix it names."""

from __future__ import annotations

import numpy as np
import pytest

from berds.types import Passage, Question
from retrieval_fixtures import InterruptedStore, tiny_bert

pytest.importorskip("faiss")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("probe-bert") / "model")


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_equal_scores_at_the_cut_are_taken_by_passage_id_as_an_exact_top_k_would(tmp_path, bert, kind):
    """FAISS breaks ties by row: with identical passages stored in reverse id order, k=2 returned the tied
    passage of the lower row ('m5'), not the lowest id ('a1') that the contract and a numpy top-k choose."""
    from berds.corpora.docstore import PassageStore, PassageStoreWriter
    from berds.indexes.encoders import EncoderSpec, load_encoder
    from berds.indexes.faiss import build_dense_index
    from berds.retrievers.dense import DenseRetriever

    with PassageStoreWriter(tmp_path / "store") as w:
        for pid in ["z9", "m5", "a1", "q7", "c3"]:  # same text: equal scores
            w.add(Passage(pid, "apple river storm", title=""))
        w.add(Passage("b2", "kiwi market", title=""))
    store = PassageStore.open(tmp_path / "store")
    spec = EncoderSpec(name="tiny", model=str(bert), pooling="mean", max_length=32)
    build_dense_index(store, tmp_path / "index", encoder=spec, faiss=kind, progress=False)
    retriever = DenseRetriever(index=tmp_path / "index", encoder=spec)
    question = Question("q", "apple river storm", ())
    encoder = load_encoder(spec)
    passages = list(store)
    scores = encoder.encode_passages(passages) @ encoder.encode_queries([question.text])[0]
    exact = sorted(zip(scores.tolist(), [p.id for p in passages]), key=lambda t: (-t[0], t[1]))
    for k in (1, 2, 3, 6, 10):
        got = [h.passage.id for h in retriever.search([question], k=k)[0]]
        assert got == [pid for _, pid in exact[:k]], k
    retriever.close()


def test_weights_replaced_in_the_model_folder_are_not_mixed_into_a_resumed_build_or_its_queries(tmp_path):
    """The spec names a folder: weights retrained in place resumed a killed build with the old shards (300 old
    vectors + the rest from the new model, silently) and searched a finished index with the new query model."""
    from berds.errors import BerdsError, InputError
    from berds.indexes.encoders import EncoderSpec
    from berds.indexes.faiss import build_dense_index
    from berds.retrievers.dense import DenseRetriever
    from retrieval_fixtures import word_store

    store = word_store(tmp_path / "store", n=200)
    model = tiny_bert(tmp_path / "model", seed=0)
    spec = EncoderSpec(name="tiny", model=str(model), pooling="mean", max_length=32)

    with pytest.raises(KeyboardInterrupt):
        build_dense_index(InterruptedStore(store, 2), tmp_path / "unfinished", encoder=spec, shard_size=50,
                          progress=False)
    build_dense_index(store, tmp_path / "finished", encoder=spec, progress=False)
    tiny_bert(model, seed=5)  # retrained: same folder, same config, other weights
    with pytest.raises(InputError, match="different settings"):
        build_dense_index(store, tmp_path / "unfinished", encoder=spec, shard_size=50, progress=False)
    with pytest.raises(InputError, match="different settings"):  # not kept as if it were this model's index
        build_dense_index(store, tmp_path / "finished", encoder=spec, progress=False)
    with pytest.raises(BerdsError, match="changed since index"):
        DenseRetriever(index=tmp_path / "finished", encoder=spec)
    rebuilt = build_dense_index(store, tmp_path / "unfinished", encoder=spec, shard_size=50, overwrite="always",
                                progress=False)
    assert rebuilt["encoded_now"] == 200
    retriever = DenseRetriever(index=tmp_path / "unfinished", encoder=spec)
    assert retriever.provenance()["encoder_files"] == rebuilt["encoder_files"]
    retriever.close()


class _NaNScores:
    """A plug-in whose hits carry NaN scores: ``Hit`` refuses them where the plug-in makes them."""

    name = "nan-scores"

    def search(self, questions, *, k):
        from berds.types import Hit

        return [[Hit(Passage("p1", "text"), float("nan"))] for _ in questions]


class _BuggyPlugin:
    """A plug-in failing with a ValueError of its own: that traceback is the plug-in's to read."""

    name = "buggy"

    def search(self, questions, *, k):
        return [int("not a number") for _ in questions]


def test_a_plugin_making_hits_with_nan_scores_gets_one_contract_line_not_a_traceback(tmp_path):
    """Hit(passage, nan) raised a ValueError out of berds.types through `berds retrieve` (a traceback)."""
    from berds.errors import BerdsError
    from berds.retrievers.retrieve import retrieve

    questions = [Question("q1", "apple", ())]
    with pytest.raises(BerdsError, match=r"'nan-scores' broke the retriever contract: score of passage 'p1' must "
                                         r"be a number, got nan"):
        retrieve(_NaNScores(), questions, k=3, out=tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "manifest.json").exists()
    with pytest.raises(ValueError, match="invalid literal") as caught:  # not turned into a contract error
        retrieve(_BuggyPlugin(), questions, k=3, progress=False)
    assert not isinstance(caught.value, BerdsError)


def test_a_build_stopped_in_bfloat16_is_not_resumed_in_float32(tmp_path, bert):
    """--dtype was not part of a build's settings: shards embedded in bfloat16 were resumed by a float32 build
    (and a finished bfloat16 index kept as if float32), one index mixing two precisions."""
    from berds.errors import InputError
    from berds.indexes.encoders import EncoderSpec
    from berds.indexes.faiss import build_dense_index
    from berds.retrievers.dense import DenseRetriever
    from retrieval_fixtures import word_store

    store = word_store(tmp_path / "store", n=150)
    spec = EncoderSpec(name="tiny", model=str(bert), pooling="mean", max_length=32)

    with pytest.raises(KeyboardInterrupt):
        build_dense_index(InterruptedStore(store, 2), tmp_path / "idx", encoder=spec, shard_size=50, dtype="bfloat16",
                          progress=False)
    with pytest.raises(InputError, match="different settings"):
        build_dense_index(store, tmp_path / "idx", encoder=spec, shard_size=50, progress=False)
    meta = build_dense_index(store, tmp_path / "idx", encoder=spec, shard_size=50, dtype="bfloat16", progress=False)
    assert meta["encoded_now"] == 50 and meta["dtype"] == "bfloat16"
    with pytest.raises(InputError, match="different settings"):
        build_dense_index(store, tmp_path / "idx", encoder=spec, shard_size=50, progress=False)
    retriever = DenseRetriever(index=tmp_path / "idx", encoder=spec, dtype="bfloat16")
    assert (retriever.provenance()["dtype"], retriever.provenance()["index_dtype"]) == ("bfloat16", "bfloat16")
    retriever.close()


def test_a_sentence_transformers_query_prefix_is_the_models_prompt_as_in_its_own_recipe(tmp_path, bert):
    """The prefix was glued to the text: a model whose pooling leaves the prompt out (include_prompt=False, how
    instruction models pool) then pooled the instruction's tokens too — other vectors than encode(prompt=)."""
    from sentence_transformers import SentenceTransformer, models

    from berds.indexes.encoders import Encoder, encoder_spec

    words = models.Transformer(str(bert), max_seq_length=32)
    pooling = models.Pooling(words.get_word_embedding_dimension(), pooling_mode="mean", include_prompt=False)
    SentenceTransformer(modules=[words, pooling]).save(str(tmp_path / "st"))
    prefix, texts = "apple river ", ["kiwi market", "storm"]
    encoder = Encoder(encoder_spec(f"sentence-transformers:{tmp_path / 'st'}", query_prefix=prefix,
                                   passage_prefix=prefix))
    reference = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    np.testing.assert_allclose(encoder.encode_queries(texts), reference.encode(texts, prompt=prefix), atol=1e-5)
    passages = [Passage("p1", "kiwi market", title="fig"), Passage("p2", "storm")]
    np.testing.assert_allclose(encoder.encode_passages(passages),
                               reference.encode(["fig kiwi market", "storm"], prompt=prefix), atol=1e-5)


def test_the_model_folder_fingerprint_sees_a_change_anywhere_in_the_weights(tmp_path):
    # It hashed each file's first and last MiB: weights changed between them, at the same size, kept the print.
    from berds.indexes.encoders import EncoderSpec, model_files_fingerprint

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    weights = folder / "model.safetensors"
    weights.write_bytes(bytes(5 << 20))
    spec = EncoderSpec(name="mine", model=str(folder))
    before = model_files_fingerprint(spec)["model"]
    with open(weights, "r+b") as f:
        f.seek(len(bytes(5 << 20)) // 2)
        f.write(b"\x01")
    assert model_files_fingerprint(spec)["model"] != before


def _per_hit_search(index, vectors, k):
    """DenseIndex.search as it was before issue 36 vectorised it (one Python step per hit): the reference the
    batched version must equal exactly, ties and their deeper searches included."""
    faiss_index = index._faiss_index()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    fetch = min(k + 1, faiss_index.ntotal)
    scores, rows = faiss_index.search(vectors, fetch)
    out = []
    for v, srow, rrow in zip(vectors, scores.tolist(), rows.tolist()):
        pairs = [(index.ids[r], s) for s, r in zip(srow, rrow) if r >= 0]
        depth = fetch
        while len(pairs) > k and pairs[k][1] == pairs[k - 1][1] and depth < faiss_index.ntotal:
            depth = min(depth * 2, faiss_index.ntotal)
            s2, r2 = faiss_index.search(v[None, :], depth)
            pairs = [(index.ids[r], s) for s, r in zip(s2[0].tolist(), r2[0].tolist()) if r >= 0]
        if len(pairs) > k and pairs[k][1] == pairs[k - 1][1]:
            pairs.sort(key=lambda t: (-t[1], t[0]))
        out.append(pairs[:k])
    return out


def test_batched_dense_search_equals_the_per_hit_search_with_ties_in_and_out_of_the_batch(tmp_path, bert):
    """Issue 36 replaced the per-hit Python around FAISS with one numpy step per batch: same ids, same scores,
    same order, for queries whose cut falls inside a tie (searched deeper) beside queries whose does not."""
    from berds.corpora.docstore import PassageStoreWriter
    from berds.indexes.encoders import EncoderSpec, load_encoder
    from berds.indexes.faiss import DenseIndex, build_dense_index

    words = ["apple", "river", "storm", "kiwi", "market", "harbor", "bridge", "lamp"]
    rng = np.random.default_rng(3)
    with PassageStoreWriter(tmp_path / "store") as w:
        for i in range(120):  # every 4th text repeats one of 3: equal scores, across many rows
            text = " ".join(words[:3 + i % 3]) if i % 4 == 0 else " ".join(rng.choice(words, size=5))
            w.add(Passage(f"p{(i * 37) % 120:03d}", text, title=""))
    spec = EncoderSpec(name="tiny", model=str(bert), pooling="mean", max_length=32)
    build_dense_index(tmp_path / "store", tmp_path / "index", encoder=spec, progress=False)
    index = DenseIndex(tmp_path / "index")
    index.open(per_group=False)
    queries = ["apple river storm", "kiwi market", "apple river storm kiwi", "lamp", "harbor bridge lamp"]
    vectors = load_encoder(spec).encode_queries(queries)
    assert index.ids.many(np.array([5, 0, 119, 5])) == [index.ids[5], index.ids[0], index.ids[119], index.ids[5]]
    ties_crossed = 0
    for k in (1, 3, 10, 29, 30, 31, 100, 120):
        got = index.search(vectors, k)
        assert got == _per_hit_search(index, vectors, k), k
        assert all(type(s) is float for pairs in got for _, s in pairs)
        ties_crossed += sum(len(p) == k and p[-1][1] in {s for _, s in q[k:k + 1]} for p, q in
                            zip(got, _per_hit_search(index, vectors, min(k + 1, 120))))
    assert ties_crossed > 0  # the deeper-search path was taken, not only the batched one
