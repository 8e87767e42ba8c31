"""Indexes of a passage store: Lucene BM25 (``bm25``), dense FAISS (``faiss``) with encoder specs (``encoders``).

Every index is a self-describing folder (``base``: ``meta.json`` with type, corpus fingerprint, settings).
Importing this package is light; Java, torch and FAISS load only when an index is built or searched.
"""
