"""German noun phrases made to agree with a glossary term that replaces their noun.

The noun phrase is read off the translation, left of its noun: a preposition's
contraction (`im` = in + dem) or a preposition and a determiner (`der`, `ein`, `kein`,
`dies-`, the possessives), and the adjectives between them and the noun. Its case and
number are what its words allow for the model's noun: the determiner's form, the
adjectives' endings, the preposition's cases and the lexicon's forms of the model's
noun, together (`in dem Park`: dative, singular). The term's gender comes from the
lexicon (the form the glossary writes: `Grünanlage` is feminine; `Köter` masculine,
singular or plural); a compound the lexicon lacks takes its last part's
(`Drahtesel` -> `Esel`). The phrase is then written again from the grammar tables for
the term's gender and the phrase's case: `im Park` -> `in der Grünanlage`, `einem
geparkten Auto` -> `einer geparkten Karre`, `durch den Park` -> `durch die
Grünanlage`. Where the phrase allows several cases that give different words (`die
Straße`: nominative or accusative), each is a variant, and the model's scores choose.

The lexicon is `german-nouns` (about 100,000 nouns with their gender and forms, from
the German Wiktionary), read once per process. Without it, or for a term it does not
know (a product name), the phrase is the model's, as for a language without rules.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import itertools
import logging
from typing import Callable, Iterable

from seq2seq.decoding.agreement import WORD, Rewrite

log = logging.getLogger(__name__)

SLOTS = ("m", "f", "n", "p")  # masculine, feminine, neuter singular; plural
CASES = ("nom", "acc", "dat", "gen")
ALL = frozenset(itertools.product(SLOTS, CASES))

# The grammar tables: per slot, the nominative, accusative, dative and genitive.
DEFINITE = {"m": ("der", "den", "dem", "des"), "f": ("die", "die", "der", "der"),
            "n": ("das", "das", "dem", "des"), "p": ("die", "die", "den", "der")}
DER_WORD = {"m": ("er", "en", "em", "es"), "f": ("e", "e", "er", "er"),  # dies-er, jed-es
            "n": ("es", "es", "em", "es"), "p": ("e", "e", "en", "er")}
EIN_WORD = {"m": ("", "en", "em", "es"), "f": ("e", "e", "er", "er"),  # ein, kein-en, mein-e
            "n": ("", "", "em", "es"), "p": ("e", "e", "en", "er")}
WEAK = {"m": ("e", "en", "en", "en"), "f": ("e", "e", "en", "en"),  # after der, dieser
        "n": ("e", "e", "en", "en"), "p": ("en", "en", "en", "en")}
STRONG = {"m": ("er", "en", "em", "en"), "f": ("e", "e", "er", "er"),  # no determiner
          "n": ("es", "es", "em", "en"), "p": ("e", "e", "en", "er")}
DER_STEMS = ("dies", "jen", "jed", "welch", "manch", "solch")
EIN_STEMS = ("ein", "kein", "mein", "dein", "sein", "ihr", "unser", "euer")

GOVERNS = {}  # preposition -> the cases it takes
for _cases, _words in ((("dat",), "mit nach aus zu von bei seit gegenüber außer"),
                       (("acc",), "durch für gegen ohne um bis"),
                       (("acc", "dat"), "in an auf über unter vor hinter neben zwischen"),
                       (("gen", "dat"), "während wegen trotz statt innerhalb außerhalb")):
  GOVERNS.update(dict.fromkeys(_words.split(), frozenset(_cases)))
CONTRACTIONS = {"im": ("in", "dem"), "am": ("an", "dem"), "zum": ("zu", "dem"),
                "zur": ("zu", "der"), "vom": ("von", "dem"), "beim": ("bei", "dem"),
                "ins": ("in", "das"), "ans": ("an", "das"), "aufs": ("auf", "das"),
                "durchs": ("durch", "das"), "fürs": ("für", "das"), "ums": ("um", "das"),
                "übers": ("über", "das"), "unters": ("unter", "das"), "vors": ("vor", "das"),
                "hinters": ("hinter", "das"), "hinterm": ("hinter", "dem"),
                "überm": ("über", "dem"), "unterm": ("unter", "dem"), "vorm": ("vor", "dem")}
# Written contracted whenever the article is the definite one; the others only where the
# model contracted.
USUAL = {"im", "am", "zum", "zur", "vom", "beim", "ins", "ans"}
CONTRACTED = {pair: word for word, pair in CONTRACTIONS.items()}
# Words that may stand between the determiner and the noun unchanged.
DEGREE = {"sehr", "ganz", "besonders", "recht", "ziemlich", "relativ", "extrem", "eher",
          "etwas", "noch", "so", "fast", "leicht", "eng", "hell", "dunkel"}
FIXED = {"lila", "rosa", "beige", "orange", "oliv", "pink", "zwei", "drei", "vier", "fünf",
         "sechs", "sieben", "acht", "neun", "zehn", "elf", "zwölf", "paar"}
ENDINGS = ("en", "em", "er", "es", "e")


# --- the lexicon ------------------------------------------------------------------------

GERMAN_CASES = {"nominativ": "nom", "akkusativ": "acc", "dativ": "dat", "genitiv": "gen"}


def bits(analyses: Iterable[tuple[str, str]]) -> int:
  return sum(1 << (4 * SLOTS.index(s) + CASES.index(c)) for s, c in set(analyses))


def analyses_of(mask: int) -> frozenset:
  return frozenset((s, c) for k, (s, c) in enumerate(itertools.product(SLOTS, CASES))
                   if mask >> k & 1)


class Lexicon:
  """German noun forms -> the (slot, case) pairs each form is (`Lexicon.analyses`).
  `rows`: the CSV rows of german-nouns' `nouns.csv`, its header first."""

  def __init__(self, rows: Iterable[list[str]]):
    rows = iter(rows)
    header = next(rows)
    genus = [k for k, name in enumerate(header) if name.startswith("genus")]
    pos = header.index("pos")
    columns = []  # (column, case, plural, its genus's index among `genus` or None)
    for k, name in enumerate(header):
      parts = name.replace("*", "").split()
      if name.startswith("dativ singular*"):
        continue  # the archaic dative in -e ("dem Hunde"), which reads plurals as singular
      if len(parts) >= 2 and parts[0] in GERMAN_CASES:
        number = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
        columns.append((k, GERMAN_CASES[parts[0]], parts[1] == "plural", number))
    forms: dict[str, int] = {}
    for row in rows:
      kinds = row[pos].split(",")
      if "Substantiv" not in kinds or {"Nachname", "Vorname", "Toponym"} & set(kinds):
        continue
      genders = [row[k] for k in genus if row[k] in ("m", "f", "n")]
      if not genders:
        continue
      for k, case, plural, number in columns:
        form = row[k]
        if not form or not form[:1].isupper():
          continue
        if plural:
          slots = ("p",)
        elif number is not None and number < len(genus) and row[genus[number]] in ("m", "f", "n"):
          slots = (row[genus[number]],)  # "Oberteil": singular 1 neuter, singular 2 masculine
        else:
          slots = genders
        forms[form] = forms.get(form, 0) | bits((s, case) for s in slots)
    self.forms = forms

  @classmethod
  @functools.cache
  def installed(cls) -> "Lexicon | None":
    """The german-nouns lexicon, read once; None (logged once) where it is not installed."""
    try:
      from german_nouns.config import CSV_FILE_PATH
    except ImportError:
      log.warning("German glossary terms are placed without agreement: the lexicon "
                  "german-nouns is not installed (pip install --no-deps german-nouns==1.2.5)")
      return None
    with open(CSV_FILE_PATH, encoding="utf-8", newline="") as f:
      return cls(csv.reader(f))

  def analyses(self, word: str) -> frozenset:
    """The (slot, case) pairs of `word` (empty: unknown); a compound the lexicon lacks,
    its last part's (at least four letters, after at least two)."""
    mask = self.forms.get(word)
    if mask is None and len(word) > 5 and word[:1].isupper():
      for k in range(2, len(word) - 3):
        part = word[k].upper() + word[k + 1:]
        if word[k - 1] != "-" and part in self.forms:
          mask = self.forms[part]
          break
      else:
        if "-" in word:  # "Mountain-Bike"
          mask = self.forms.get(word.rsplit("-", 1)[1])
    return analyses_of(mask or 0)


