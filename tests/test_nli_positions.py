"""`nli:` judges never feed a model more tokens than it has positions (it ended in a raw RuntimeError about tensor
sizes); the embedded judge and NLI judges share the cap (berds.llm.shared.position_capped)."""

from __future__ import annotations

import types

import pytest

from berds.judges.nli import NLIJudge
from berds.llm.shared import position_capped
from berds.types import JudgePair
from llm_fixtures import build_tiny_nli

LONG = " ".join(["cats are great loyal pets"] * 60)  # 300 words: far past 64 positions


def test_position_capped():
    cfg = types.SimpleNamespace
    assert position_capped(512, cfg(max_position_embeddings=64, model_type="bert")) == 64
    assert position_capped(32, cfg(max_position_embeddings=64, model_type="bert")) == 32
    assert position_capped(512, cfg(max_position_embeddings=514, model_type="roberta", pad_token_id=1)) == 512
    assert position_capped(512, cfg(model_type="t5")) == 512  # relative positions: no limit in the config


def test_a_long_pair_is_truncated_to_the_models_positions(tmp_path):
    judge = NLIJudge(str(build_tiny_nli(tmp_path / "nli")))
    [long, short] = judge.judge([JudgePair("cats are great", LONG), JudgePair("cats are great", "cats are great")])
    assert 0.0 <= long.p_yes <= 1.0 and 0.0 <= short.p_yes <= 1.0
    assert judge._max_tokens == 64 and judge.max_length == 512  # the id keeps what was asked for
    # truncated to the positions, the long pair is judged as its first 64 tokens are
    cut = judge.judge([JudgePair("cats are great", " ".join(LONG.split()[:80]))])[0]
    assert cut.p_yes == pytest.approx(long.p_yes)


def test_a_roberta_style_model_keeps_its_padding_offset(tmp_path):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaForSequenceClassification

    words = "cats dogs are great loyal pets".split()
    vocab = {w: i for i, w in enumerate(["<s>", "<pad>", "</s>", "<unk>"] + words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(tmp_path / "rob")
    config = RobertaConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=34, pad_token_id=1, num_labels=3,
                           id2label={0: "contradiction", 1: "neutral", 2: "entailment"},
                           label2id={"contradiction": 0, "neutral": 1, "entailment": 2})
    torch.manual_seed(0)
    RobertaForSequenceClassification(config).save_pretrained(tmp_path / "rob")
    judge = NLIJudge(str(tmp_path / "rob"))
    [v] = judge.judge([JudgePair("cats are great", LONG)])
    assert judge._max_tokens == 32 and 0.0 <= v.p_yes <= 1.0
