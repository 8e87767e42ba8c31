"""Code every LLM backend shares: prompt checks, chat-template rendering, model identities, and the
conversion of first-token log-probabilities into a ``Generation``.

Keeping this in one place means the transformers, vLLM and HTTP backends build *the same* prompt text and
report log-probabilities *the same* way, and that the parts of the vLLM backend that can be tested without
a GPU are tested on CPU (``tests/test_llm_backends.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import time
import weakref
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from berds.errors import BerdsError
from berds.llm.base import PLAIN_ROLE, Generation, Prompt

ROLES = ("system", "user", "assistant")


# ------------------------------------------------------------------------------------------ prompts


# Models whose position ids start after the padding index (RoBERTa's recipe): max_position_embeddings counts
# pad_token_id + 1 positions no token can use (roberta-base: 514, of which 512 usable)
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "longformer", "xlm-roberta-xl", "data2vec-text")


def position_capped(max_length: int, config: Any) -> int:
    """``max_length`` cut to the tokens an encoder's positions can hold (its config's ``max_position_embeddings``,
    less RoBERTa's padding offset); ``max_length`` as it is when the config names no limit (T5's relative
    positions). A small model fed more tokens than it has positions ends deep inside torch ("The size of tensor a
    (600) must match the size of tensor b (512)"); the embedded judge, NLI judges and encoders share this cap."""
    limit = getattr(config, "max_position_embeddings", None)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return max_length
    if getattr(config, "model_type", "") in _OFFSET_POSITIONS:
        limit -= int(getattr(config, "pad_token_id", 1) or 0) + 1
    return max(1, min(max_length, limit))


def normalise_prompts(prompts: Sequence[Prompt]) -> list[list[dict[str, str]]]:
    """Check a batch of chat prompts and return plain ``[{"role", "content"}, ...]`` lists.

    Raises a ``BerdsError`` naming the prompt and message index when a prompt is not a non-empty list of
    messages with a known ``role`` and a string ``content`` (a bare string prompt is the usual mistake).
    """
    if isinstance(prompts, (str, bytes)) or isinstance(prompts, Mapping):
        raise BerdsError("generate() takes a list of prompts, each a list of chat messages — "
                         "wrap one text as [berds.llm.user_prompt(text)]")
    out: list[list[dict[str, str]]] = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, (str, bytes)) or isinstance(prompt, Mapping) or not prompt:
            raise BerdsError(f"prompt {i}: expected a non-empty list of chat messages "
                             f"[{{'role': 'user', 'content': ...}}], got {type(prompt).__name__} — "
                             "use berds.llm.user_prompt(text) to build one")
        messages = []
        for j, message in enumerate(prompt):
            role = message.get("role") if isinstance(message, Mapping) else None
            content = message.get("content") if isinstance(message, Mapping) else None
            if role == PLAIN_ROLE and len(prompt) == 1 and isinstance(content, str):
                messages.append({"role": role, "content": content})  # raw text, no chat template
                continue
            if role not in ROLES or not isinstance(content, str):
                raise BerdsError(f"prompt {i}, message {j}: expected {{'role': one of {', '.join(ROLES)}, "
                                 f"'content': str}}, got {message!r:.120}")
            messages.append({"role": role, "content": content})
        out.append(messages)
    return out


def check_generation_options(max_new_tokens: int, temperature: float, top_logprobs: int) -> None:
    """Reject option values no backend can honour, with the allowed range."""
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise BerdsError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if not isinstance(temperature, (int, float)) or temperature < 0 or math.isnan(temperature):
        raise BerdsError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    if not isinstance(top_logprobs, int) or top_logprobs < 0:
        raise BerdsError(f"top_logprobs must be an integer >= 0, got {top_logprobs!r}")