# --- the phrase ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Determiner:
  """A determiner's kind: "def" (der, die, das), "der" (dies-er: its endings) or "ein"
  (ein, kein, mein: its endings, none in three places), and its stem."""
  kind: str
  stem: str = ""

  @classmethod
  def read(cls, word: str) -> "Determiner | None":
    w = word.lower()
    if any(w in forms for forms in DEFINITE.values()):
      return cls("def")
    for stem in DER_STEMS:
      if w.startswith(stem) and w[len(stem):] in {"er", "en", "em", "es", "e"}:
        return cls("der", stem)
    for stem in EIN_STEMS:
      rest = w[len(stem):] if w.startswith(stem) else None
      if stem == "euer" and w.startswith("eur") and w[3:] in {"e", "en", "em", "er", "es"}:
        return cls("ein", stem)
      if rest is not None and rest in {"", "e", "en", "em", "er", "es"}:
        return cls("ein", stem)
    return None

  def analyses(self, word: str) -> frozenset:
    w, out = word.lower(), set()
    for slot, case in ALL:
      if self.form(slot, case) == w:
        out.add((slot, case))
    return frozenset(out)

  def form(self, slot: str, case: str) -> str | None:
    """This determiner for `slot` and `case` (None: "ein" has no plural)."""
    c = CASES.index(case)
    if self.kind == "def":
      return DEFINITE[slot][c]
    if self.kind == "der":
      return self.stem + DER_WORD[slot][c]
    if self.stem == "ein" and slot == "p":
      return None
    ending = EIN_WORD[slot][c]
    stem = "eur" if self.stem == "euer" and ending else self.stem
    return stem + ending

  def adjective_ending(self, slot: str, case: str) -> str:
    c = CASES.index(case)
    if self.kind in ("def", "der"):
      return WEAK[slot][c]
    if self.kind == "ein" and (self.stem != "ein" or slot != "p"):
      return STRONG[slot][c] if EIN_WORD[slot][c] == "" else WEAK[slot][c]
    return STRONG[slot][c]  # no determiner


