"""TART: an instruction-following cross-encoder reranking Contriever's top 100 (as in the BERDS study).

TART-full (``facebook/tart-full-flan-t5-xl``) is a FLAN-T5 encoder with a two-way classification head
on the first token's final state ("EncT5"). For a question ``q`` and a candidate passage ``p`` it reads::

    <s> {instruction} [SEP] {q} </s> {p} </s>

and the passage's score is ``softmax(logits)[1]``, the probability that ``p`` answers ``q`` under the
instruction. First-stage candidates come from a dense index built with ``contriever-msmarco``
(``first_stage_encoder`` checks it; ``"index"`` accepts whatever encoder the index has — used by tests
with tiny models). The top ``candidates`` (100) are rescored and the best ``k`` returned.

Exact-behaviour notes (named options, recorded in the manifest):

* ``instruction`` defaults to ``"Retrieve a passage that answers this question."``;
* ``bos_token`` is ``"<s>"`` as TART's tokenizer declares it. T5's vocabulary has no such piece, so it
  maps to the unknown-token id, exactly what the original tokenizer does; the id used is recorded;
* ``passage_format`` ``"title text"`` (default, as the Contriever first stage sees passages) or ``"text"``;
* inputs longer than ``max_length`` (512) lose the end of the passage first.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Sequence

from berds.errors import BerdsError
from berds.indexes.encoders import passage_text
from berds.lazy import require
from berds.retrievers.dense import DenseRetriever
from berds.types import Hit, Passage, Question, rank_hits

TART_MODEL = "facebook/tart-full-flan-t5-xl"
DEFAULT_INSTRUCTION = "Retrieve a passage that answers this question."


@functools.lru_cache(maxsize=None)
def enc_t5_class() -> Any:
    """``EncT5ForSequenceClassification``: T5's encoder + dropout + linear head on the first token.

    Built on ``T5EncoderModel`` so checkpoints with TART's parameter names (``shared``, ``encoder.*``,
    ``classifier.*``) load with ``from_pretrained`` from the hub or a local folder.
    """
    torch = require("torch", extra="dense", purpose="TART")
    transformers = require("transformers", extra="dense", purpose="TART")

    class EncT5ForSequenceClassification(transformers.T5EncoderModel):
        def __init__(self, config: Any):
            super().__init__(config)
            self.num_labels = getattr(config, "num_labels", 2)
            self.dropout = torch.nn.Dropout(getattr(config, "dropout_rate", 0.1))
            self.classifier = torch.nn.Linear(config.d_model, self.num_labels)
            self.post_init()

        def forward(self, input_ids: Any = None, attention_mask: Any = None, **kwargs: Any) -> Any:
            hidden = super().forward(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            logits = self.classifier(self.dropout(hidden[:, 0, :]))
            return transformers.modeling_outputs.SequenceClassifierOutput(logits=logits)

    return EncT5ForSequenceClassification


class TartScorer:
    """Scores (instruction, question, passage) triples with a TART-style EncT5 cross-encoder."""

    def __init__(self, model: str = TART_MODEL, *, revision: str | None = None, device: str = "cpu",
                 dtype: str | None = None, batch_size: int = 16, max_length: int = 512, bos_token: str = "<s>"):
        from berds.indexes.encoders import check_device

        torch = require("torch", extra="dense", purpose="TART")
        transformers = require("transformers", extra="dense", purpose="TART")
        check_device(device)
        try:
            self.tokenizer = transformers.T5Tokenizer.from_pretrained(model, revision=revision)
            # float32 unless a dtype is named: transformers 5 would keep a half-precision checkpoint as it is
            self.model = enc_t5_class().from_pretrained(model, revision=revision,
                                                        dtype=getattr(torch, dtype or "float32")).eval().to(device)
        except OSError as exc:
            raise BerdsError(f"cannot load the TART model {model!r}: {str(exc).splitlines()[0]} — "
                             "pass a local folder with --option model=PATH, or make the model reachable") from None
        if self.model.num_labels < 2:
            raise BerdsError(f"TART model {model!r} has {self.model.num_labels} output label(s); expected 2")
        self.device, self.batch_size, self.max_length = device, int(batch_size), int(max_length)
        self.bos_id = int(self.tokenizer.convert_tokens_to_ids(bos_token))
        self.eos_id = int(self.tokenizer.eos_token_id)
        self.pad_id = int(self.tokenizer.pad_token_id)

    def encode_pair(self, query: str, passage: str) -> list[int]:
        """``<s> query </s> passage </s>``, cutting the passage (then the query) to fit ``max_length``."""
        q = self.tokenizer(query, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        p = self.tokenizer(passage, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        room = self.max_length - 3
        q = q[:room]
        p = p[: max(0, room - len(q))]
        return [self.bos_id, *q, self.eos_id, *p, self.eos_id]

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """P(relevant) for each passage given the (instruction-prefixed) query."""
        torch = require("torch", extra="dense")
        scores: list[float] = []
        with torch.inference_mode():
            for i in range(0, len(passages), self.batch_size):
                rows = [self.encode_pair(query, p) for p in passages[i:i + self.batch_size]]
                width = max(len(r) for r in rows)
                ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for j, r in enumerate(rows):
                    ids[j, :len(r)] = torch.tensor(r)
                    mask[j, :len(r)] = 1
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                scores += torch.softmax(logits.float(), dim=-1)[:, 1].cpu().tolist()
        return scores


class TartRetriever:
    """Contriever top-``candidates`` from a dense index, reranked by TART (see the module docstring)."""

    def __repr__(self) -> str:
        return f"TartRetriever(name={self.name!r})"

    def __init__(
        self,
        *,
        index: str | Path | None = None,
        corpus: Any = None,
        model: str = TART_MODEL,
        revision: str | None = None,
        instruction: str = DEFAULT_INSTRUCTION,
        candidates: int = 100,
        first_stage_encoder: str = "contriever-msmarco",
        passage_format: str = "title text",
        bos_token: str = "<s>",
        max_length: int = 512,
        device: str = "cpu",
        dtype: str | None = None,
        batch_size: int = 16,
        groups: str = "auto",
        name: str = "tart",
    ):
        if candidates < 1:
            raise BerdsError(f"candidates must be at least 1, got {candidates}")
        if passage_format not in ("title text", "text"):
            raise BerdsError(f"passage_format must be 'title text' or 'text', got {passage_format!r}")
        encoder = None if first_stage_encoder == "index" else first_stage_encoder
        if index is None and encoder is None:
            raise BerdsError("TART without an index needs first_stage_encoder to name an encoder")
        self.first_stage = DenseRetriever(index=index, corpus=corpus, encoder=encoder, device=device, dtype=dtype,
                                          batch_size=batch_size, groups=groups,
                                          trust_index_encoder=encoder is None)  # "index": the user accepts its encoder
        self.scorer = TartScorer(model, revision=revision, device=device, dtype=dtype, batch_size=batch_size,
                                 max_length=max_length, bos_token=bos_token)
        self.model, self.revision, self.instruction = model, revision, instruction
        self.candidates, self.passage_format, self.bos_token = int(candidates), passage_format, bos_token
        self.name = name

    def query_text(self, question: str) -> str:
        return f"{self.instruction} [SEP] {question}"

    def passage_input(self, p: Passage) -> str:
        return passage_text(p.title, p.text, self.passage_format)

    def search(self, questions: Sequence[Question], *, k: int) -> list[list[Hit]]:
        """Rerank the first stage's top ``candidates`` by TART's P(relevant); return the best ``k``."""
        if k > self.candidates:
            raise BerdsError(f"TART reranks the first stage's top {self.candidates}; ask for k <= {self.candidates} "
                             "or raise --option candidates=N")
        if not questions:
            return []
        first = self.first_stage.search(questions, k=self.candidates)
        out = []
        for q, hits in zip(questions, first):
            scores = self.scorer.score(self.query_text(q.text), [self.passage_input(h.passage) for h in hits])
            out.append(rank_hits(Hit(h.passage, s) for h, s in zip(hits, scores))[:k])
        return out

    def provenance(self) -> dict[str, Any]:
        first = self.first_stage.provenance()
        return {
            "reranker": {"model": self.model, "revision": self.revision, "instruction": self.instruction,
                         "candidates": self.candidates, "passage_format": self.passage_format,
                         "bos_token": self.bos_token, "bos_token_id": self.scorer.bos_id,
                         "max_length": self.scorer.max_length},
            "first_stage": {k: v for k, v in first.items() if k != "corpus"},
            "index": first.get("index"),
            "corpus": first.get("corpus"),
        }

    def close(self) -> None:
        self.first_stage.close()
