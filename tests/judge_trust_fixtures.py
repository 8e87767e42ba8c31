"""Judge-trust test fixtures: a rule-based judge LLM with *known, injected* biases, and a server launcher.

``ScriptedJudgeLLM`` implements ``berds.llm.base.LLM``. It reads the prompts berds really sends — the
study's judge prompt and every audit variant of it, the debate critic prompt and the revision turn — finds
the document and the perspective in them, and answers from a truth table (a labelled tsv, given as the
``model`` path, so ``python -m berds.llm.server --backend judge_trust_fixtures:ScriptedJudgeLLM --model
pairs.tsv`` serves it over real HTTP). Unbiased, it answers every variant correctly in that variant's own
answer words. Biases are injected on purpose so the audit has something to find:

* ``label-order``    — when the instruction lists the negative word first ("No" or "Yes"), say Yes to a
                       ``rate`` share of the gold negatives (the position bias "favour the last label");
* ``negation-blind`` — answer a negated statement ("It is not the case that X") as if it were X;
* ``stance-yes``     — say Yes to a ``rate`` share of gold negatives whose perspective is a supporting one;
* ``errors``         — a share of first answers simply wrong (for the debate critic to catch).

Which pairs are hit is decided by a hash of the pair, so the expected counts can be computed in the test.
With ``top_logprobs > 0`` each answer carries first-token log-probabilities: ``confidence`` for the word
given, the rest for the other answer word.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from berds.llm.base import Generation

NEGATION_PREFIX = "It is not the case that "
_WORDS = re.compile(r'Answer with (?:only )?"(\w+)" or "(\w+)"')
_ANSWERED = re.compile(r"The judge answered: (Yes|No)")
POSITIVE_WORDS = ("Yes", "True", "A")


def sentence_key(text: str) -> tuple[str, ...]:
    """A document's sentences as a sorted tuple: the same key for the document with sentences reordered."""
    return tuple(sorted(s.strip() for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()))


def pair_hash(perspective: str, document: str, salt: str) -> float:
    """A number in [0, 1) fixed for a pair (and salt): decides which pairs an injected bias hits."""
    digest = hashlib.sha256(f"{salt}\x00{perspective}\x00{document}".encode()).hexdigest()
    return int(digest[:8], 16) / 2**32


# A block ends at a blank line (berds' paraphrase prompts, the debate critic) or at the next labelled line
# (the study's prompt: "Document: ...\nStatement: ...\nInstruction: ...").
_BLOCK_END = re.compile(r"\n\n|\n(?:Statement|Document|Perspective|Instruction): ")
_NAMES = {"Perspective": ("Perspective", "Statement"), "Document": ("Document",)}


def _last_block(text: str, name: str) -> str | None:
    start, label = max((text.rfind(f"\n{n}: "), n) for n in _NAMES.get(name, (name,)))
    if start < 0:
        start, label = max((text.rfind(f"{n}: ") if text.startswith(f"{n}: ") else -1, n) for n in _NAMES.get(name, (name,)))
        if start < 0:
            return None
    else:
        start += 1
    body = text[start + len(label) + 2:]
    end = _BLOCK_END.search(body)
    return body if end is None else body[:end.start()]


