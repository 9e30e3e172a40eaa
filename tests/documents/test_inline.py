"""Formatted blocks translated whole: the text is the translation of the untagged text,
every style lands on some words, kept text stays as written, URLs are never translated."""

import pytest

from seq2seq.decoding.translator import Translator
from seq2seq.documents.blocks import render
from seq2seq.documents.inline import Run, merged, protect_urls, translate_blocks, unprotected


@pytest.fixture(scope="module")
def translator(trained_run):
  return Translator.load(trained_run)


BLOCKS = [
    [Run("A "), Run("young", "b"), Run(" man is riding a "), Run("red bike", "a"),
     Run(" down the street.")],
    [Run("Two dogs are playing in the snow. A "), Run("man", "i"), Run(" is watching.")],
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
  assert found[2] == [Run(translator.translate(BLOCKS[2][0].text, beam_size=2), "b")]


def test_kept_text_and_urls_stay_as_written(translator):
  block = [Run("A man reads "), Run("print(x)", "code"),
           Run(" at https://example.org/a?b=1 and writes to me@example.org today.")]
  runs = translate_blocks(translator, [block], verbatim=lambda s: s == "code")[0]
  text = "".join(r.text for r in runs)
  assert [r.text for r in runs if r.style == "code"] == ["print(x)"]
  assert "https://example.org/a?b=1" in text and "me@example.org" in text
  # a block that begins or ends with kept text: that text stays out of the model's input
  edge = translate_blocks(translator, [[Run("x = 1", "code"), Run(" A dog runs.")]],
                          verbatim=lambda s: s == "code")[0]
  assert edge[0] == Run("x = 1", "code") and "".join(r.text for r in edge[1:]).strip() == (
      translator.translate("A dog runs."))


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