def fold_system_into_user(messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """Merge system messages into the first user message (blank line between).

    Some chat templates — Mistral-7B-Instruct-v0.2's among them — raise on a ``system`` role; prepending
    the system text to the first user turn is the usual way to keep its instructions.
    """
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    for message in rest:
        if message["role"] == "user":
            message["content"] = "\n\n".join(system + [message["content"]])
            return rest
    return [{"role": "user", "content": "\n\n".join(system)}] + rest


def render_chat(tokenizer: Any, messages: Sequence[Mapping[str, str]], *, chat_template: str | None = None) -> str:
    """The prompt text a chat model sees: its chat template applied, with the generation prompt added.

    When the template rejects a ``system`` message, the system text is folded into the first user turn
    (``fold_system_into_user``) and the template applied again. A tokenizer without a chat template
    needs ``chat_template=`` (a Jinja string).

    A plain prompt (``berds.llm.base.plain_prompt``) gets no chat template: its text as is, after the
    tokenizer's BOS token. This is the text shown; the model is given ``prompt_token_ids`` (BOS, then the text
    tokenised on its own).
    """
    if len(messages) == 1 and messages[0]["role"] == PLAIN_ROLE:
        bos = getattr(tokenizer, "bos_token", None) or ""
        return bos + messages[0]["content"]
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if not template:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise BerdsError(f"tokenizer {name!r} has no chat template — pass chat_template='<jinja string>' "
                         "(or a model whose tokenizer_config.json / chat_template.jinja carries one)")
    kwargs = {"tokenize": False, "add_generation_prompt": True, "chat_template": template}
    try:
        return tokenizer.apply_chat_template(list(messages), **kwargs)
    except Exception as exc:  # jinja2 TemplateError from raise_exception() in the template
        if not any(m["role"] == "system" for m in messages):
            raise BerdsError(f"the chat template rejected the prompt: {exc}") from exc
    try:
        return tokenizer.apply_chat_template(fold_system_into_user(messages), **kwargs)
    except Exception as exc:
        raise BerdsError(f"the chat template rejected the prompt (even with the system message folded "
                         f"into the first user turn): {exc}") from exc


SPECIAL_TOKEN_MODES = ("split", "parse")


def check_special_tokens_mode(value: Any) -> str:
    """``special_tokens`` option of the local backends: ``split`` (berds' default) or ``parse`` (the study's code)."""
    if value not in SPECIAL_TOKEN_MODES:
        raise BerdsError(f"special_tokens must be 'split' (text in the prompt's messages is plain text) or 'parse' "
                         f"(the BERDS study's code: control-token strings in it become control tokens), got {value!r}")
    return value


def special_strings(tokenizer: Any) -> list[str]:
    """The strings a tokenizer turns into one control token (BOS, EOS, ``[INST]`` where it is special, ...),
    longest first. These are the ``special`` added tokens: what ``split_special_tokens=True`` splits."""
    found = {str(t) for t in (getattr(tokenizer, "all_special_tokens", None) or [])}
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            found.add(str(getattr(token, "content", token)))
    return sorted((s for s in found if s), key=len, reverse=True)


_SPECIAL_PATTERNS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _special_pattern(tokenizer: Any) -> Any:
    """A compiled search for any of the tokenizer's control-token strings (None when it has none), made once per
    tokenizer: some have hundreds of reserved control tokens, and every prompt is searched."""
    try:
        return _SPECIAL_PATTERNS[tokenizer]
    except (KeyError, TypeError):
        pass
    strings = special_strings(tokenizer)
    pattern = re.compile("|".join(re.escape(s) for s in strings)) if strings else None
    with contextlib.suppress(TypeError):  # (an object that takes no weak reference: made again next time)
        _SPECIAL_PATTERNS[tokenizer] = pattern
    return pattern


def _ids(tokenizer: Any, text: str, *, split: bool) -> list[int]:
    if not split:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def _content_spans(tokenizer: Any, messages: Sequence[Mapping[str, str]], text: str,
                   chat_template: str | None) -> list[tuple[int, int]] | None:
    """Where each message's text sits in ``text`` (the rendered prompt), or None when the template changed it.

    The template is rendered once more with a marker in place of each message's text; the pieces between the
    markers are the template's own text, which must match ``text`` around the messages."""
    marked = [{"role": m["role"], "content": f"\ue000{i}\ue001"} for i, m in enumerate(messages)]
    layout = re.split("\ue000(\\d+)\ue001", render_chat(tokenizer, marked, chat_template=chat_template))
    spans, pos = [], 0
    for n in range(0, len(layout) - 1, 2):
        piece, content = layout[n], messages[int(layout[n + 1])]["content"]
        if not text.startswith(piece, pos):
            return None
        pos += len(piece)
        for shown in (content, content.strip()):  # (templates that trim the text)
            if text.startswith(shown, pos):
                spans.append((pos, pos + len(shown)))
                pos += len(shown)
                break
        else:
            return None
    return spans if text.endswith(layout[-1]) and pos + len(layout[-1]) == len(text) else None


def neutralise_special_strings(text: str, strings: Sequence[str] | None = None) -> str:
    """``text`` with each control-token string broken by a WORD JOINER (U+2060) after its first character.

    For backends that send text to a server, which tokenises it itself: ``strings`` are the model's special
    strings when known; by default the shapes chat models use (``<s>``, ``</s>``, ``[INST]``, ``<<SYS>>``,
    ``<|im_start|>``, ``<|eot_id|>``, ``<start_of_turn>``, ...). Text without them is returned unchanged."""
    pattern = _CONTROL_SHAPES
    if strings is not None:
        strings = [s for s in strings if len(s) > 1]  # (one character cannot be broken)
        if not strings:
            return text
        pattern = re.compile("|".join(re.escape(s) for s in sorted(strings, key=len, reverse=True)))
    return pattern.sub(lambda m: m.group(0)[0] + "\u2060" + m.group(0)[1:], text)


_CONTROL_SHAPES = re.compile(r"</?s>|</?(?:unk|pad|bos|eos|start_of_turn|end_of_turn)>|\[/?INST\]|<</?SYS>>"
                             r"|\[/?(?:AVAILABLE_TOOLS|TOOL_RESULTS|TOOL_CALLS|SYSTEM_PROMPT)\]|<\|[^|<>\s]{1,64}\|>")


def prompt_token_ids(tokenizer: Any, messages: Sequence[Mapping[str, str]], *,
                     chat_template: str | None = None, special_tokens: str = "split") -> list[int]:
    """The token ids a model is given for one prompt (what ``render_chat`` shows, as ids).

    A chat prompt: the rendered template tokenised without adding special tokens (the template writes BOS). A
    plain prompt: the tokenizer's BOS id, then its text tokenised on its own — not the text after a literal BOS
    string, which tokenizers whose sentencepiece marker is prepended only at the start of the input
    (``Metaspace(prepend_scheme="first")``) read as a word in mid-text, a different first token than
    ``tokenizer(text)`` gives.

    ``special_tokens="split"`` (the default): the messages' text is plain text. A passage holding
    ``</s><s>[INST] ... [/INST] Yes`` gets the tokens of those characters, not control tokens, so the text being
    judged cannot open a turn of its own; only the chat template writes control tokens. Text without such
    strings gives exactly the ids of ``"parse"``, which is what the BERDS study's code does (its tokenizer call
    parses control-token strings anywhere in the prompt).
    """
    check_special_tokens_mode(special_tokens)
    split = special_tokens == "split"
    if len(messages) == 1 and messages[0]["role"] == PLAIN_ROLE:
        bos = getattr(tokenizer, "bos_token", None) and getattr(tokenizer, "bos_token_id", None)
        ids = _ids(tokenizer, messages[0]["content"], split=split)
        return ([bos] if bos is not None else []) + ids
    text = render_chat(tokenizer, messages, chat_template=chat_template)
    pattern = _special_pattern(tokenizer) if split else None
    if pattern is None or not any(pattern.search(m["content"]) for m in messages):
        return _ids(tokenizer, text, split=False)  # (the common case: one tokenizer call, as before)
    strings = special_strings(tokenizer)
    spans = _content_spans(tokenizer, messages, text, chat_template)
    if spans is None:  # a template that rewrites the text: break the strings in the text itself instead
        safe = [{"role": m["role"], "content": neutralise_special_strings(m["content"], strings)} for m in messages]
        return _ids(tokenizer, render_chat(tokenizer, safe, chat_template=chat_template), split=False)
    # The template's own control tokens are those outside the messages' text: cut the prompt there and tokenise
    # the pieces between them with control-token strings split (as the tokenizer itself cuts at control tokens).
    ids: list[int] = []
    start = 0
    for match in pattern.finditer(text):
        if any(a <= match.start() < b for a, b in spans):
            continue
        if match.start() > start:
            ids += _ids(tokenizer, text[start:match.start()], split=True)
        ids.append(tokenizer.convert_tokens_to_ids(match.group(0)))
        start = match.end()
    if start < len(text):
        ids += _ids(tokenizer, text[start:], split=True)
    return ids


# ---------------------------------------------------------------------------------------- logprobs


def merge_logprobs(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """``[(token_string, logprob), ...]`` -> ``{token_string: logprob}``, summing probabilities of
    duplicates (two token ids can decode to the same string, e.g. ``"▁Yes"`` and ``"Yes"``)."""
    merged: dict[str, float] = {}
    for token, logprob in pairs:
        logprob = float(logprob)
        if math.isnan(logprob):
            continue
        if token in merged:
            a, b = merged[token], logprob
            high = max(a, b)
            merged[token] = high if high == -math.inf else high + math.log(math.exp(a - high) + math.exp(b - high))
        else:
            merged[token] = logprob
    return merged


def generation_from_token_logprobs(
    text: str, first_token: Iterable[tuple[str, float]] | None, top_n: int
) -> Generation:
    """A ``Generation`` from the generated text and the first step's ``(token string, logprob)`` list.

    The list is sorted by log-probability, cut to the ``top_n`` most likely entries (backends such as vLLM
    add the sampled token as an extra entry), and duplicate strings are merged. ``top_n == 0`` or no list
    gives ``first_token_logprobs=None``.
    """
    if not top_n or first_token is None:
        return Generation(text=text, first_token_logprobs=None)
    ranked = sorted(first_token, key=lambda pair: float(pair[1]), reverse=True)[:top_n]
    if not ranked:
        return Generation(text=text, first_token_logprobs=None)
    return Generation(text=text, first_token_logprobs=merge_logprobs(ranked))


# -------------------------------------------------------------------------------------- identities

# Files whose names, sizes and contents identify a local model or adapter folder.
_IDENTITY_SUFFIXES = (".json", ".safetensors", ".bin", ".gguf", ".model", ".jinja", ".txt", ".pt")


def looks_like_local_path(name: str) -> bool:
    """True for something that is (or is clearly meant to be) a local path rather than a hub name."""
    return (
        os.path.exists(os.path.expanduser(name))
        or name.startswith(("/", "./", "../", "~", "."))
        or name.count("/") > 1
        or "\\" in name
    )


def local_fingerprint(path: str | os.PathLike[str]) -> str:
    """A short hash of a local model/adapter: file names, sizes and the SHA-256 of each file's whole content.

    The id it goes into keys judgement caches, so weights retrained or replaced in place (same path, same sizes,
    as a fine-tune of one architecture has) must change it: sampling the first and last 64 KiB of each file, as
    berds did, missed every change in between. A file's digest is remembered in ``$BERDS_HOME/fingerprints.json``
    under its path, size, inode and modification and change times (the change time cannot be set back), so a
    14 GB model is read once, not at every evaluation. A single file (a ``.gguf``) is hashed the same way.
    """
    root = Path(path).expanduser()
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob("*") if p.is_file() and p.suffix in _IDENTITY_SUFFIXES and ".cache" not in p.parts
    )
    memo = _DigestMemo()
    digest = hashlib.sha256()
    for file in files:
        size = file.stat().st_size
        digest.update(f"{file.relative_to(root) if file != root else file.name}\0{size}\0".encode())
        digest.update(memo.digest(file))
    memo.save()
    return digest.hexdigest()[:12]


class _DigestMemo:
    """SHA-256 digests of large files, kept across processes, valid while a file's stat says it is unchanged."""

    SMALL = 1 << 20  # smaller files are just read
    # A file changed this recently is not remembered: where timestamps are coarse (1 s on ext3 and HFS+, 2 s on
    # FAT, a clock tick on older kernels' ext4), bytes rewritten within the same tick leave the stat unchanged.
    SETTLE_NS = 3_000_000_000
    MAX_ENTRIES = 2000  # the most recently used are kept: a memo of every checkpoint ever evaluated grows unbounded
    SHOWN = 1 << 30  # files this large get a progress bar the first time (a 14 GB model reads for a minute or so)

    def __init__(self) -> None:
        self.path: Path | None = None
        self.entries: dict[str, list] = {}
        self.changed = False

    def _load(self) -> None:
        if self.path is not None:
            return
        import json

        from berds.io import home_dir

        try:
            self.path = home_dir() / "fingerprints.json"
            entries = json.loads(self.path.read_text(encoding="utf-8")) if self.path.is_file() else {}
            self.entries = entries if isinstance(entries, dict) else {}
        except (OSError, ValueError, RecursionError, MemoryError, BerdsError):
            # a memo that cannot be read (damaged, nested past Python's stack) is rebuilt: it only saves time
            self.path = self.path or Path(os.devnull)
            self.entries = {}

    def digest(self, file: Path) -> bytes:
        st = file.stat()
        if st.st_size <= self.SMALL:
            return hashlib.sha256(file.read_bytes()).digest()
        self._load()
        key = str(file.resolve())
        stamp = _stamp(st)
        entry = self.entries.pop(key, None)
        if (isinstance(entry, list) and len(entry) == 6 and entry[:5] == stamp and isinstance(entry[5], str)
                and len(entry[5]) == 64):
            try:
                value = bytes.fromhex(entry[5])
            except ValueError:
                pass
            else:
                self.entries[key] = entry  # (last: most recently used)
                return value
        self.changed = self.changed or entry is not None
        started = time.time_ns()
        with open(file, "rb") as handle:
            before = _stamp(os.fstat(handle.fileno()))
            value = _file_sha256(handle, shown_as=file.name if st.st_size >= self.SHOWN else None, size=st.st_size)
            held_still = _stamp(os.fstat(handle.fileno())) == before == stamp
        if held_still and max(st.st_mtime_ns, st.st_ctime_ns) < started - self.SETTLE_NS:
            self.entries[key] = stamp + [value.hex()]
            self.changed = True
        return value

    def save(self) -> None:
        if not self.changed or self.path is None or self.path == Path(os.devnull):
            return
        from berds.io import write_json

        kept = dict(list(self.entries.items())[-self.MAX_ENTRIES:])
        try:
            write_json(self.path, kept)
        except (OSError, BerdsError):  # a read-only home: the digests are computed again next time
            pass


def _file_sha256(handle: Any, *, shown_as: str | None = None, size: int = 0) -> bytes:
    """SHA-256 of an open binary file, read in 1 MiB blocks (``hashlib.file_digest`` is Python 3.11+; berds
    supports 3.10), with a progress bar on stderr when ``shown_as`` names it."""
    from tqdm import tqdm

    digest = hashlib.sha256()
    with tqdm(total=size, unit="B", unit_scale=True, desc=f"fingerprinting {shown_as}", leave=False,
              disable=shown_as is None) as bar:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            bar.update(len(block))
    return digest.digest()


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def describe_source(name: str, revision: str | None = None) -> str:
    """``org/model@rev`` for hub names; ``folder-name#fingerprint`` for local paths.

    Local paths are named by their last component plus the content fingerprint (not the full path), so a
    judgement cache stays valid when the same model is copied to another machine.
    """
    if looks_like_local_path(name):
        path = Path(name).expanduser()
        if not path.exists():
            raise BerdsError(f"model path {name!r} does not exist — pass an existing local folder/file "
                             "or a Hugging Face hub name such as 'mistralai/Mistral-7B-Instruct-v0.2'")
        label = path.resolve().name
        return f"{label}#{local_fingerprint(path)}" + (f"@{revision}" if revision else "")
    return name + (f"@{revision}" if revision else "")


_COMMIT = re.compile(r"[0-9a-f]{40}")


def hub_commit(repo: str, revision: str | None = None) -> str | None:
    """The commit of the local Hugging Face cache snapshot that loading ``repo`` at ``revision`` (None: the default
    branch) reads; None for a local path, a repo not in the cache, or without ``huggingface_hub``."""
    if looks_like_local_path(repo):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for filename in ("config.json", "adapter_config.json"):
        try:
            found = try_to_load_from_cache(repo, filename, revision=revision)
        except Exception:  # (a malformed repo name raises; its load failed already)
            return None
        if isinstance(found, str):
            parts = Path(found).parts
            if "snapshots" in parts[:-1]:
                return parts[parts.index("snapshots") + 1]
    return None


def unpinned_hub_weights(obj: Any) -> dict[str, tuple[str, str]]:
    """``{repo: (option, commit)}`` for every hub model or adapter that ``obj`` (a judge, or a backend it holds)
    loaded without pinning a commit, by the snapshot the local cache holds now. ``option`` is the one that pins it
    (``revision``, ``adapter_revision``). Only attributes already set are read: a judge not yet loaded loads nothing
    here."""
    found: dict[str, tuple[str, str]] = {}
    seen: set[int] = set()

    def walk(o: Any, depth: int) -> None:
        if depth > 4 or id(o) in seen or not hasattr(o, "__dict__"):
            return
        seen.add(id(o))
        attrs = vars(o)
        for name_attr, option in (("model_name", "revision"), ("adapter", "adapter_revision")):
            repo, revision = attrs.get(name_attr), attrs.get(option)
            if isinstance(repo, str) and repo and not (isinstance(revision, str) and _COMMIT.fullmatch(revision)):
                commit = hub_commit(repo, revision)
                if commit is not None:
                    found[repo] = (option, commit)
        for value in attrs.values():  # the backend a judge holds, the judge a wrapper holds (berds objects only)
            if type(value).__module__.startswith("berds."):
                walk(value, depth + 1)

    walk(obj, 0)
    return found


def model_identity(
    backend: str,
    model: str,
    *,
    revision: str | None = None,
    adapter: str | None = None,
    adapter_revision: str | None = None,
    gguf_file: str | None = None,
    dtype: str | None = None,
    chat_template: str | None = None,
    merged: bool = False,
    options: Mapping[str, Any] | None = None,
    special_tokens: str = "split",
) -> str:
    """The ``id`` of a local-weights backend: backend, model (+revision), GGUF file, precision, chat template,
    adapter (and whether it was merged into the weights) and other engine options.

    Example: ``transformers:mistralai/Mistral-7B-Instruct-v0.2+adapter=timchen0618/Mistral_BERDS_evaluator``.
    The backend is part of the id because transformers and vLLM kernels do not give bit-identical
    answers, and the id keys judgement caches. So are the precision the weights run in (``dtype``; the study's
    ``bfloat16`` and ``None`` add nothing, so the study's ids stay as they were), a ``chat_template`` given
    instead of the tokenizer's own (as a hash) and ``options`` (a hash of the JSON object): each changes answers.
    ``special_tokens="parse"`` (the study's tokenisation, ``prompt_token_ids``) adds ``+special_tokens=parse``: it
    changes the answers for text holding control-token strings only, so the default keeps the ids as they were.
    """
    check_special_tokens_mode(special_tokens)
    text = f"{backend}:{describe_source(model, revision)}"
    if gguf_file:
        text += f"+gguf={gguf_file}"
    if dtype and dtype != "bfloat16":
        text += f"+dtype={dtype}"
    if chat_template:
        text += f"+chat_template={hashlib.sha256(chat_template.encode('utf-8')).hexdigest()[:12]}"
    if adapter:
        text += f"+adapter={describe_source(adapter, adapter_revision)}" + ("+merged" if merged else "")
    if options:
        import json

        canonical = json.dumps(options, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
        text += f"+options={hashlib.sha256(canonical.encode('utf-8')).hexdigest()[:12]}"
    if special_tokens != "split":
        text += f"+special_tokens={special_tokens}"
    return text


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set: hub names resolve from the local cache only."""
    return any(os.environ.get(var, "").lower() in ("1", "true", "yes", "on")
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def download_command(name: str, revision: str | None = None) -> str:
    """The command that puts a hub model into the local cache (huggingface_hub's CLI is ``hf``)."""
    return f"hf download {name}" + (f" --revision {revision}" if revision else "")


def ensure_model_available(name: str, *, revision: str | None = None, what: str = "model",
                           option: str = "--model", probe_timeout: float = 5.0) -> None:
    """Fail in seconds, before any expensive work, when a model a command needs cannot be had.

    A local path must exist. A hub name is fine when its ``config.json`` is in the local Hugging Face
    cache; otherwise, offline (``HF_HUB_OFFLINE=1``) it is refused at once, and online one metadata request
    with a short timeout and no retries decides (instead of minutes of retries inside the model loader).
    The error names the ``hf download`` command and the local-path alternative.
    """
    if looks_like_local_path(name):
        if not os.path.exists(os.path.expanduser(name)):
            raise BerdsError(f"{what} path {name!r} does not exist — pass an existing folder with {option}, "
                             "or a Hugging Face hub name")
        return
    try:
        import huggingface_hub
    except ImportError:  # the loader will say what is missing
        return
    for filename in ("config.json", "modules.json", "adapter_config.json"):
        try:
            cached = huggingface_hub.try_to_load_from_cache(name, filename, revision=revision)
        except Exception:  # an ill-formed name: let the probe or loader explain it
            cached = None
        if isinstance(cached, str):
            return
    fix = (f"download it first: `{download_command(name, revision)}` (on a machine with network, then copy "
           f"~/.cache/huggingface), or pass a local folder with {option}")
    if hub_offline():
        raise BerdsError(f"cannot load {what} {name}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set "
                         f"— {fix}")
    try:
        huggingface_hub.model_info(name, revision=revision, timeout=probe_timeout)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BerdsError(f"cannot load {what} {name}: not in the local Hugging Face cache and the hub did not "
                         f"answer ({first}) — {fix}; set HF_HUB_OFFLINE=1 to skip the hub") from None


# ----------------------------------------------------------------------------------------- scoring


def score_token_rows(tokenizer: Any, prompts: Sequence[Any], continuations: Sequence[str], *,
                     chat_template: str | None = None, context: int | None = None, special_tokens: str = "split"
                     ) -> tuple[list[tuple[list[int], list[int]]], list[bool]]:
    """``(prompt ids, continuation ids)`` per pair for ``score()``, and which prompts were cut to fit.

    A chat prompt is rendered with the chat template (no extra special tokens); a string prompt is used
    verbatim with the tokenizer's own special tokens; an empty prompt becomes BOS (or EOS). The continuation
    is tokenised on its own. With ``context``, a prompt is cut from the left so prompt + continuation fit.
    Every backend that scores with local weights builds its inputs here, so they score the same tokens.
    Control-token strings in prompts and continuations are text unless ``special_tokens="parse"``
    (``prompt_token_ids``).
    """
    split = check_special_tokens_mode(special_tokens) == "split"
    parse = {} if not split else {"split_special_tokens": True}
    if isinstance(prompts, (str, bytes)) or isinstance(continuations, (str, bytes)):
        raise BerdsError("score() takes a list of prompts and a list of continuations")
    if len(prompts) != len(continuations):
        raise BerdsError(f"score() got {len(prompts)} prompts but {len(continuations)} continuations")
    rows: list[tuple[list[int], list[int]]] = []
    truncated: list[bool] = []
    for i, (prompt, continuation) in enumerate(zip(prompts, continuations)):
        if not isinstance(continuation, str) or not continuation.strip():
            raise BerdsError(f"continuation {i} is empty or not a string — there is nothing to score")
        if isinstance(prompt, str):
            prompt_ids = list(tokenizer(prompt, add_special_tokens=True, **parse)["input_ids"])
        else:
            prompt_ids = prompt_token_ids(tokenizer, normalise_prompts([prompt])[0], chat_template=chat_template,
                                          special_tokens=special_tokens)
        if not prompt_ids:  # the first token needs something to be conditioned on
            start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
            prompt_ids = [start]
        cont_ids = list(tokenizer(continuation, add_special_tokens=False, **parse)["input_ids"])
        cut = False
        if context and len(prompt_ids) + len(cont_ids) > context:
            if len(cont_ids) >= context:
                raise BerdsError(f"continuation {i} has {len(cont_ids)} tokens, more than the model's context "
                                 f"of {context} — score shorter texts or use a model with a longer context")
            prompt_ids, cut = prompt_ids[len(prompt_ids) + len(cont_ids) - context:], True
        rows.append((prompt_ids, cont_ids))
        truncated.append(cut)
    return rows, truncated
