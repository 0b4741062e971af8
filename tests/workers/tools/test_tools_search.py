"""BM25 against a brute-force implementation of the formula, and corpus loading."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.workers.tools.search import (
    SAMPLE_CORPUS,
    Bm25Index,
    CorpusCatalog,
    CorpusError,
    Document,
    format_hits,
    load_corpus,
    tokenize,
)

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "x1"]
texts = st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join)


def brute_force_score(documents: list[Document], query: str, k1: float, b: float, d: int) -> float:
    """BM25 of document ``d`` straight from the formula, recounting everything."""
    tokenized = [tokenize(f"{doc.title} {doc.text}") for doc in documents]
    average = max(sum(map(len, tokenized)) / len(tokenized), 1e-9)
    total = 0.0
    for term in set(tokenize(query)):
        df = sum(term in tokens for tokens in tokenized)
        idf = math.log(1 + (len(documents) - df + 0.5) / (df + 0.5))
        tf = tokenized[d].count(term)
        total += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(tokenized[d]) / average))
    return total


@given(st.lists(texts, min_size=1, max_size=8), texts)
def test_scores_match_the_formula(corpus_texts: list[str], query: str) -> None:
    documents = [Document(id=f"d{i}", text=text) for i, text in enumerate(corpus_texts)]
    index = Bm25Index(documents)
    scores = index.scores(query)
    for d in range(len(documents)):
        expected = brute_force_score(documents, query, index.k1, index.b, d)
        assert scores.get(d, 0.0) == pytest.approx(expected, abs=1e-9)


@given(st.lists(texts, min_size=1, max_size=8), texts, st.integers(min_value=1, max_value=10))
def test_search_ranks_by_score_then_position(texts_: list[str], query: str, top_k: int) -> None:
    documents = [Document(id=f"d{i}", text=text) for i, text in enumerate(texts_)]
    index = Bm25Index(documents)
    hits = index.search(query, top_k)
    scores = index.scores(query)
    expected = sorted(scores, key=lambda d: (-scores[d], d))[:top_k]
    assert [hit.document.id for hit in hits] == [f"d{d}" for d in expected]


def test_sample_corpus_answers_a_question() -> None:
    index = CorpusCatalog().index("")
    hits = index.search("who discovered penicillin", top_k=3)
    assert hits[0].document.id == "penicillin"
    assert "Alexander Fleming" in format_hits(hits)
    assert format_hits([]) == "(no results)"


def test_folder_corpus(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("red apples")
    (tmp_path / "sub" / "b.md").write_text("green pears")
    (tmp_path / "ignored.bin").write_text("red red red")
    documents = load_corpus(tmp_path)
    assert [doc.id for doc in documents] == ["a.txt", "sub/b.md"]
    assert CorpusCatalog().index(str(tmp_path)).search("pears")[0].document.id == "sub/b.md"


def test_bad_corpora_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus(tmp_path / "missing")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "x"}\n{"id": "b"}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: .*text"):
        load_corpus(bad)
    duplicate = tmp_path / "dup.jsonl"
    duplicate.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    with pytest.raises(CorpusError, match="duplicate id"):
        load_corpus(duplicate)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="no documents"):
        load_corpus(tmp_path / "empty")


def test_sample_corpus_is_shipped() -> None:
    assert len(load_corpus(SAMPLE_CORPUS)) >= 30