NONE = Determiner("none")


def adjective(word: str) -> tuple[str, str] | None:
  """(stem, ending) of an inflected attributive adjective or participle (`großen`,
  `geparkten`); None for other words."""
  if not word.islower() or len(word) < 3 or Determiner.read(word) or word in CONTRACTIONS:
    return None
  for ending in ENDINGS:
    if word.endswith(ending) and len(word) - len(ending) >= 2:
      return word[:-len(ending)], ending
  return None


@dataclasses.dataclass
class Phrase:
  """The words of a noun phrase before its noun, by their indices among the sentence's."""
  first: int  # the first word written again: contraction, preposition, determiner, adjective
  determiner: Determiner  # NONE where there is none
  determiner_at: int | None
  contraction_at: int | None  # "im" (a preposition with the definite article)
  preposition: str | None  # the preposition that governs it, if any
  preposition_at: int | None  # where it is, if written again with a definite article
  adjectives: list[int]  # the inflected adjectives


def is_noun(words: list[str], k: int) -> bool:
  w = words[k]
  return w[:1].isupper() and not (Determiner.read(w) or w.lower() in CONTRACTIONS
                                  or w.lower() in GOVERNS)


def opens_phrase(word: str) -> bool:
  return Determiner.read(word) is not None or word.lower() in CONTRACTIONS


