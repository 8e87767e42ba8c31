"""How strongly DebateQA's published P.D. follows answer length: Table 2 of the paper, recomputed.

    python scripts/debateqa_length_correlation.py

The numbers are DebateQA's Table 2 (average answer length in tokens; P.D. with Qwen2 0.5B and with GPT-2 as
evaluator) for its 12 answering LLMs, copied from the paper. Prints Pearson r of log P.D. against log length
and Spearman rho, per evaluator, and the slope of the log-log fit berds' length adjustment uses
(``berds.answers.length_adjust``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# model: (avg. length in tokens, P.D. with Qwen2 0.5B, P.D. with GPT-2) -- DebateQA Table 2.
TABLE2 = {
    "GPT-4o": (434, 3.07, 4.03), "GPT-4o mini": (252, 4.09, 5.88), "GPT-3.5 Turbo": (141, 5.28, 8.25),
    "Claude 3.5 Sonnet": (199, 4.63, 6.96), "Llama3 70B": (432, 3.09, 4.07), "Llama3 8B": (381, 3.51, 5.02),
    "Qwen2 7B": (255, 4.18, 6.10), "Phi-3 small 128k": (412, 3.50, 4.31), "Gemma 2 9B": (395, 3.12, 4.04),
    "Qwen2 1.5B": (169, 5.60, 8.67), "Qwen2 0.5B": (72, 6.56, 10.87), "Phi-3 mini 128k": (218, 4.82, 7.33),
}


def main() -> None:
    import numpy as np

    from berds.answers import length_adjust

    lengths = [v[0] for v in TABLE2.values()]
    for column, name in ((1, "Qwen2 0.5B"), (2, "GPT-2")):
        pd = [v[column] for v in TABLE2.values()]
        fit = length_adjust(pd, lengths)
        ranks = lambda xs: np.argsort(np.argsort(xs))  # noqa: E731 (no ties in these columns)
        rho = float(np.corrcoef(ranks(lengths), ranks(pd))[0, 1])
        adjusted = [p * f for p, f in zip(pd, fit["factors"])]
        best = sorted(TABLE2, key=lambda m: adjusted[list(TABLE2).index(m)])[:3]
        print(f"P.D. ({name}) vs answer length over {len(pd)} LLMs: Pearson r(log, log) = "
              f"{fit['pearson_log_length']:+.3f}, Spearman rho = {rho:+.3f}, slope {fit['slope']:+.3f}; "
              f"best three after length adjustment: {', '.join(best)}")


if __name__ == "__main__":
    main()
