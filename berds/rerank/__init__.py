"""berds.rerank: rerankers turn a run into a new run (``base.Reranker``).

``catalogue`` (RERANKERS, load_reranker; entry-point group ``berds.rerankers``), ``candidates`` (the top
passages, Sim1 and embeddings every diversity reranker shares), ``mmr`` (the study's Eq. 1), ``setselect``
(pyversity's DPP/MSD/COVER/SSD), ``explicit`` (xQuAD, PM2 over LLM-written perspectives), ``embeddings``
(encoders and the embedding cache). Rerankers never judge: tuning and studies live in ``berds.studies``.
"""
