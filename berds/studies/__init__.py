"""Experiments that combine stages: they retrieve or rerank *and* judge (λ tuning, the sycophancy study).

The stages below (retrievers, rerank, judges, evaluate) never import from here.
"""
