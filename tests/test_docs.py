"""The documentation: links that resolve, result tables that match their data."""

import re
import subprocess
import sys

import pytest

from helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def tracked(*patterns):
  try:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    pytest.skip("not a git checkout")
  return [ROOT / p for p in out.split()]


def anchors(markdown: str) -> set[str]:
  """GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens."""
  slugs = set()
  for line in markdown.splitlines():
    if m := re.match(r"#{1,6} (.*)", line):
      slugs.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
  return slugs


def test_every_relative_link_resolves():
  broken = []
  for md in tracked("*.md"):
    text = md.read_text(encoding="utf-8")
    for target in LINK.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
      if re.match(r"[a-z]+:", target):
        continue  # http(s), mailto
      path, _, anchor = target.partition("#")
      dest = (md.parent / path).resolve() if path else md
      if not dest.exists():
        broken.append(f"{md.relative_to(ROOT)}: {target} (no such file)")
      elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text("utf-8")):
        broken.append(f"{md.relative_to(ROOT)}: {target} (no such heading)")
  assert not broken, "\n".join(broken)


# A repository path as the code and docs name one: a top-level folder, then a file with an
# extension (run directories such as runs/... and user files are not in the repository).
REPO_PATH = re.compile(r"(?<![\w./-])((?:seq2seq|bench|tests|docs|configs|data|\.ci)/[\w./-]*\w"
                       r"\.(?:py|md|html|json|jsonl|txt|sh))\b")


def test_every_repository_path_named_in_code_and_docs_exists():
  """Code comments, docstrings and docs name files by path; a renamed or removed file
  fails here (the CHANGELOG, which is history, may name paths that are gone)."""
  missing = []
  for f in tracked("*.py", "*.md"):
    if f.name == "CHANGELOG.md":
      continue
    for path in set(REPO_PATH.findall(f.read_text(encoding="utf-8"))):
      if not (ROOT / path).exists():
        missing.append(f"{f.relative_to(ROOT)}: {path}")
  assert not missing, "\n".join(sorted(missing))


def test_the_path_check_finds_paths():
  assert REPO_PATH.findall("see seq2seq/model/layers.py and bench/README.md.") == [
      "seq2seq/model/layers.py", "bench/README.md"]


def test_anchor_slugs_follow_github():
  assert anchors("## Past the hour\n### HTTP server\n## CTranslate2") == {
      "past-the-hour", "http-server", "ctranslate2"}


def test_result_tables_are_generated_from_the_results_file():
  stale = report.stale()
  assert not stale, f"run python bench/report.py: {[str(p) for p in stale]}"


def test_a_hand_edited_table_is_stale(tmp_path):
  runs = report.load()
  doc = "<!-- results:decoding -->\n| edited by hand |\n<!-- /results -->\n"
  assert report.render(doc, runs) != doc
  assert report.render(report.render(doc, runs), runs) == report.render(doc, runs)