def find_noun(words: list[str], gaps: list[str], inside: list[int]) -> int | None:
  """The noun that the words `inside` (those the term's source term was aligned to) name:
  their last word, or where that is a determiner or an adjective after one (attention
  that landed before the noun, as on small models), the noun after it, within four
  words; None where it is neither."""
  k = inside[-1]
  if is_noun(words, k):
    return k
  if not any(opens_phrase(words[j]) for j in [*inside, inside[0] - 1] if j >= 0):
    return None
  for j in range(k + 1, min(k + 5, len(words))):
    if gaps[j].strip() not in ("", ","):
      return None
    if is_noun(words, j):
      return j
    w = words[j]
    if not (adjective(w) or w in FIXED or w in DEGREE or w == "und"):
      return None
  return None


def read_phrase(words: list[str], gaps: list[str], head: int) -> Phrase:
  """The phrase before `words[head]`; `gaps[k]`: the text between words k-1 and k."""
  k, adjectives = head - 1, []
  while k >= 0 and gaps[k + 1].strip() in ("", ","):
    w = words[k]
    if adjective(w):
      adjectives.append(k)
    elif not (w in FIXED or w in DEGREE or (w == "und" and adjectives)):
      break
    k -= 1
  determiner, determiner_at, contraction_at, preposition, preposition_at = (
      NONE, None, None, None, None)
  if k >= 0 and not gaps[k + 1].strip():
    w = words[k].lower()
    if w in CONTRACTIONS:  # a preposition and the definite article
      contraction_at, preposition, determiner = k, CONTRACTIONS[w][0], Determiner("def")
    elif (found := Determiner.read(w)) is not None and not (
        found.stem == "ein" and words[k + 1] == "paar"):  # "ein paar": a few, not "ein"
      determiner, determiner_at = found, k
      if k > 0 and not gaps[k].strip() and words[k - 1].lower() in GOVERNS:
        preposition = words[k - 1].lower()
        preposition_at = k - 1 if found.kind == "def" else None
    elif w in GOVERNS:
      preposition = w
  if determiner_at is None and contraction_at is None and preposition is None and k >= 0:
    adjectives = []  # after a verb or a noun, an ending is no adjective's: "spielen Fußball"
  starts = [x for x in (contraction_at, preposition_at, determiner_at) if x is not None]
  first = starts[0] if starts else min(adjectives, default=head)
  return Phrase(first, determiner, determiner_at, contraction_at, preposition,
                preposition_at, sorted(adjectives))


