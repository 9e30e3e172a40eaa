"""Formatted blocks translated whole: the text is the translation of the untagged text,
every style lands on some words, kept text stays as written, URLs are never translated."""

import numpy as np
import pytest

from seq2seq.decoding.translator import Translator
from seq2seq.documents.blocks import render
from seq2seq.documents.inline import (
  Run,
  _one_span,
  merged,
  protect_urls,
  translate_blocks,
  unprotected,
)


@pytest.fixture(scope="module")
def translator(trained_run):
  return Translator.load(trained_run)


BLOCKS = [
    [Run("A "), Run("young", "b"), Run(" man is carrying a "), Run("red ball", "a"),
     Run(" on the street.")],
    [Run("Two dogs are playing in the snow. A "), Run("man", "i"),
     Run(" is watching a small dog in the park.")],
    [Run("A woman is sitting on a bench.", "b")],  # one style: plain translation, styled
]


def test_a_styled_block_reads_as_the_translation_of_its_untagged_text(translator):
  found = translate_blocks(translator, BLOCKS, beam_size=2)
  for block, runs in zip(BLOCKS, found):
    plain = "".join(r.text for r in block)
    assert "".join(r.text for r in runs) == translator.translate(plain, beam_size=2)
    # every style of the source is on some words of the translation, and no other
    assert {r.style for r in runs if r.text.strip()} - {None} == {
        r.style for r in block} - {None}
    assert all(r.text == r.text.strip() for r in runs if r.style is not None
               and len(block) > 1)  # styled words, no styled white space at the edges
    styled = [r.style for r in runs if r.style is not None]
    assert len(styled) == len(set(styled))  # each style on one span: one tag, as in the source
  assert found[2] == [Run(translator.translate(BLOCKS[2][0].text, beam_size=2), "b")]


def test_a_style_cut_by_another_keeps_its_group_that_attends_to_it_most():
  # what a poor alignment gives: b's and a's words interleaved, unstyled words between
  word_style = [None, "b", None, "b", "a", "b", "b", None, "a", None, "a"]
  attention_b = np.array([0, .2, 0, .1, 0, .3, .4, 0, 0, 0, 0])
  _one_span(word_style, "b", attention_b)
  assert word_style == [None, None, None, None, "a", "b", "b", None, "a", None, "a"]
  _one_span(word_style, "a", np.array([0, 0, 0, 0, .5, 0, 0, 0, .2, 0, .2]))
  assert word_style == [None, None, None, None, "a", "b", "b", None, None, None, None]
  # where nothing cuts them, a style's words and the unstyled words between are one span
  word_style = ["b", None, "b", None]
  _one_span(word_style, "b", np.zeros(4))
  assert word_style == ["b", "b", "b", None]


def test_kept_text_and_urls_stay_as_written(translator):
  block = [Run("A man is holding "), Run("print(x)", "code"),
           Run(" near https://example.org/a?b=1 and me@example.org in the park.")]
  runs = translate_blocks(translator, [block], verbatim=lambda s: s == "code")[0]
  text = "".join(r.text for r in runs)
  assert [r.text for r in runs if r.style == "code"] == ["print(x)"]
  assert "https://example.org/a?b=1" in text and "me@example.org" in text
  # a block that begins or ends with kept text: that text stays out of the model's input
  edge = translate_blocks(translator, [[Run("x = 1", "code"),
                                         Run(" A dog is running in the park.")]],
                          verbatim=lambda s: s == "code")[0]
  assert edge[0] == Run("x = 1", "code") and "".join(r.text for r in edge[1:]).strip() == (
      translator.translate("A dog is running in the park.").strip())


def test_urls_are_cut_out_and_put_back():
  runs = [Run("See https://a.org/x, or www.b.de. Mail c@d.org!", "p")]
  protected = protect_urls(runs)
  assert [r.text for r in protected if r.style != "p"] == ["https://a.org/x", "www.b.de",
                                                           "c@d.org"]
  assert unprotected(protected) == runs


def test_render_opens_and_closes_nested_styles():
  runs = merged([Run("a "), Run("b", ("em",)), Run("c", ("em", "strong")), Run(" d")])
  written = render(runs, lambda s: f"<{s}>", lambda s: f"</{s}>")
  assert written == "a <em>b<strong>c</strong></em> d"
