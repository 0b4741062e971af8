"""Local search: a corpus loader and an Okapi BM25 index in plain Python.

A corpus is a folder of ``.txt``/``.md`` files (one document each, id = relative path) or a JSONL
file of ``{"id": ..., "text": ..., "title": ...}`` lines (title optional). ``CorpusCatalog``
resolves a ``SearchTool.corpus`` value (``""``: the default corpus, ``sample``: the one shipped in
``heddle/data``, else a path) to an index built once and kept.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

SAMPLE_CORPUS = Path(__file__).resolve().parents[2] / "data" / "search_corpus.jsonl"
CORPUS_SUFFIXES = (".txt", ".md")
_WORD = re.compile(r"[^\W_]+")


class CorpusError(ValueError):
    """A corpus that cannot be read; the message names the file, line and field."""


class Document(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    id: str
    text: str
    title: str = ""


@dataclass(frozen=True, slots=True)
class SearchHit:
    document: Document
    score: float


def tokenize(text: str) -> list[str]:
    """Lower-cased runs of letters and digits (any script)."""
    return _WORD.findall(text.lower())


def load_corpus(path: Path) -> list[Document]:
    if path.is_dir():
        documents = _load_folder(path)
    elif path.is_file():
        documents = _load_jsonl(path)
    else:
        raise CorpusError(f"corpus {str(path)!r} does not exist (a folder or a .jsonl file)")
    if not documents:
        raise CorpusError(f"corpus {str(path)!r} holds no documents")
    return documents


def _load_folder(folder: Path) -> list[Document]:
    files = sorted(p for p in folder.rglob("*") if p.suffix in CORPUS_SUFFIXES and p.is_file())
    return [
        Document(id=str(file.relative_to(folder)), text=file.read_text(errors="replace"))
        for file in files
    ]


_document_decoder = msgspec.json.Decoder(Document)


def _load_jsonl(path: Path) -> list[Document]:
    documents, seen = [], set()
    for line_number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            document = _document_decoder.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise CorpusError(f"{path}:{line_number}: {exc}") from None
        if document.id in seen:
            raise CorpusError(f"{path}:{line_number}: id: duplicate id {document.id!r}")
        seen.add(document.id)
        documents.append(document)
    return documents


class Bm25Index:
    """Okapi BM25 (Robertson et al., TREC-3) with the non-negative idf of Lucene:

        idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
        score(d, q) = sum over distinct t in q of
                      idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))

    Postings are kept per term, so a query touches only documents that share a term with it.
    """

    def __init__(self, documents: Sequence[Document], *, k1: float = 1.5, b: float = 0.75):
        if not documents:
            raise ValueError("a BM25 index needs at least one document")
        self.documents = list(documents)
        self.k1, self.b = k1, b
        self._lengths = [0] * len(documents)
        self._postings: dict[str, list[tuple[int, int]]] = {}
        for index, document in enumerate(documents):
            counts = Counter(tokenize(f"{document.title} {document.text}"))
            self._lengths[index] = sum(counts.values())
            for term, count in counts.items():
                self._postings.setdefault(term, []).append((index, count))
        self._average_length = max(sum(self._lengths) / len(documents), 1e-9)

    def idf(self, term: str) -> float:
        num_with_term = len(self._postings.get(term, ()))
        num_documents = len(self.documents)
        return math.log(1 + (num_documents - num_with_term + 0.5) / (num_with_term + 0.5))

    def scores(self, query: str) -> dict[int, float]:
        """Score of every document sharing at least one term with ``query``, by position."""
        totals: dict[int, float] = {}
        for term in set(tokenize(query)):
            idf = self.idf(term)
            for index, count in self._postings.get(term, ()):
                norm = self.k1 * (1 - self.b + self.b * self._lengths[index] / self._average_length)
                totals[index] = totals.get(index, 0.0) + idf * count * (self.k1 + 1) / (
                    count + norm
                )
        return totals

    def search(self, query: str, top_k: int = 5) -> list[SearchHit]:
        """The ``top_k`` best documents, best first; ties go to the earlier document."""
        if top_k <= 0:
            raise ValueError(f"top_k must be > 0, got {top_k}")
        ranked = sorted(self.scores(query).items(), key=lambda item: (-item[1], item[0]))
        return [SearchHit(self.documents[index], score) for index, score in ranked[:top_k]]


def format_hits(hits: Iterable[SearchHit], max_chars_per_document: int = 600) -> str:
    """Hits as the observation text a model reads: one numbered block per document."""
    blocks = []
    for rank, hit in enumerate(hits, start=1):
        text = " ".join(hit.document.text.split())
        if len(text) > max_chars_per_document:
            text = text[:max_chars_per_document] + " ..."
        title = f" {hit.document.title}" if hit.document.title else ""
        blocks.append(f"[{rank}] ({hit.document.id}){title}: {text}")
    return "\n".join(blocks) if blocks else "(no results)"


class CorpusCatalog:
    """Indexes by corpus reference, built on first use and kept for the executor's life."""

    def __init__(self, default_corpus: Path = SAMPLE_CORPUS) -> None:
        self.default_corpus = default_corpus
        self._indexes: dict[Path, Bm25Index] = {}

    def resolve(self, corpus: str) -> Path:
        if not corpus:
            return self.default_corpus
        if corpus == "sample":
            return SAMPLE_CORPUS
        return Path(corpus).expanduser()

    def index(self, corpus: str) -> Bm25Index:
        path = self.resolve(corpus).resolve()
        if path not in self._indexes:
            self._indexes[path] = Bm25Index(load_corpus(path))
        return self._indexes[path]