class German:
  """The agreement piece for German (agreement.py): the phrase around a term written
  for its gender. `lexicon`: the nouns' genders and forms (default: german-nouns, read
  at the first use)."""

  def __init__(self, lexicon: Lexicon | None = None):
    self.lexicon = lexicon

  def prepare(self) -> None:
    if self.lexicon is None:
      self.lexicon = Lexicon.installed()

  def term_analyses(self, target: str) -> frozenset:
    """The (slot, case) pairs the term's last word (a noun) may be; empty where the
    lexicon does not know it (the phrase stays the model's)."""
    return self.lexicon.analyses(WORD.findall(target)[-1])

  def rewrites(self, text: str, start: int, end: int, target: str,
               takeable: Callable[[int, int], bool] | None = None) -> list[Rewrite]:
    """The ways to write `target` in place of the model's noun at `text[start:end]` with
    its phrase agreeing (module docstring), one per reading of the phrase that gives
    other words; the plain replacement where nothing can be told. A noun target whose
    span holds only a determiner or adjectives takes the noun after them instead, where
    `takeable(start, end)` allows that noun's characters (not another source word's only
    translation)."""
    plain = [Rewrite(start, end, target)]
    spans = [m.span() for m in WORD.finditer(text)]
    inside = [k for k, (s, e) in enumerate(spans) if s < end and start < e]
    last = WORD.findall(target)[-1:]
    if not inside or not last or not last[0][:1].isupper():
      return plain  # (a term that is no noun stays where the model's words were)
    words = [text[s:e] for s, e in spans]
    gaps = [text[spans[k - 1][1] if k else 0:spans[k][0]] for k in range(len(spans))]
    noun = find_noun(words, gaps, inside)
    if noun is None or (noun != inside[-1] and takeable is not None
                        and not takeable(*spans[noun])):
      return plain
    replaced = range(inside[0], noun + 1) if noun == inside[-1] else range(noun, noun + 1)
    plain = [Rewrite(spans[replaced.start][0], spans[noun][1], target)]
    self.prepare()
    term = self.term_analyses(target) if self.lexicon is not None else frozenset()
    if not term:
      return plain
    phrase = read_phrase(words, gaps, replaced.start)
    cases = self.cases(phrase, words, noun)
    numbers = {(s == "p", c) for s, c in cases}
    options = sorted((s, c) for s, c in term if (s == "p", c) in numbers)
    if not options:  # the term's form is not one of the phrase's number and case (the
      # genitive "Fensters" written `Fenster`): the phrase's number, the term's gender
      genders = {s for s, _ in term if s != "p"} or {"p"}
      options = sorted({("p", c) if s == "p" else (g, c) for s, c in cases
                        for g in genders})
    out = {self.write(phrase, words, gaps, slot, case, target, replaced.start): None
           for slot, case in options}
    return [Rewrite(spans[phrase.first][0], spans[noun][1], written) for written in out] or plain

  def cases(self, phrase: Phrase, words: list[str], noun: int) -> frozenset:
    """The (slot, case) pairs the model's phrase may be: what its determiner, its
    preposition, its adjectives' endings and its noun allow together (dropped in that
    order from the end where they disagree); nominative where it opens the sentence."""
    constraints = []
    if phrase.contraction_at is not None:
      _, article = CONTRACTIONS[words[phrase.contraction_at].lower()]
      constraints.append(phrase.determiner.analyses(article))
    elif phrase.determiner_at is not None:
      constraints.append(phrase.determiner.analyses(words[phrase.determiner_at]))
    if phrase.preposition:
      constraints.append(frozenset((s, c) for s, c in ALL if c in GOVERNS[phrase.preposition]))
    for k in phrase.adjectives:
      _, ending = adjective(words[k])
      constraints.append(frozenset((s, c) for s, c in ALL
                                   if phrase.determiner.adjective_ending(s, c) == ending))
    constraints.append(self.lexicon.analyses(words[noun]) or ALL)
    while constraints:
      found = functools.reduce(frozenset.intersection, constraints, ALL)
      if found:
        break
      constraints.pop()
    else:
      found = ALL
    if phrase.first == 0 and not phrase.preposition:
      # The phrase before the verb, which in German is one phrase, and in a sentence
      # that opens with a noun phrase its subject: nominative ("Ein Kind planscht").
      return frozenset(x for x in found if x[1] == "nom") or found
    return found

  def write(self, phrase: Phrase, words: list[str], gaps: list[str], slot: str,
            case: str, target: str, head: int) -> str:
    """The phrase from its first word to the noun for `slot` and `case`, `target` in
    the place of the words from `head` on."""
    out: list[str] = []

    def add(k: int, word: str) -> None:
      out.extend((gaps[k], word) if out else (word,))

    for k in range(phrase.first, head):
      if k in (phrase.contraction_at, phrase.preposition_at):
        original = words[k].lower()
        article = DEFINITE[slot][CASES.index(case)]
        contracted = CONTRACTED.get((phrase.preposition, article))
        usual = contracted in USUAL or contracted == original or (
            original in CONTRACTIONS and original not in USUAL)
        add(k, match_case(contracted if contracted and usual else
                          f"{phrase.preposition} {article}", words[k]))
      elif k == phrase.determiner_at:
        form = phrase.determiner.form(slot, case)
        if phrase.preposition_at is None and form is not None:  # (else: written with
          add(k, match_case(form, words[k]))  # the preposition; "ein" has no plural)
      elif k in phrase.adjectives:
        add(k, adjective(words[k])[0] + phrase.determiner.adjective_ending(slot, case))
      else:
        add(k, words[k])
    add(head, target)
    return "".join(out)


def match_case(word: str, like: str) -> str:
  """`word` with `like`'s capital first letter."""
  return word[:1].upper() + word[1:] if like[:1].isupper() else word
