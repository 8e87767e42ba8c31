"""``nli:MODEL``: a natural-language-inference model as a perspective judge (the NLI row of the study's Table 4).

The passage is the premise and the perspective the hypothesis; the judge says "supports" when
P(entailment) >= ``threshold`` (default 0.5, ``-o threshold=``). Two kinds of transformers models work:

* sequence classification (BERT/RoBERTa/DeBERTa MNLI heads): P(entail) is the softmax of the logits at
  the label whose name in the model config's ``id2label`` starts with "entail" (``-o entail_label=NAME``
  picks another);
* seq2seq (T5 NLI models such as the TRUE/ANLI T5 checkpoints, config ``is_encoder_decoder``): the input
  is ``premise: P hypothesis: H`` (``-o seq2seq_format=``), and P(entail) is the first decoder step's
  probability of ``entail_token`` ("1") renormalised against ``other_token`` ("0").

  A checkpoint with T5's own vocabulary (id 3 = "▁", id 209 = "▁1": ``google/t5_xxl_true_nli_mixture``, the
  study's Table 4 baseline) is scored as the study's code scored it (``-o scoring=study-t5``, the default
  there through ``scoring=auto``): the premise cut to its first 2,000 characters, the input truncated to
  256 tokens, the decoder started with the pad token, a two-way softmax over the logits of token ids 3 (the
  first piece of "0") and 209 ("1"), and "supports" when P(id 209) > ``threshold`` (strictly).
  ``-o scoring=tokens`` gives berds' earlier T5 reading (the answer words, 512 tokens, no cut, >=).

The model loads on first use, in float32 unless ``-o dtype=bfloat16``/``float16`` (half precision halves
GPU memory for the 11B T5; the checkpoint's own dtype is never used silently, since transformers 5 would
keep it and change verdicts between versions). The id names model, revision, threshold and a non-float32
dtype, so cached verdicts of another threshold, model or precision are never reused.
"""

from __future__ import annotations

from typing import Any, Sequence

from berds.errors import BerdsError
from berds.judges.base import id_number
from berds.lazy import require
from berds.types import JudgePair, Verdict

# v2 (issue 32): T5-vocabulary checkpoints are scored the study's way by default; their v1 verdicts are not reused
PROMPT_VERSION = "nli-premise=passage-hypothesis=perspective-v2"
DEFAULT_THRESHOLD = 0.5
SCORINGS = ("auto", "study-t5", "tokens")
# The study's T5 code (Table 4): ids of T5's vocabulary, the premise's first characters, the input's tokens
STUDY_T5_IDS = {"other": 3, "entail": 209}  # "▁" (first piece of "0") and "▁1"
STUDY_T5_TOKENS = {3: "▁", 209: "▁1"}
STUDY_PREMISE_CHARS = 2000
STUDY_MAX_LENGTH = 256
DEFAULT_MAX_LENGTH = 512
DEFAULT_SEQ2SEQ_FORMAT = "premise: {premise} hypothesis: {hypothesis}"