class ScriptedJudgeLLM:
    """A rule-based judge LLM answering from a labelled tsv, with optional injected biases (module docstring)."""

    def __init__(self, model: str, *, bias: str = "none", rate: float = 1.0, errors: float = 0.0,
                 confidence: float = 0.9, critic: str = "truth", revision: str = "truth", id: str | None = None):  # noqa: A002
        from berds.trust.labels import read_labelled_pairs

        if bias not in ("none", "label-order", "negation-blind", "stance-yes"):
            raise ValueError(f"unknown bias {bias!r}")
        labelled = read_labelled_pairs(model)
        self.truth: dict[tuple[str, tuple[str, ...]], tuple[bool, str | None]] = {
            (p.perspective.lower(), sentence_key(p.document)): (p.label, p.stance) for p in labelled}
        self.bias, self.rate, self.errors = bias, float(rate), float(errors)
        self.confidence, self.critic, self.revision = float(confidence), critic, revision
        self.id = id or f"scripted:{bias}@{rate:g}+errors@{errors:g}:{Path(model).name}"
        self.calls: list[int] = []  # prompts per generate() call
        self.unknown = 0

    # ------------------------------------------------------------------------------------ truth

    def lookup(self, perspective: str, document: str) -> tuple[bool, bool, str | None] | None:
        """``(gold label of the statement as written, is it negated, stance)`` or None when unknown."""
        negated = perspective.startswith(NEGATION_PREFIX)
        original = perspective[len(NEGATION_PREFIX):] if negated else perspective
        found = self.truth.get((original.lower(), sentence_key(document)))
        if found is None:
            return None
        label, stance = found
        return (False if negated else label), negated, stance

    def first_answer(self, perspective: str, document: str, words: tuple[str, str]) -> bool | None:
        found = self.lookup(perspective, document)
        if found is None:
            return None
        answer, negated, stance = found
        if negated and self.bias == "negation-blind":
            answer = self.lookup(perspective[len(NEGATION_PREFIX):], document)[0]
        if self.errors and pair_hash(perspective, document, "errors") < self.errors:
            answer = not answer
        hit = pair_hash(perspective, document, "bias") < self.rate
        if self.bias == "label-order" and words[0] not in POSITIVE_WORDS and not answer and hit:
            answer = True
        if self.bias == "stance-yes" and stance == "support" and not answer and hit:
            answer = True
        return answer

    # ------------------------------------------------------------------------------------ LLM

    def generate(self, prompts: Sequence[Sequence[dict]], *, max_new_tokens: int = 16, temperature: float = 0.0,
                 top_logprobs: int = 0) -> list[Generation]:
        self.calls.append(len(prompts))
        return [self._one(list(p), top_logprobs) for p in prompts]

    def _one(self, messages: list[dict], top_logprobs: int) -> Generation:
        last = messages[-1]["content"]
        if "devil's advocate" in last:
            return Generation(self._critique(last))
        # the judge prompt: the last user turn holding a document (a revision turn follows it in a debate)
        source = next((m["content"] for m in reversed(messages) if m["role"] in ("user", "plain")
                       and "Document: " in m["content"]), last)
        perspective, document = _last_block(source, "Perspective"), _last_block(source, "Document")
        match = _WORDS.search(source)
        words = (match.group(1), match.group(2)) if match else ("Yes", "No")
        positive = next((w for w in words if w in POSITIVE_WORDS), "Yes")
        negative = next((w for w in words if w != positive), "No")
        if perspective is None or document is None:
            return Generation("I cannot find the document.")
        answer = self.first_answer(perspective, document, words)
        if answer is None:
            self.unknown += 1
            return Generation("Unknown pair.")
        if len(messages) > 1 and "A reviewer objects" in last:  # a revision turn
            previous = messages[-2]["content"].strip().split()[0].strip(".").lower() == positive.lower()
            truth = self.lookup(perspective, document)[0]
            answer = {"truth": truth, "stubborn": previous, "flip": not previous}[self.revision]
        word = positive if answer else negative
        other = negative if answer else positive
        logprobs = {word: math.log(self.confidence), other: math.log(1 - self.confidence)} if top_logprobs else None
        return Generation(f"{word}.", logprobs)

    def _critique(self, prompt: str) -> str:
        perspective, document = _last_block(prompt, "Perspective"), _last_block(prompt, "Document")
        said = _ANSWERED.search(prompt)
        found = self.lookup(perspective or "", document or "")
        if found is None or said is None:
            return "I cannot review this."
        if self.critic == "truth" and (said.group(1) == "Yes") == found[0]:
            return "NO ISSUE"
        return (f"The answer {said.group(1)} looks wrong: read the document again, it "
                f"{'does not support' if said.group(1) == 'Yes' else 'argues for'} the perspective.")


# ---------------------------------------------------------------------------------------- server



def port_of(url: str) -> int:
    """The port of a ``served`` server's base URL."""
    return int(url.rsplit(":", 1)[1].split("/")[0])


def read_until_eof(sock: Any) -> bytes:
    """Everything a server sends on ``sock`` until it closes its side."""
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


@contextlib.contextmanager
def served(backend: str, model: str, *, options: Sequence[str] = (), log_dir: Path, extra_args: Sequence[str] = (),
           timeout: float = 120.0, max_batch_size: int = 32) -> Iterator[str]:
    """Start ``python -m berds.llm.server`` on a free port (tests/ on its PYTHONPATH); yield its base URL.

    When the ``with`` body succeeds, the server is stopped with SIGTERM and must exit cleanly (status 0)."""
    tests_dir = str(Path(__file__).parent)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(x for x in (tests_dir, os.environ.get("PYTHONPATH", "")) if x)}
    args = [sys.executable, "-m", "berds.llm.server", "--backend", backend, "--model", str(model),
            "--host", "127.0.0.1", "--port", "0", "--max-batch-size", str(max_batch_size), *extra_args]
    for option in options:
        args += ["--option", option]
    stderr = open(log_dir / "server-stderr.txt", "w+")  # a file: a full pipe would block the server
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True).start()
    url, deadline = None, time.monotonic() + timeout
    while url is None and time.monotonic() < deadline and process.poll() is None:
        for line in list(lines):
            match = re.search(r"ready: (http://127\.0\.0\.1:\d+/v1)", line)
            if match:
                url = match.group(1)
        time.sleep(0.05)
    try:
        if url is None:
            process.kill()
            stderr.seek(0)
            raise RuntimeError(f"server did not become ready: {stderr.read()[-2000:]}")
        yield url
        process.terminate()  # SIGTERM: the server shuts down cleanly
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)
        stderr.close()


# ---------------------------------------------------------------------------------------- labelled data


def demo_labelled_path() -> Path:
    import berds

    return Path(berds.__file__).parent / "data" / "demo" / "labelled_pairs.tsv"


