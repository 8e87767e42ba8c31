"""berds: benchmark retrieval systems for diverse perspectives.

Importing ``berds`` is cheap: heavy stacks (torch, faiss, pyserini/Java, ray, vllm) load only when used.
The public API lives in submodules: ``berds.types``, ``berds.questions``, ``berds.runs``,
``berds.evaluate``, ``berds.corpora``, ``berds.indexes``, ``berds.retrievers``, ``berds.rerank``.
"""

__version__ = "0.1.0"