class NLIJudge:
    """A transformers NLI model behind the judge protocol (see the module doc)."""

    def __init__(self, model: str, *, threshold: float = DEFAULT_THRESHOLD, revision: str | None = None,
                 device: str | None = None, batch_size: int = 16, max_length: int | None = None,
                 entail_label: str | None = None, seq2seq_format: str = DEFAULT_SEQ2SEQ_FORMAT,
                 entail_token: str = "1", other_token: str = "0", name: str | None = None,
                 dtype: str = "float32", scoring: str = "auto"):
        from berds.llm.shared import model_identity
        from berds.llm.transformers_backend import _DTYPES

        threshold = float(threshold)
        if not 0.0 <= threshold <= 1.0:
            raise BerdsError(f"nli threshold must be in [0, 1], got {threshold!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise BerdsError(f"batch_size must be a positive integer, got {batch_size!r}")
        if dtype not in _DTYPES:
            raise BerdsError(f"unknown dtype {dtype!r}; use {', '.join(sorted(set(_DTYPES.values())))}")
        if scoring not in SCORINGS:
            raise BerdsError(f"unknown nli scoring {scoring!r}; use one of {', '.join(SCORINGS)}")
        self.scoring = scoring
        self.dtype = _DTYPES[dtype]
        self.model_name = str(model)
        self.threshold = threshold
        self.revision = revision
        self.requested_device = device
        self.batch_size = batch_size
        self.given_max_length = None if max_length is None else int(max_length)
        self.max_length = self.given_max_length or DEFAULT_MAX_LENGTH  # (study-t5 makes it 256 when not given)
        self.entail_label = entail_label
        self.seq2seq_format = seq2seq_format
        self.entail_token, self.other_token = entail_token, other_token
        # Every option that changes a verdict is in the id (it keys the judgement cache); defaults add nothing,
        # so ids written before an option entered still name the same verdicts.
        import hashlib

        self.id = (model_identity("nli", self.model_name, revision=revision)
                   + f"|threshold={id_number(threshold)}" + (f"|entail_label={entail_label}" if entail_label else "")
                   + (f"|dtype={self.dtype}" if self.dtype != "float32" else "")
                   # (given at all: under study-t5 an unnamed max_length is 256, a named 512 is not the same judge)
                   + (f"|max_length={self.max_length}" if self.given_max_length is not None else "")
                   + (f"|scoring={scoring}" if scoring != "auto" else "")
                   + (f"|seq2seq_format={hashlib.sha256(seq2seq_format.encode()).hexdigest()[:12]}"
                      if seq2seq_format != DEFAULT_SEQ2SEQ_FORMAT else "")
                   + (f"|tokens={entail_token},{other_token}" if (entail_token, other_token) != ("1", "0") else ""))
        self.name = name or f"nli:{self.model_name}"
        self.prompt_version = PROMPT_VERSION
        self._model: Any = None
        self.kind: str | None = None

    def prepare(self) -> None:
        self.load()

    def load(self) -> "NLIJudge":
        if self._model is not None:
            return self
        from berds.llm.transformers_backend import _load_or_explain

        torch = require("torch", extra="llm", purpose="NLI judges")
        transformers = require("transformers", extra="llm", purpose="NLI judges")
        where = self.model_name + (f" (revision {self.revision})" if self.revision else "")
        config = _load_or_explain(transformers.AutoConfig.from_pretrained, self.model_name, where, "model config",
                                  revision=self.revision)
        tokenizer = _load_or_explain(transformers.AutoTokenizer.from_pretrained, self.model_name, where, "tokenizer",
                                     revision=self.revision)
        device = self.requested_device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda"):  # one line, not torch's "not compiled with CUDA" assertion
            from berds.lazy import check_device

            check_device(device)
        if getattr(config, "is_encoder_decoder", False):
            model = _load_or_explain(transformers.AutoModelForSeq2SeqLM.from_pretrained, self.model_name, where,
                                     "seq2seq NLI model", revision=self.revision, dtype=getattr(torch, self.dtype))
            study_vocab = _has_t5_vocabulary(tokenizer)
            if self.scoring == "study-t5" and not study_vocab:
                raise BerdsError(f"{self.model_name}: scoring=study-t5 reads T5's token ids 3 and 209, but this "
                                 "tokenizer's ids 3 and 209 are not '▁' and '▁1' — use scoring=tokens (or auto)")
            if self.scoring == "study-t5" or (self.scoring == "auto" and study_vocab):
                self.kind = "study-t5"
                self._label_ids = [STUDY_T5_IDS["entail"], STUDY_T5_IDS["other"]]
                self.max_length = self.given_max_length or STUDY_MAX_LENGTH
                self._start_id = tokenizer.pad_token_id  # the study: tokenizer("<pad>").input_ids[:, :1]
            else:
                self.kind = "seq2seq"
                self._label_ids = [self._single_token(tokenizer, t) for t in (self.entail_token, self.other_token)]
                self._start_id = model.config.decoder_start_token_id
        else:
            model = _load_or_explain(transformers.AutoModelForSequenceClassification.from_pretrained, self.model_name,
                                     where, "NLI classifier", revision=self.revision, dtype=getattr(torch, self.dtype))
            self.kind = "classification"
            self._entail_index = entailment_index(config.id2label, self.entail_label, self.model_name)
        model.to(device).eval()
        from berds.llm.shared import position_capped

        # never more tokens than the model has positions (it ended in a raw RuntimeError about tensor sizes). The id
        # keeps the max_length asked for: a pair longer than the positions could never be judged uncapped
        self._max_tokens = position_capped(self.max_length, model.config)
        self._torch, self._tokenizer, self._model, self.device = torch, tokenizer, model, device
        return self

    def _single_token(self, tokenizer: Any, word: str) -> int:
        ids = tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise BerdsError(f"{self.model_name}: the label word {word!r} is not one token ({ids}) — pass "
                             "-o entail_token=/other_token= words the model answers with")
        return ids[0]

    def p_entail(self, pairs: Sequence[JudgePair]) -> list[float]:
        """P(entailment) of each pair (premise = passage, hypothesis = perspective)."""
        self.load()
        torch, tokenizer, model = self._torch, self._tokenizer, self._model
        out: list[float] = []
        for lo in range(0, len(pairs), self.batch_size):
            batch = pairs[lo:lo + self.batch_size]
            with torch.inference_mode():
                if self.kind == "classification":
                    enc = tokenizer([p.passage for p in batch], [p.perspective for p in batch], truncation=True,
                                    max_length=self._max_tokens, padding=True, return_tensors="pt",
                                    split_special_tokens=True).to(self.device)  # (text's "[SEP]" is text)
                    probs = torch.softmax(model(**enc).logits.float(), dim=-1)[:, self._entail_index]
                else:
                    # the study's T5 code put only the premise's first 2,000 characters in
                    cut = STUDY_PREMISE_CHARS if self.kind == "study-t5" else None
                    texts = [self.seq2seq_format.format(premise=p.passage[:cut], hypothesis=p.perspective)
                             for p in batch]
                    enc = tokenizer(texts, truncation=True, max_length=self._max_tokens, padding=True,
                                    return_tensors="pt", split_special_tokens=True).to(self.device)
                    start = torch.full((len(batch), 1), self._start_id, device=self.device)
                    logits = model(**enc, decoder_input_ids=start).logits[:, 0, self._label_ids].float()
                    probs = torch.softmax(logits, dim=-1)[:, 0]
            out += [float(p) for p in probs.cpu()]
        return out

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        if not pairs:
            return []
        probs = self.p_entail(list(pairs))
        strict = self.kind == "study-t5"  # the study's T5 code: probs > threshold
        return [Verdict(label=p > self.threshold if strict else p >= self.threshold, p_yes=p,
                        raw=f"P(entail)={p:.6f}") for p in probs]


def _has_t5_vocabulary(tokenizer: Any) -> bool:
    """Whether ids 3 and 209 are T5's "▁" and "▁1" (the ids the study's T5 code read)."""
    try:
        return tokenizer.convert_ids_to_tokens([3, 209]) == [STUDY_T5_TOKENS[3], STUDY_T5_TOKENS[209]]
    except (IndexError, KeyError, TypeError, ValueError, OverflowError):
        return False


def entailment_index(id2label: Any, wanted: str | None, model: str) -> int:
    """The class index of the entailment label in a config's ``id2label`` (names compared case-insensitively;
    by default the one starting with "entail")."""
    labels = {int(i): str(name) for i, name in dict(id2label or {}).items()}
    if wanted is not None:
        found = [i for i, name in labels.items() if name.lower() == wanted.lower()]
    else:
        found = [i for i, name in labels.items() if name.lower().startswith("entail")]
    if len(found) != 1:
        shown = ", ".join(f"{i}={n}" for i, n in sorted(labels.items())) or "none"
        raise BerdsError(f"{model}: cannot tell which class is entailment from its config's id2label ({shown}) — "
                         "pass -o entail_label=NAME")
    return found[0]
