"""Retrieval probe findings: each test failed before the fix it names."""

from __future__ import annotations

import numpy as np
import pytest

from berds.types import Passage, Question
from retrieval_fixtures import tiny_bert

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
