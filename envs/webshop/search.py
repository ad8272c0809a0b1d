"""Product search: BM25 (the ``bm25s`` library) over each product's title, features, description and options.

WebShop ranks with a Lucene BM25 index over the same fields (``search_engine/``) and returns the top 50.
Products that share no term with the query are not returned.
"""
from __future__ import annotations

import threading

import bm25s
import numpy as np

from envs.webshop.catalogue import Catalogue, search_document

_INDEXES: dict[str, "SearchIndex"] = {}
_LOCK = threading.Lock()


class SearchIndex:
    def __init__(self, catalogue: Catalogue):
        self.asins = [p.asin for p in catalogue.products]
        corpus = [search_document(p) for p in catalogue.products]
        tokens = bm25s.tokenize(corpus, stopwords="en", return_ids=False, show_progress=False)
        self.vocabulary = {t for doc in tokens for t in doc}
        self.retriever = bm25s.BM25()
        self.retriever.index(tokens, show_progress=False)

    def search(self, query: str, k: int) -> list[str]:
        """Asins of the ``k`` best products for ``query``, best first (fewer when fewer share a term)."""
        tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        tokens = [t for t in tokens if t in self.vocabulary]
        if not tokens:
            return []
        scores = self.retriever.get_scores(tokens)
        # stable sort: ties keep catalogue order, so a search is deterministic everywhere
        order = np.argsort(-scores, kind="stable")[: min(k, len(self.asins))]
        return [self.asins[int(i)] for i in order if scores[i] > 0]


def search_index(catalogue: Catalogue) -> SearchIndex:
    """The (per process, per catalogue) cached index."""
    with _LOCK:
        if catalogue.digest not in _INDEXES:
            _INDEXES[catalogue.digest] = SearchIndex(catalogue)
        return _INDEXES[catalogue.digest]