def write_demo_subset(path: Path, questions: Sequence[str] = ("demo-01", "demo-02", "demo-03", "demo-04"),
                      *, with_stance: bool = True) -> Path:
    """Demo labelled pairs of some two-perspective questions, with a ``stance`` column: the demo's first
    perspective argues for the question's claim (``support``), the second against it (``oppose``)."""
    from dataclasses import replace

    from berds.trust.labels import read_labelled_pairs, write_labelled_pairs

    pairs, first = [], {}
    for p in read_labelled_pairs(demo_labelled_path()):
        if p.id not in questions:
            continue
        first.setdefault(p.question, p.perspective)
        stance = ("support" if p.perspective == first[p.question] else "oppose") if with_stance else None
        pairs.append(replace(p, stance=stance))
    write_labelled_pairs(path, pairs)
    return path


# ---------------------------------------------------------------------------------------- a biased transformer


def build_last_label_mistral(folder: str | Path) -> Path:
    """A tiny Mistral (the LLM fixture's architecture and tokenizer) whose weights are *set by hand* so that
    it answers with whichever of "Yes" / "No" appears last in its prompt — the position bias of LLM judges
    that favour the last-listed label. Given the study's instruction ('Answer with "Yes" or "No" only.') it
    says No to everything; with the labels listed No/Yes it says Yes to everything.

    How (one attention head does it; every other weight is zero, so the rest of the network is identity):
    the residual stream holds a constant feature and "is Yes" / "is No" features. The query at the last
    position and the keys of Yes/No tokens live in the slowest rotary pair (θ = 10000^(-6/8) = 0.001), so
    the score ``C·cos(θ·distance)`` is large for label tokens and a little larger for nearer ones: softmax
    picks the most recent label token. Its value (+1 for Yes, −1 for No) is written to one residual feature
    that the output layer maps to the logits of "▁Yes" (+) and "▁No" (−).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llm_fixtures import build_tiny_mistral

    folder = build_tiny_mistral(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vocab = tokenizer.get_vocab()
    yes_ids, no_ids = [vocab["Yes"], vocab["▁Yes"]], [vocab["No"], vocab["▁No"]]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    config = model.config
    head_dim = config.head_dim
    slow = head_dim // 2 - 1  # index of the slowest rotary pair's first component (pairs are (i, i + head_dim/2))
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        const, is_yes, is_no, answer = 0, 1, 2, 3  # residual features
        emb = model.model.embed_tokens.weight
        emb[:, const] = 1.0
        emb[yes_ids, is_yes] = 1.0
        emb[no_ids, is_no] = 1.0
        for layer in model.model.layers:
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
        attn = model.model.layers[0].self_attn
        attn.q_proj.weight[slow, const] = 80.0                  # query head 0
        attn.k_proj.weight[slow, is_yes] = 80.0                 # key head 0: label tokens only
        attn.k_proj.weight[slow, is_no] = 80.0
        attn.v_proj.weight[0, is_yes] = 1.0                     # value: +1 Yes, -1 No
        attn.v_proj.weight[0, is_no] = -1.0
        attn.o_proj.weight[answer, 0] = 1.0                     # head 0, dim 0 -> the answer feature
        model.model.norm.weight.fill_(1.0)
        model.lm_head.weight[vocab["▁Yes"], answer] = 1.0
        model.lm_head.weight[vocab["▁No"], answer] = -1.0
    model.save_pretrained(folder)
    return Path(folder)


# ---------------------------------------------------------------------------------------- the embedded judge

import pytest  # noqa: E402  (fixtures below)


@pytest.fixture(scope="session")
def embedded_judge():
    """The shipped embedded judge (MiniLM from PyPI + the shipped head), loaded once per session."""
    from berds.judges.catalogue import load_judge

    return load_judge("embedded")


@pytest.fixture(scope="session")
def embedded_small(tmp_path_factory):
    """26 demo pairs (both stances, both labels) and a judgement cache shared by the tests that judge them
    with the embedded judge, so each pair is embedded once per session."""
    from berds.evaluate.cache import JudgementCache
    from berds.trust.labels import read_labelled_pairs

    folder = tmp_path_factory.mktemp("embedded")
    labelled = read_labelled_pairs(write_demo_subset(folder / "pairs.tsv"))
    small = labelled.subset(range(0, len(labelled), 7))
    cache = JudgementCache(folder / "cache.sqlite")
    yield small, cache
    cache.close()


class StanceYesJudge:
    """Any judge with an injected stance bias: it says Yes to every pair whose perspective is a supporting one."""

    def __init__(self, inner, supporting: set[str]):
        self.inner, self.supporting = inner, supporting
        self.id = f"{inner.id}|injected=stance-yes"
        self.prompt_version = inner.prompt_version

    def judge(self, pairs):
        from berds.types import Verdict

        return [Verdict(True, v.p_yes, v.raw, {"injected": True}) if p.perspective in self.supporting else v
                for p, v in zip(pairs, self.inner.judge(pairs))]
