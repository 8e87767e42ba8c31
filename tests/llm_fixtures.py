"""Tiny LLM fixtures built in the test session (nothing is downloaded).

* ``build_tiny_mistral(folder)``: a random-weight ``MistralForCausalLM`` (hidden size 32, 2 layers) and a
  word-level tokenizer whose vocabulary covers the judge prompts, with a Mistral-style chat template that —
  like Mistral-7B-Instruct-v0.2's — rejects ``system`` messages. Tokens use sentencepiece's ``▁`` word
  marker, and both ``"▁Yes"`` and ``"Yes"`` exist, so two ids decode to one string (as in real vocabularies).
* ``build_tiny_lora(base, folder)``: a random (non-zero) LoRA adapter on that model, saved with peft.
* ``build_tiny_nli(folder)`` / ``build_tiny_t5_nli(folder)``: random-weight NLI models (a BERT classifier with
  MNLI labels; a T5 answering "1"/"0") for the ``nli:`` judge.

Use them from a test module with ``from llm_fixtures import tiny_mistral, tiny_lora  # noqa: F401``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

MISTRAL_STYLE_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}[INST] {{ message['content'] }} [/INST]"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] }}{{ eos_token }}"
    "{% else %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% endfor %}"
)

_EXTRA_WORDS = (
    "Yes No yes no maybe Hello world the a of to is are and or not it this that cities bike lanes safer "
    "streets shops sales vaccines work taxes should be raised lowered school uniforms help students"
).split()


def _vocabulary() -> dict[str, int]:
    from berds.judges.prompts import PROMPTS

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "[INST]": 3, "[/INST]": 4, "▁": 5}
    for token in ["Yes", "No", ".", ",", ":", "?", "!", '"', "'", "(", ")", "-"]:
        vocab.setdefault(token, len(vocab))
    text = " ".join(p.template for p in PROMPTS.values()) + " " + " ".join(_EXTRA_WORDS)
    for word in re.findall(r"[A-Za-z]+", text):
        vocab.setdefault("▁" + word, len(vocab))
    return vocab


def build_tiny_mistral(folder: str | Path, *, seed: int = 0) -> Path:
    """Write a tiny random Mistral model + tokenizer (with chat template) to ``folder``; return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    vocab = _vocabulary()
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation()])
    backend.decoder = decoders.Metaspace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        additional_special_tokens=["[INST]", "[/INST]"],
    )
    tokenizer.chat_template = MISTRAL_STYLE_TEMPLATE
    tokenizer.save_pretrained(folder)

    config = MistralConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        bos_token_id=1, eos_token_id=2, sliding_window=None, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = MistralForCausalLM(config)
    # Wider-than-default output weights: a peaked next-token distribution, so greedy choices are
    # decided by clear margins rather than float noise.
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return folder


def build_tiny_lora(base: str | Path, folder: str | Path, *, seed: int = 1) -> Path:
    """Save a LoRA adapter with random, non-zero weights for the model in ``base``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"],
                        init_lora_weights=False, task_type="CAUSAL_LM")
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():  # init_lora_weights=False already makes B non-zero; make the effect clear
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.3)
    peft_model.save_pretrained(folder)
    return folder


def build_tiny_nli(folder: str | Path) -> Path:
    """A random-weight BERT-style sequence classifier with MNLI-style labels, and its tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    folder = Path(folder)
    words = "cats dogs are great loyal pets fish need clean water birds sing the a not".split()
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                        cls_token="[CLS]", sep_token="[SEP]")
    tokenizer.save_pretrained(folder)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=3,
                        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 2.0)
    model.save_pretrained(folder)
    return folder


def save_tiny_t5(folder: str | Path, vocab: dict[str, int], pre_tokenizer: Any, *, seed: int = 0) -> Path:
    """A random-weight one-layer T5 over a word-level tokenizer of ``vocab`` (``<pad>`` 0, ``</s>`` 1, ``<unk>``),
    its output layer spread wide so greedy answers differ between inputs; saved to ``folder``."""
    import torch
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    folder = Path(folder)
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizer
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(folder)
    config = T5Config(vocab_size=len(vocab), d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config)
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 2.0)
    model.save_pretrained(folder)
    return folder


def build_tiny_t5_nli(folder: str | Path) -> Path:
    """A random-weight T5 (encoder-decoder) with a word tokenizer that has the TRUE-style answer words "1"/"0"."""
    from tokenizers import pre_tokenizers

    words = "premise hypothesis : cats dogs are great loyal pets fish need clean water birds sing 1 0".split()
    vocab = {w: i for i, w in enumerate(["<pad>", "</s>", "<unk>"] + words)}
    return save_tiny_t5(folder, vocab, pre_tokenizers.Whitespace(), seed=0)


@pytest.fixture(scope="session")
def tiny_mistral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of the tiny Mistral-architecture model + tokenizer."""
    return build_tiny_mistral(tmp_path_factory.mktemp("tiny-mistral"))


@pytest.fixture(scope="session")
def tiny_lora(tiny_mistral: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of a random LoRA adapter for ``tiny_mistral``."""
    return build_tiny_lora(tiny_mistral, tmp_path_factory.mktemp("tiny-lora"))


class SleepyLLM:
    """A backend that takes ``delay`` seconds per ``generate()`` call and answers "Yes" (P(Yes) known):
    the slow model the server's queue, timeout and health checks are tested against. Served with
    ``--backend llm_fixtures:SleepyLLM --model NAME -o delay=2`` (tests/ on the server's PYTHONPATH)."""

    def __init__(self, model: str, delay: float = 1.0):
        self.model_name, self.delay = model, float(delay)
        self.id = f"sleepy:{model}"
        self.calls: list[int] = []

    def generate(self, prompts, *, max_new_tokens=16, temperature=0.0, top_logprobs=0):
        import time

        from berds.llm.base import Generation

        self.calls.append(len(prompts))
        time.sleep(self.delay)
        logprobs = {"Yes": -0.1, "No": -2.4} if top_logprobs else None
        return [Generation("Yes", logprobs) for _ in prompts]


class ScriptedServer:
    """A real HTTP server on 127.0.0.1 whose answers come from ``respond(body, n) -> (status, headers, payload)``
    (a JSON value, or ``bytes`` sent as they are: a malformed body); it records every request's arrival time,
    headers and body (``None`` where it is not JSON)."""

    def __init__(self, respond):
        self.requests: list[tuple[float, dict, dict]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with outer.lock:
                    outer.requests.append((time.monotonic(), dict(self.headers), body))
                    n = len(outer.requests)
                status, headers, payload = respond(body, n)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
