"""Tiny models and corpora for the retrieval tests, built in the test run (nothing downloaded).

* ``tiny_bert(folder)``: a 1-layer, 16-d random-weight BERT with a WordPiece vocabulary written here;
* ``tiny_t5_classifier(folder)``: a 2-layer random-weight T5 encoder with TART's classification head and
  a unigram tokenizer built from a word list here;
* ``word_store(folder, ...)``: a passage store of random sentences over ``WORDS`` (optionally grouped).
"""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ("apple banana cherry date fig grape kiwi lemon mango nut olive pear plum quince "
         "river stone cloud storm field forest tower bridge market harbor").split()
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_bert(folder: Path, seed: int = 0, hidden: int = 16) -> Path:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS)}
    tokenizer = BertTokenizer(vocab=vocab)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_t5_classifier(folder: Path, seed: int = 0) -> Path:
    import torch
    from transformers import T5Config, T5Tokenizer

    from berds.retrievers.tart import enc_t5_class

    folder.mkdir(parents=True, exist_ok=True)
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    pieces += [("▁" + w, -1.0) for w in WORDS + ["retrieve", "a", "passage", "that", "answers", "this", "question."]]
    pieces += [(c, -5.0) for c in "abcdefghijklmnopqrstuvwxyzR[]."]
    tokenizer = T5Tokenizer(vocab=pieces, extra_ids=0)
    config = T5Config(vocab_size=len(tokenizer), d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2,
                      num_labels=2, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(seed)
    enc_t5_class()(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def random_passages(n: int, seed: int = 0, prefix: str = "p", min_words: int = 4, max_words: int = 12):
    from berds.types import Passage

    rng = random.Random(seed)
    return [Passage(f"{prefix}{i:04d}", " ".join(rng.choices(WORDS, k=rng.randint(min_words, max_words))),
                    title=rng.choice(WORDS) if i % 3 else "") for i in range(n)]


def word_store(folder: Path, n: int = 120, seed: int = 0, groups: list[str] | None = None):
    """A store of ``n`` random passages; with ``groups`` they are dealt round-robin into those groups."""
    from berds.corpora.docstore import PassageStoreWriter, PassageStore

    passages = random_passages(n, seed)
    with PassageStoreWriter(folder) as w:
        for i, p in enumerate(passages):
            w.add(p, group=groups[i % len(groups)] if groups else None)
    return PassageStore.open(folder)


class InterruptedStore:
    """A real passage store whose stream of passages stops after ``batches`` batches of 50 with a
    KeyboardInterrupt, as a build killed part way through would."""

    def __init__(self, inner, batches: int):
        self.inner, self.path, self.fingerprint, self.batches = inner, inner.path, inner.fingerprint, batches

    def __len__(self):
        return len(self.inner)

    def groups(self):
        return self.inner.groups()

    def iter_batches(self, n):
        for i, batch in enumerate(self.inner.iter_batches(50)):
            if i == self.batches:
                raise KeyboardInterrupt
            yield batch


def dpr_style_lucene_index(root: Path, docs) -> Path:
    """``(id, title, text)`` documents as a Lucene index the way pyserini builds its DPR Wikipedia ones:
    ``python -m pyserini.index.lucene --collection JsonCollection ... --storePositions --storeDocvectors --storeRaw``
    over ``{"id", "contents": '"Title"\\ntext'}`` records, run in-process through Anserini's IndexCollection."""
    import json

    from berds.java import autoclass, start_jvm

    start_jvm()
    (root / "collection").mkdir(parents=True)
    (root / "collection" / "docs.jsonl").write_text(
        "".join(json.dumps({"id": i, "contents": f'"{t}"\n{x}'}) + "\n" for i, t, x in docs))
    autoclass("io.anserini.index.IndexCollection").main(
        ["-collection", "JsonCollection", "-input", str(root / "collection"), "-index", str(root / "index"),
         "-generator", "DefaultLuceneDocumentGenerator", "-threads", "1", "-storePositions", "-storeDocvectors",
         "-storeRaw"])
    return root / "index"
