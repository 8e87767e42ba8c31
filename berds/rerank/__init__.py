"""berds.rerank"""
