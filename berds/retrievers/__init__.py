"""Retrievers: the ``Retriever`` protocol, the ``RETRIEVERS`` catalogue and ``retrieve`` (question set -> run).

Importing this package is light: models, FAISS and Java load only when a retriever is built.
"""

from berds.retrievers.base import Retriever, contract_problems, provenance_of
from berds.retrievers.registry import RETRIEVERS, load_retriever
from berds.retrievers.retrieve import retrieve

__all__ = ["Retriever", "RETRIEVERS", "load_retriever", "retrieve", "contract_problems", "provenance_of"]