def test_results_rows_are_complete_and_consistent():
  runs = report.load()
  names = [r["name"] for r in runs]
  assert len(names) == len(set(names)), "run names must be unique"
  for r in runs:
    assert r["kind"] in ("hour", "longer", "decode", "decode_compile", "setting", "proxy",
                         "serve", "auto", "auto_plan", "first_minutes", "decode_memory",
                         "paragraphs", "batch_rows", "soak", "glossary", "documents",
                         "paragraphs_unpunctuated", "glossary_sets", "detection", "serve_mixed",
                         "multilingual", "measurement"), r["name"]
    assert r["commit"] and re.fullmatch(r"[0-9a-f]{7,40}", r["commit"]), r["name"]
    if r["kind"] == "decode":
      assert r["sentences_per_s"] > 0, r["name"]
      continue
    if r["kind"] == "measurement":  # a benchmark whose figures no table shows
      assert (ROOT / "bench" / f"{r['benchmark']}.py").is_file() and r["figures"], r["name"]
      assert r["cpu"] and r["command"].split("python ", 1)[-1].startswith(
          f"bench/{r['benchmark']}.py"), r["name"]
      continue
    if r["kind"] == "documents":
      assert abs(r["styled_over_plain"] - r["styled_sentences_per_s"]
                 / r["plain_sentences_per_s"]) < 0.01 and r["command"], r["name"]
      continue
    if r["kind"] == "paragraphs_unpunctuated":
      assert 0 < r["bleu_paragraphs"] <= 100 and 0 <= r["boundary_accuracy"] <= 1, r["name"]
      continue
    if r["kind"] == "decode_compile":
      assert r["sentences_per_s"] > 0 and r["compile_and_first_pass_s"] > 0, r["name"]
      assert r["cpu"] and r["buckets"] and r["rows"] and r["cache"] and r["command"], r["name"]
      continue
    if r["kind"] == "paragraphs":
      assert r["cpu"] and r["command"] and 0 <= r["boundary_accuracy"] <= 1, r["name"]
      assert r["bleu_paragraphs"] > 0 and r["bleu_sentences_joined"] > 0, r["name"]
      assert r["sentences_per_s_paragraphs"] > 0 and r["sentences_per_s_sentences"] > 0
      continue
    if r["kind"] == "multilingual":
      assert r["cpu"] and r["command"] and r["cores"] >= 1 and r["minutes"] > 0, r["name"]
      assert r["arm"] in ("bilingual", "multilingual", "hour") and r["directions"], r["name"]
      assert all(0 < x["bleu"] <= 100 for x in r["directions"].values()), r["name"]
      continue
    if r["kind"] == "serve_mixed":
      assert r["cpu"] and r["command"] and r["one_model"]["sentences_per_s"] > 0, r["name"]
      assert r["mixed_over_one"] == pytest.approx(r["six_models"]["sentences_per_s"]
                                                  / r["one_model"]["sentences_per_s"], abs=0.01)
      continue
    if r["kind"] == "detection":
      assert r["cpu"] and r["command"] and r["ms_per_text"] > 0, r["name"]
      assert all(0 <= r[k]["accuracy"] <= 1 for k in ("sentence", "1 word", "2 words",
                                                       "3 words")), r["name"]
      continue
    if r["kind"] == "glossary_sets":
      assert r["cpu"] and r["command"] and r["sets"], r["name"]
      for x in r["sets"]:
        assert 0 <= x["glossary_term_use"] <= 1 and 0 <= x["in_place"] <= 1, r["name"]
        assert x["judged"] <= x["terms_applied"] and x["appended"] <= x["sentences"]
        assert x["speed_ratio"] == pytest.approx(
            x["glossary_sentences_per_s"] / x["plain_sentences_per_s"], abs=0.01), r["name"]
      continue
    if r["kind"] == "glossary":
      assert r["cpu"] and r["command"] and r["sentences"] > 0 and r["terms_applied"] > 0
      assert 0 <= r["plain_term_use"] <= 1 and 0 <= r["glossary_term_use"] <= 1, r["name"]
      assert r["speed_ratio"] == pytest.approx(
          r["glossary_sentences_per_s"] / r["plain_sentences_per_s"], abs=0.01), r["name"]
      continue
    if r["kind"] == "soak":
      assert r["cpu"] and r["command"] and r["sent"] == r["ok"] + r["refused_429"] + (
          r["server_errors"]), r["name"]
      assert r["rss_mib_start"] <= r["rss_mib_peak"] >= r["rss_mib_end"], r["name"]
      continue
    if r["kind"] == "batch_rows":
      assert r["cpu"] and r["command"] and re.fullmatch(r"\d+:\d+", r["padding"]), r["name"]
      assert r["greedy_sentences_per_s"] > 0 and r["beam5_sentences_per_s"] > 0, r["name"]
      continue
    if r["kind"] == "decode_memory":
      assert r["cpu"] and r["workload"] and r["command"] and r["peak_mib"] > 0, r["name"]
      assert r.get("needed_mib") is None or 0 < r["needed_mib"] < r["peak_mib"], r["name"]
      continue
    if r["kind"] == "serve":
      assert r["sentences_per_s"] > 0 and 0 < r["share_of_batch"] and r["command"], r["name"]
      assert r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"] and r["cpu"], r["name"]
      continue
    if r["kind"] == "first_minutes":
      assert r["cpu"] and r["config"] and r["command"] and r["programs"] > 0, r["name"]
      assert r["updates"] > 0 and r["steady_updates_per_s"] > 0 and r["minutes"] > 0
      assert r["share_of_updates"] == pytest.approx(
          r["updates"] / (r["steady_updates_per_s"] * 60 * r["minutes"]), abs=2e-3), r["name"]
      continue
    if r["kind"] == "auto":
      assert r["arm"] in ("hand", "auto") and r["case"] and r["cpu"] and r["command"], r["name"]
      assert r["updates"] > 0 and r["val_bleu"] > 0 and (r["plan"] is None) == (r["arm"] == "hand")
      continue
    if r["kind"] == "auto_plan":
      assert r["case"] and r["cpu"] and r["command"] and r["factors"], r["name"]
      assert r["update_s"] > 0 and r["planned"] > 0 and r["made"] > 0 and r["buckets"] > 0
      continue
    if r["kind"] == "proxy":
      assert r["recipe"] in report.RECIPES and r["updates"] > 0, r["name"]
      continue
    if r["kind"] == "setting":
      assert r["run"] in names and r["val_bleu"] > 0, r["name"]
      continue
    assert r["recipe"] in report.RECIPES, r["name"]
    assert r["verdict"] in ("adopted", "ahead", "tied", "lost", "stopped", "interrupted",
                            "recipe"), r["name"]
    assert (r["change"] == "") == (r["verdict"] == "recipe"), r["name"]
    assert 0 < r["minutes"] <= 120 and r["updates"] > 0, r["name"]
    steps = [p[0] for p in r["curve"] or []]
    assert steps == sorted(steps), f"{r['name']}: curve out of order"


def test_recipe_versions_chain_through_adopted_changes():
  runs = report.load()
  adopted = {r["recipe"] for r in runs if r.get("verdict") == "adopted"}
  versions = list(report.RECIPES)
  assert adopted == set(versions[:-1]), "each version but the last adopts one change"
  assert report.CURRENT == versions[-1]


def test_no_numbered_work_labels_in_tracked_files():
  label = re.compile(r"\bsessions? \d+", re.I)
  hits = [f"{p.relative_to(ROOT)}:{i}" for p in tracked() if p.is_file()
          and p.suffix in (".py", ".md", ".toml", ".txt", ".cfg", ".jsonl", "")
          for i, line in enumerate(p.read_text("utf-8", errors="replace").splitlines(), 1)
          if label.search(line)]
  assert not hits, hits
