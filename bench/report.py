"""Generates the documentation's result tables and curves from bench/results.jsonl.

    python bench/report.py            # rewrite the tables in README.md and docs/, and the curves
    python bench/report.py --check    # exit 1 if a table in the Markdown is not what the file gives

Each table sits in a Markdown file between `<!-- results:NAME -->` and `<!-- /results -->`;
this script owns what lies between and nothing else. The test suite runs the check, so a
results row without its table, or a table edited by hand, fails CI.

bench/results.jsonl holds one JSON object per line. Training runs (`kind` "hour": a run
of `minutes` from scratch; "longer": the same run resumed to `minutes`) carry: `recipe`
(the recipe version the run starts from, r1 to r8, see RECIPES), `change` (config
overrides against it; "" for the recipe itself), `seed`, `cpu` (null where the machine
was not recorded), `updates`, `epochs`, `tokens_per_s` (median target tokens/s),
`compile_s`, `val_greedy` (best greedy val BLEU during training), `alpha`, `val_bleu` /
`val_lc_tok` (the averaged checkpoint, beam 5, sacreBLEU / lowercased-tokenized BLEU),
`test_bleu` / `test_lc_tok` (test_2016_flickr, null where not scored), `verdict`
(adopted, ahead, tied, lost, stopped, interrupted, recipe), `note`, `commit` (the commit
that recorded the run) and `curve` (validations: [update, minutes, val NLL, greedy val
BLEU]). Decoding measurements (`kind` "decode") carry `engine`, `search`,
`sentences_per_s`, `bleu` and `ratio` (JAX's sentences/s over CTranslate2 float32's
in the same run). Validation-only choices for a trained run (`kind` "setting": the
averaging span, beam, α, float32 decoding, ensembles) carry `run` (the row they decode),
`setting`, `val_bleu` and `val_lc_tok`. Proxy runs on a GPU (`kind` "proxy": a fixed
number of updates instead of a fixed time) carry greedy val BLEU of the last checkpoint
and of averages of 5, 10 and 20. Server load tests (`kind` "serve", bench/serve_load.py)
carry `engine`, `search`, `clients`, `sentences_per_s`, `share_of_batch` (of the engine's
batch decoding in the same run), `p50_ms`, `p95_ms`, `p99_ms` and `alone_ratio` (1
client's p50 over the engine's time for one short sentence alone, on the 1-client row;
from rows with `one_sentence_p50_ms` on, over the median time of the test sentences the
client sent, each alone, with `server_batch_ms` the server's mean time per batch),
and from bench/serve_load.py's later version `unsorted_batch_sentences_per_s` and
`share_of_unsorted` (the engine on shuffled texts in the server's batch sizes, and the
server's share of that). Decoding's memory (`kind` "decode_memory") carries `workload`
(what ran, in one process), `programs` (decode.programs: compiled searches kept, "all"
or the limit), `peak_mib` (the process's peak resident memory), `needed_mib` (the run
loaded plus `workers` batches' XLA buffers, bench/decode_memory.py; null where not
measured) and `command`.
The automatic recipe against the hand-tuned one (`kind` "auto", bench/auto_recipe.py)
carries `case` (en-de, de-en, subset10k), `arm` (hand or auto), `minutes`, `updates`,
`val_bleu` (averaged checkpoint, beam 5 at the recipe's α), `settings` (the fields the
arms differ in) and `plan` (the automatic recipe's measurements; null for the hand arm).
The automatic recipe's plan against the run (`kind` "auto_plan", an automatic run's
recipe.json and training.json) carries `case`, `minutes`, `update_s` and `compile_s` (the
timed update and its compile), `buckets` (update programs: 1 packed), `factors`
(auto_recipe's UPDATE_FACTOR, or PACKED_UPDATE_FACTOR for a packed run, and
COMPILE_SHARE that planned it), `pack_length` (0: length buckets; absent in rows from
before packing), `planned` and `made` (updates) and `s_per_update` (the run's, from its
log).
Paragraphs (`kind` "paragraphs", bench/paragraphs.py) carry `model`, `beam`,
`bleu_paragraphs`, `bleu_sentences_joined`, `bleu_paragraphs_unsplit`,
`sentences_per_s_paragraphs`, `sentences_per_s_sentences` and `boundary_accuracy`. A
lone sentence's decoding under a bfloat16 row padding (`kind` "batch_rows",
bench/lone_sentence.py) carries `padding` ("least:multiple"), `greedy_sentences_per_s`,
`beam5_sentences_per_s`, `greedy_alone_equals_batch` and `beam5_alone_equals_batch`.
Soaks of the server (`kind` "soak", bench/soak.py) carry `minutes`, `overload`,
`capacity_requests_per_s`, `arrival_rate`, `sent`, `ok`, `refused_429`, `server_errors`,
`429_without_retry_after`, `p50_ms`, `p99_ms` and `rss_mib_start` / `_peak` / `_end`.
One model of several directions against bilingual runs (`kind` "multilingual",
bench/multilingual.py): one row per arm (`arm` "bilingual", "multilingual" or "hour")
with `cores` (the CPU cores it was pinned to), `minutes`, `directions` ({"en-de":
{"bleu", "updates" (bilingual arm)}}), `updates` (one run's arms) and, for the
multilingual arm, `zero_shot` ({"de-fr": {"bleu" (the target's pieces only),
"bleu_all_pieces", "pivot_bleu"}}).
"""

import argparse
import ast
import json
import math
import pathlib
import re
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results.jsonl"
CURVES = ROOT / "docs" / "images" / "recipe_curves.png"

# What a row of each kind carries besides `name`, `kind` and `commit` (and `cpu`, null
# where it was not recorded): what the tables read. A benchmark whose figures no table
# shows writes kind "measurement": `benchmark` (its script) and `figures` (its JSON).
FIELDS = {
    "hour": "recipe change seed minutes updates val_bleu test_bleu curve verdict",
    "longer": "recipe change seed minutes updates val_bleu test_bleu curve verdict",
    "setting": "run setting val_bleu",
    "proxy": "recipe change updates val_greedy val_avg5 val_avg10 val_avg20",
    "decode": "engine search sentences_per_s bleu baseline",
    "decode_compile": "search buckets cache rows compile_and_first_pass_s sentences_per_s",
    "decode_memory": "workload programs peak_mib needed_mib",
    "serve": "engine search clients sentences_per_s share_of_batch p50_ms p95_ms p99_ms "
             "refused_429 mismatches",
    "serve_mixed": "model beam clients six_models one_model mixed_over_one rss_mib_per_model",
    "soak": "minutes overload capacity_requests_per_s sent ok refused_429 server_errors "
            "p50_ms p99_ms rss_mib_start rss_mib_peak rss_mib_end",
    "auto": "case arm minutes updates val_bleu settings plan",
    "auto_plan": "case minutes update_s compile_s buckets factors planned made s_per_update",
    "first_minutes": "config minutes updates share_of_updates share_of_tokens",
    "batch_rows": "padding greedy_sentences_per_s beam5_sentences_per_s "
                  "greedy_alone_equals_batch beam5_alone_equals_batch",
    "paragraphs": "model beam bleu_paragraphs bleu_sentences_joined bleu_paragraphs_unsplit "
                  "sentences_per_s_paragraphs sentences_per_s_sentences boundary_accuracy",
    "paragraphs_unpunctuated": "model beam bleu_paragraphs bleu_sentences_joined "
                               "bleu_paragraphs_unsplit sentences_per_s_paragraphs "
                               "sentences_per_s_sentences boundary_accuracy",
    "glossary": "model beam sentences terms plain_bleu glossary_bleu speed_ratio",
    "glossary_sets": "model beam dictionary sets",
    "documents": "model beam paragraphs plain_sentences_per_s styled_sentences_per_s "
                 "styled_over_plain same_text",
    "detection": "detector split sentence ms_per_text",
    "multilingual": "arm cores minutes directions",
    "measurement": "benchmark figures",
}


def check_row(row: dict) -> None:
  """Raises ValueError naming the row and what it lacks where `row` is not a results row
  that this script reads."""
  name = row.get("name", "a row without a name")
  missing = [k for k in ("name", "kind", "commit") if k not in row]
  if row.get("kind") not in FIELDS:
    raise ValueError(f"{name}: kind {row.get('kind')!r} is none of {', '.join(FIELDS)}")
  missing += [k for k in FIELDS[row["kind"]].split() if k not in row]
  if missing:
    raise ValueError(f"{name} (kind {row['kind']}): lacks {', '.join(missing)}")


# Each recipe version: the one before it plus one change (the `adopted` rows).
RECIPES = {
  "r1": "the `compact` preset (d 128, 4+4 layers, ff 512), Adam, lr 2.5e-3, warmup 800, "
        "dropout 0.1, label smoothing 0.1, average of the last 10 checkpoints",
  "r2": "r1 with peak learning rate 4e-3",
  "r3": "r2 with dropout 0.2, label smoothing 0.2 and subword sampling α 0.5",
  "r4": "r3 with dropout ramped up from 0 over the first 3,000 updates",
  "r5": "r4 with rotary positions",
  "r6": "r5 with bfloat16 matmul operands (float32 products)",
  "r7": "r6 with the output layer and loss in chunks of 512 tokens",
  "r8": "r7 with packed rows of 48 pieces instead of length buckets (`configs/multi30k.py`)",
}
CURRENT = "r8"
SAME_MODEL = ("r6", "r7", "r8")  # one model and training; r7's step faster, r8's batches packed
NOT_COMPARABLE = "n/c"
MARK = re.compile(r"(<!-- results:([a-z_]+) -->\n)(.*?)(<!-- /results -->)", re.S)


def load(path=RESULTS):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def training(runs):
  return [r for r in runs if r["kind"] in ("hour", "longer")]


def version(run):
  """The recipe a run trained: the next version for the run that adopted a change."""
  if run["verdict"] == "adopted":
    return f"r{int(run['recipe'][1:]) + 1}"
  return run["recipe"] if not run["change"] else None


def fmt(x, digits=2):
  return "—" if x is None else f"{x:,.{digits}f}"


def mean_spread(values, digits=2):
  values = [v for v in values if v is not None]
  if not values:
    return "—"
  if len(values) == 1:
    return fmt(values[0], digits)
  return f"{fmt(statistics.mean(values), digits)} ({fmt(min(values), digits)}–{fmt(max(values), digits)})"


def table(header, rows):
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return "\n".join(lines) + "\n"


def hour_by_cpu(runs):
  """The recipe's hour by CPU, over the versions of one model (SAME_MODEL), newest first."""
  groups = {}
  for r in training(runs):
    if r["kind"] == "hour" and r["minutes"] == 60 and version(r) in SAME_MODEL and r["cpu"]:
      groups.setdefault((r["cpu"], version(r)), []).append(r)
  rows = []
  for (cpu, ver), rs in sorted(groups.items(), key=lambda kv: (-int(kv[0][1][1:]), kv[0][0])):
    rows.append([cpu, ver, len(rs), mean_spread([r["updates"] for r in rs], 0),
                 mean_spread([r["val_bleu"] for r in rs]), mean_spread([r["test_bleu"] for r in rs]),
                 mean_spread([r["test_lc_tok"] for r in rs])])
  return table(["CPU", "recipe", "runs", "updates in the hour", "val sacreBLEU",
                "test sacreBLEU", "test lowercased-tokenized"], rows)


def hour_now(runs):
  """The current recipe's hour (the newest version with an hour run), by CPU class: the
  figures a user of each class gets now; earlier versions are in `hour_by_cpu`."""
  hours = [r for r in training(runs) if r["kind"] == "hour" and r["minutes"] == 60
           and version(r) in SAME_MODEL and r["cpu"]]
  current = max((version(r) for r in hours), key=lambda v: int(v[1:]))
  groups = {}
  for r in hours:
    if version(r) == current:
      groups.setdefault(r["cpu"], []).append(r)
  rows = [[cpu, len(rs), mean_spread([r["updates"] for r in rs], 0),
           mean_spread([r["val_bleu"] for r in rs]), mean_spread([r["test_bleu"] for r in rs]),
           mean_spread([r["test_lc_tok"] for r in rs])] for cpu, rs in sorted(groups.items())]
  return table(["CPU", "runs", "updates in the hour", "val sacreBLEU", "test sacreBLEU",
                "test lowercased-tokenized"], rows)


def past_the_hour(runs):
  runs, rows = training(runs), []
  for r in runs:
    if r["kind"] == "longer" or (r["kind"] == "hour" and any(
        o["kind"] == "longer" and o["name"].startswith(r["name"]) for o in runs)):
      rows.append([r["name"].removesuffix("-60min"), r["recipe"], r["minutes"], f"{r['updates']:,}",
                   fmt(r["val_bleu"]), fmt(r["test_bleu"]), fmt(r["test_lc_tok"])])
  rows.sort(key=lambda row: (row[1], re.sub(r"-\d+min$", "", row[0]), row[2]))
  return table(["run", "recipe", "minutes", "updates", "val sacreBLEU", "test sacreBLEU",
                "test lowercased-tokenized"], rows)


def nll_at(curve, step):
  """Validation NLL at `step`, interpolated between validations; None outside the curve."""
  for (s0, _, n0, _), (s1, _, n1, _) in zip(curve, curve[1:]):
    if s0 <= step <= s1:
      return n0 + (n1 - n0) * (step - s0) / (s1 - s0)
  return curve[-1][2] if curve and curve[-1][0] == step else None


def nll_difference(runs, base, change):
  """Mean val NLL of the change minus the base recipe's runs', per update.

  Each pair of curves is compared at the last update both reached, so machines of
  different speed compare. None where no base run has a curve; NOT_COMPARABLE across
  vocabularies (NLL per piece) or label smoothing (which trades NLL for accuracy).
  """
  if any(k in change for k in ("vocab_size", "spm_model_type", "bidirectional", "label_smoothing", "max_tokens")):
    return NOT_COMPARABLE
  runs = training(runs)
  mine = [r["curve"] for r in runs if r["recipe"] == base and r["change"] == change and r["curve"]
          and r["kind"] == "hour" and r["verdict"] != "interrupted"]
  refs = [r["curve"] for r in runs if version(r) == base and r["curve"] and r["kind"] == "hour"
          and r["verdict"] != "interrupted"]
  diffs = []
  for c in mine:
    for ref in refs:
      step = min(c[-1][0], ref[-1][0])
      a, b = nll_at(c, step), nll_at(ref, step)
      if a is not None and b is not None:
        diffs.append(a - b)
  return statistics.mean(diffs) if diffs else None


def removed_options(change):
  """A note for each option of `change` that the current config no longer has."""
  from seq2seq.config import REMOVED_OPTIONS, REMOVED_VALUES
  notes = []
  for item in change.split():
    name, _, value = item.partition("=")
    section, _, field = name.partition(".")
    if field in REMOVED_OPTIONS.get(section, {}) or value in REMOVED_VALUES.get(field, ()):
      notes.append(f"`{item}` was removed in 0.2.0: rerun with seq2seq 0.1")
  return notes


def ablations(runs):
  groups = {}
  interrupted = {}
  for r in training(runs):
    if r["kind"] == "hour" and r["change"]:
      if r["verdict"] == "interrupted":
        interrupted[(r["recipe"], r["change"])] = interrupted.get((r["recipe"], r["change"]), 0) + 1
      else:
        groups.setdefault((r["recipe"], r["change"]), []).append(r)
  rows = []
  for (base, change), rs in groups.items():
    scored = [r for r in rs if r["val_bleu"] is not None]
    d = nll_difference(runs, base, change)
    alphas = sorted({r["alpha"] for r in scored})
    val = mean_spread([r["val_bleu"] for r in scored])
    if alphas and alphas != [1.3]:
      val += " (α " + ", ".join(f"{a:g}" for a in alphas) + ")"
    tests = [r for r in rs if r["test_lc_tok"] is not None]
    test = mean_spread([r["test_lc_tok"] for r in tests]) if tests else "—"
    verdicts = [r["verdict"] for r in rs]
    notes = [r["note"] for r in rs if r["note"]] + removed_options(change)
    if (base, change) in interrupted:
      notes.append(f"{interrupted[base, change]} more run interrupted and rerun")
    rows.append([base, f"`{change}`", len(rs), mean_spread([r["updates"] for r in rs], 0),
                 d if d in (None, NOT_COMPARABLE) else f"{d:+.3f}", val, test,
                 max(set(verdicts), key=verdicts.count), "; ".join(dict.fromkeys(notes))])
  rows.sort(key=lambda row: (int(row[0][1:]), row[1]))
  return table(["from", "change", "runs", "updates", "val NLL Δ", "val sacreBLEU",
                "test lc-tok", "verdict", "note"], rows)


def recipe_versions(runs):
  rows = []
  for ver, text in RECIPES.items():
    rs = [r for r in training(runs) if r["kind"] == "hour" and r["minutes"] == 60 and version(r) == ver]
    rows.append([ver, text, len(rs), mean_spread([r["updates"] for r in rs], 0),
                 mean_spread([r["val_bleu"] for r in rs]),
                 mean_spread([r["test_lc_tok"] for r in rs])])
  return table(["version", "recipe", "hours", "updates", "val sacreBLEU", "test lc-tok"], rows)


SWEPT = "CTranslate2 at its best configuration (swept)"


def baseline_of(r) -> str:
  """A decode row's CTranslate2 baseline, in a few words."""
  return "best of the sweep" if r.get("baseline") == SWEPT else "one batch, all cores"


def decoding(runs):
  """Decoding speed rows that name their CPU, the latest commit's first (rows from before
  the CPU was recorded stay in the results file only), each with the CTranslate2
  configuration it was measured against."""
  decode = [r for r in runs if r["kind"] == "decode" and r["cpu"] and "model" not in r]
  order = list(dict.fromkeys(r["commit"] for r in decode))[::-1]
  decode.sort(key=lambda r: order.index(r["commit"]))  # stable within a commit
  rows = [[f"`{r['commit']}`", r["cpu"], r["engine"], r["search"], fmt(r["sentences_per_s"], 1),
           fmt(r["bleu"]), fmt(r.get("ratio")), baseline_of(r)] for r in decode]
  return table(["commit", "CPU", "engine", "search", "sentences/s", "BLEU",
                "JAX / CTranslate2 float32", "CTranslate2 configured as"], rows)


def baseline_sweep(runs):
  """CTranslate2's configurations in the newest swept comparison on each CPU class:
  sentences/s of each threads x batching, per compute type and search, the best in bold."""
  decode = [r for r in runs if r["kind"] == "decode" and r.get("sweep") and "model" not in r]
  latest = {r["cpu"]: r["commit"] for r in decode}
  rows = []
  for r in decode:
    if latest[r["cpu"]] != r["commit"]:
      continue
    top = max(x["sentences_per_s"] for x in r["sweep"])
    rows += [[r["cpu"], r["engine"], r["search"], f"{x['threads']}", x["batching"],
              (f"**{fmt(x['sentences_per_s'], 1)}**" if x["sentences_per_s"] == top
               else fmt(x["sentences_per_s"], 1))] for x in r["sweep"]]
  return table(["CPU", "engine", "search", "inter x intra threads", "batches of",
                "sentences/s"], rows)


def decode_compile(runs):
  """Compile and first pass of each search against its steady speed, by the source-length
  buckets searches padded to and the sizes a batch shrank through, from an empty and from
  a warm compilation cache."""
  rows = [[f"`{r['commit']}`", r["cpu"], r["buckets"], r["rows"], r["cache"], r["search"],
           fmt(r["compile_and_first_pass_s"], 1), fmt(r["sentences_per_s"], 1)]
          for r in runs if r["kind"] == "decode_compile"]
  return table(["commit", "CPU", "source lengths searched", "rows as sentences finish",
                "compilation cache", "search",
                "compile and first pass (s)", "steady sentences/s"], rows)


def decode_memory(runs):
  """Decoding's peak resident memory by workload and limit on the compiled searches kept,
  with what a pass needs where measured: the run loaded plus the batches searched at once,
  each with XLA's temporary buffers of its search (bench/decode_memory.py)."""
  rows = [[f"`{r['commit']}`", r["cpu"], r["workload"], r["programs"], fmt(r["peak_mib"], 0),
           fmt(r.get("needed_mib"), 0), r["command"].replace("|", "\\|")]
          for r in runs if r["kind"] == "decode_memory"]
  return table(["commit", "CPU", "workload", "searches kept", "peak (MiB)",
                "a pass needs (MiB)", "command"], rows)


def paragraphs(runs):
  """Paragraphs of test sentences translated as paragraphs against one sentence per line
  (bench/paragraphs.py), the newest row of each CPU class first."""
  rows = [[r["cpu"], r["model"], r["beam"], fmt(r["bleu_paragraphs"]),
           fmt(r["bleu_sentences_joined"]), fmt(r["bleu_paragraphs_unsplit"]),
           fmt(r["sentences_per_s_paragraphs"], 1), fmt(r["sentences_per_s_sentences"], 1),
           fmt(100 * r["boundary_accuracy"], 1)]
          for r in reversed(runs) if r["kind"] == "paragraphs"]
  return table(["CPU", "model", "beam", "BLEU as paragraphs", "BLEU by sentences, joined",
                "BLEU, each paragraph one sequence", "sentences/s as paragraphs",
                "sentences/s by sentences", "paragraphs split exactly (%)"], rows)


def unpunctuated(runs):
  """Captions joined without punctuation (bench/paragraphs.py --unpunctuated), the newest
  row of each CPU class first: as paragraphs (run-ons cut at sentence starts), without
  that cut, and one sentence a line."""
  rows = [[r["cpu"], r["model"], r["beam"], fmt(r["bleu_paragraphs"]),
           fmt(r["bleu_paragraphs_without_run_on_cut"]), fmt(r["bleu_sentences_joined"]),
           fmt(r["bleu_paragraphs"] - r["bleu_sentences_joined"]),
           fmt(100 * r["boundary_accuracy"], 1), r["commit"]]
          for r in reversed(runs) if r["kind"] == "paragraphs_unpunctuated"]
  return table(["CPU", "model", "beam", "BLEU as paragraphs", "BLEU without the run-on cut",
                "BLEU by sentences, joined", "paragraphs - sentences",
                "paragraphs cut exactly (%)", "commit"], rows)


def styled_documents(runs):
  """A styled Markdown report against its plain text (bench/styled_documents.py), the
  newest row of each CPU class first."""
  rows = [[r["cpu"], r["model"], r["paragraphs"], r["beam"],
           fmt(r["plain_sentences_per_s"], 1), fmt(r["styled_sentences_per_s"], 1),
           fmt(r["styled_over_plain"]), "yes" if r["same_text"] else "no", r["commit"]]
          for r in reversed(runs) if r["kind"] == "documents"]
  return table(["CPU", "model", "paragraphs", "beam", "plain sentences/s",
                "styled sentences/s", "styled / plain", "same text", "commit"], rows)


def glossary_sets(runs):
  """Glossaries on the three terminology sets (bench/glossary.py), the newest row of each
  CPU class: term use, terms in place, appended outputs, BLEU, chrF and speed."""
  newest = {r["cpu"]: r["name"] for r in runs if r["kind"] == "glossary_sets"}
  rows = [[r["cpu"], r["model"], x["set"], f"{x['sentences']:,} ({x['terms_applied']:,})",
           f"{fmt(100 * x['plain_term_use'], 1)} / {fmt(100 * x['glossary_term_use'], 1)}",
           f"{fmt(100 * x['in_place'], 1)} (of {x['judged']:,})", str(x["appended"]),
           f"{fmt(x['plain_bleu'])} / {fmt(x['glossary_bleu'])}",
           f"{fmt(x['plain_chrf'])} / {fmt(x['glossary_chrf'])}",
           f"{fmt(x['plain_sentences_per_s'], 1)} / {fmt(x['glossary_sentences_per_s'], 1)}",
           fmt(x["speed_ratio"]), r["commit"]]
          for r in runs if r["kind"] == "glossary_sets" and newest[r["cpu"]] == r["name"]
          for x in r["sets"]]
  return table(["CPU", "model", "set", "sentences (terms)", "term use without / with (%)",
                "in place (%)", "appended", "BLEU without / with", "chrF without / with",
                "sentences/s without / with", "speed with / without", "commit"], rows)


def glossary_agreement(runs):
  """Terms of another gender than the model's word (bench/glossary_agreement.py), the
  newest row of each CPU class: each way against plain search on the same sentences."""
  found = [r for r in runs if r["kind"] == "measurement"
           and r.get("benchmark") == "glossary_agreement"]
  newest = {r["cpu"]: r["name"] for r in found}
  ways = {"placed": "placed, no agreement", "lexicon": "agreeing: german-nouns (default)",
          "model": "agreeing: the model's scores choose the gender"}
  rows = []
  for r in found:
    if newest[r["cpu"]] != r["name"]:
      continue
    f = r["figures"]
    for x in f["ways"]:
      rows.append([r["cpu"], f"{f['model']}, {f['checkpoint']}", ways[x["way"]],
                   f"{f['sentences']:,}", fmt(100 * x["term_use"], 1) if x["term_use"] is not None
                   else "—", fmt(100 * x["in_place"], 1) if x["in_place"] is not None else "—",
                   f"{fmt(100 * x['agreement'], 1)} (of {x['judged']:,})"
                   if x["agreement"] is not None else "—", str(x["appended"]),
                   f"{fmt(f['plain']['bleu'])} / {fmt(x['bleu'])}",
                   f"{fmt(f['plain']['chrf'])} / {fmt(x['chrf'])}",
                   f"{fmt(f['plain']['sentences_per_s'], 1)} / {fmt(x['sentences_per_s'], 1)}",
                   fmt(x["speed_ratio"]), r["commit"]])
  return table(["CPU", "model", "way", "sentences", "term use (%)", "in place (%)",
                "agreement (%)", "appended", "BLEU plain / with", "chrF plain / with",
                "sentences/s plain / with", "speed with / plain", "commit"], rows)


def glossary_example(runs):
  """The example glossary of docs/translating.md on its six sentences, from the newest
  bench/glossary_agreement.py row: plain search, the terms placed without agreement, and
  agreeing (the default)."""
  found = [r for r in runs if r["kind"] == "measurement"
           and r.get("benchmark") == "glossary_agreement"]
  if not found:
    return table(["source", "plain", "placed, no agreement", "agreeing"], [])
  r = found[-1]
  e = r["figures"]["example"]
  rows = [[s, p, placed, agreeing] for s, p, placed, agreeing
          in zip(e["sources"], e["plain"], e["placed"], e["lexicon"])]
  terms = ", ".join(f"`{a} → {b}`" for a, b in e["glossary"].items())
  return (f"Glossary {terms}; {r['figures']['model']}, {r['figures']['checkpoint']}, beam "
          f"{r['figures']['beam']}, commit {r['commit']}:\n\n"
          + table(["source", "plain", "placed, no agreement", "agreeing"], rows))


def detection(runs):
  """Language detection (bench/detection.py), the newest row of each detector and CPU
  class: accuracy on whole captions and on 1-3 words, and time per text."""
  newest = {(r["cpu"], r["detector"]): r["name"] for r in runs if r["kind"] == "detection"}
  rows = [[r["cpu"], r["detector"], f"{r['sentence']['texts']:,}",
           *(fmt(100 * r[k]["accuracy"], 1) for k in ("sentence", "1 word", "2 words",
                                                      "3 words")),
           fmt(r["ms_per_text"], 3), r["commit"]]
          for r in runs if r["kind"] == "detection"
          and newest[r["cpu"], r["detector"]] == r["name"]]
  return table(["CPU", "detector", "texts per length", "captions (%)", "1 word (%)",
                "2 words (%)", "3 words (%)", "ms per text", "commit"], rows)


def serve_mixed(runs):
  """Several models behind one server (bench/serve_mixed.py), the newest row of each CPU
  class: mixed traffic over six models against one model's server, and memory."""
  newest = {r["cpu"]: r["name"] for r in runs if r["kind"] == "serve_mixed"}
  rows = []
  for r in runs:
    if r["kind"] != "serve_mixed" or newest[r["cpu"]] != r["name"]:
      continue
    for key, label in (("one_model", "one model, one direction"),
                       ("six_models", "six models, six directions")):
      x = r[key]
      rows.append([r["cpu"], r["model"], label, str(r["clients"]), fmt(x["sentences_per_s"], 1),
                   fmt(x["p50_ms"], 0), fmt(x["p99_ms"], 0), str(x["mismatches"]),
                   fmt(x["rss_mib_ready"], 0), r["commit"]])
  return table(["CPU", "model", "server", "clients", "sentences/s", "p50 (ms)", "p99 (ms)",
                "answers unlike alone", "RSS when ready (MiB)", "commit"], rows)


def multilingual_arms(runs):
  """{(CPU, cores): {arm: its newest row}} of bench/multilingual.py's rows."""
  out: dict = {}
  for r in runs:
    if r["kind"] == "multilingual":
      out.setdefault((r["cpu"], r["cores"]), {})[r["arm"]] = r
  return out


def signed(x, digits=2):
  return f"{x:+.{digits}f}"


def multilingual(runs):
  """One model of six directions for an hour against the automatic recipe's bilingual run
  of 10 minutes per direction, and en→de against the bilingual hour (bench/multilingual.py):
  test_2016_flickr sacreBLEU, beam 5, averaged checkpoints, the newest arms of each CPU
  class and core count."""
  rows = []
  for (cpu, cores), arms in multilingual_arms(runs).items():
    ml, bi, hour = (arms.get(a) for a in ("multilingual", "bilingual", "hour"))
    if ml is None:
      continue
    commits = "/".join(x.get("train_commit", x["commit"]) for x in (ml, bi, hour) if x)
    pairs = []
    for d, x in ml["directions"].items():
      b = (bi or {}).get("directions", {}).get(d)
      h = (hour or {}).get("directions", {}).get(d)
      pairs.append((x["bleu"], b["bleu"] if b else None))
      rows.append([cpu, str(cores), d.replace("-", "→"), fmt(x["bleu"]),
                   fmt(b["bleu"]) if b else "–", signed(x["bleu"] - b["bleu"]) if b else "–",
                   f"{fmt(h['bleu'])} ({signed(x['bleu'] - h['bleu'])})" if h else "–",
                   commits])
    both = [(m, b) for m, b in pairs if b is not None]
    if both:
      mean_m, mean_b = (sum(p[k] for p in both) / len(both) for k in (0, 1))
      rows.append([cpu, str(cores), "**mean**", fmt(mean_m), fmt(mean_b),
                   signed(mean_m - mean_b), "", commits])
    rows.append([cpu, str(cores), "updates", f"{ml['updates']:,}",
                 " / ".join(f"{x['updates']:,}" for x in (bi or {}).get("directions", {})
                            .values()) or "–", "",
                 f"{hour['updates']:,}" if hour else "–", commits])
  return table(["CPU", "cores", "direction", "one model, 6 directions, 60 min",
                "bilingual, 10 min each", "difference", "bilingual en→de, 60 min",
                "commits"], rows)


def multilingual_zero_shot(runs):
  """The multilingual hour between two languages it was not trained on: zero-shot
  (straight, with the target's token) against pivoting through English, the same model."""
  rows = [[cpu, str(cores), d.replace("-", "→"), fmt(x["bleu"]),
           fmt(x["bleu_all_pieces"]) if "bleu_all_pieces" in x else "–",
           fmt(x["pivot_bleu"]), signed(x["bleu"] - x["pivot_bleu"]),
           arms["multilingual"]["commit"]]
          for (cpu, cores), arms in multilingual_arms(runs).items() if "multilingual" in arms
          for d, x in arms["multilingual"].get("zero_shot", {}).items()]
  return table(["CPU", "cores", "pair", "zero-shot, target's pieces only",
                "zero-shot, every piece", "through English", "zero-shot − through English",
                "commit"], rows)


def soak(runs):
  """Soaks of the server (bench/soak.py): arrivals beyond its capacity for a long time."""
  rows = [[r["cpu"], fmt(r["minutes"], 0), fmt(r["capacity_requests_per_s"], 1),
           fmt(r["arrival_rate"], 1), f"{r['sent']:,}", f"{r['refused_429']:,}",
           r["429_without_retry_after"], r["server_errors"], fmt(r["p50_ms"], 0),
           fmt(r["p99_ms"], 0),
           f"{fmt(r['rss_mib_start'], 0)} / {fmt(r['rss_mib_peak'], 0)} / {fmt(r['rss_mib_end'], 0)}"]
          for r in runs if r["kind"] == "soak"]
  return table(["CPU", "minutes", "capacity (req/s)", "arrivals (req/s)", "requests", "429",
                "429 without Retry-After", "5xx", "p50 of 200s (ms)", "p99 of 200s (ms)",
                "server RSS start / peak / end (MiB)"], rows)


def batch_rows(runs):
  """A lone sentence's decoding under each bfloat16 row padding (bench/lone_sentence.py):
  its speed, and whether its translation equals the one it gets in a batch of 64."""
  yes = lambda v: "yes" if v else "**no**"  # noqa: E731
  rows = [[r["cpu"], r["padding"], fmt(r["greedy_sentences_per_s"], 1),
           yes(r["greedy_alone_equals_batch"]), fmt(r["beam5_sentences_per_s"], 1),
           yes(r["beam5_alone_equals_batch"])]
          for r in runs if r["kind"] == "batch_rows"]
  return table(["CPU", "bfloat16 rows (least : multiple)", "greedy, 1 sentence (sent/s)",
                "greedy = batch of 64", "beam 5, 1 sentence (sent/s)", "beam 5 = batch of 64"],
               rows)


def first_minutes(runs):
  """The first minutes of training from an empty compilation cache against the same run's
  steady rate (measured by a script since removed: docs/experiments.md)."""
  rows = [[f"`{r['commit']}`", r["cpu"], r["config"], r["programs"],
           fmt(r["compiled_all_s"], 1), f"{r['minutes']:g}", fmt(r["updates"], 0),
           fmt(r["steady_updates_per_s"], 3), f"{100 * r['share_of_updates']:.1f} %",
           fmt(r["steady_target_tokens_per_s"], 0), f"{100 * r['share_of_tokens']:.1f} %"]
          for r in runs if r["kind"] == "first_minutes"]
  return table(["commit", "CPU", "config", "programs", "all compiled (s)", "first minutes",
                "updates in them", "steady updates/s", "share of updates",
                "steady target tokens/s", "share of tokens"], rows)


def serving_rows(serve):
  return [[f"`{r['commit']}`", r["cpu"], r["engine"], r["search"], r["clients"],
           fmt(r["sentences_per_s"], 1), f"{100 * r['share_of_batch']:.0f} %",
           f"{100 * r['share_of_unsorted']:.0f} %" if r.get("share_of_unsorted") else "—",
           fmt(r["p50_ms"], 0), fmt(r["p95_ms"], 0), fmt(r["p99_ms"], 0),
           fmt(r.get("alone_ratio"))] for r in serve]


def serving(runs):
  """Server load tests, the latest commit's first."""
  serve = [r for r in runs if r["kind"] == "serve"]
  order = list(dict.fromkeys(r["commit"] for r in serve))[::-1]
  serve.sort(key=lambda r: order.index(r["commit"]))  # stable within a commit
  return table(["commit", "CPU", "engine", "search", "clients", "sentences/s",
                "of batch decoding", "of its unsorted batches", "p50 ms", "p95 ms", "p99 ms",
                "1 client p50 / engine alone"], serving_rows(serve))


def decoding_now(runs):
  """The newest comparison against CTranslate2 at its best (its threads and batching
  swept) on each CPU class, without the commit: what a user of that CPU gets now."""
  decode = [r for r in runs if r["kind"] == "decode" and r["cpu"]
            and r.get("baseline") == SWEPT and "model" not in r]  # a trained run's
  latest = {r["cpu"]: r["commit"] for r in decode}  # the file is in time order
  rows = [[r["cpu"], r["engine"], r["search"], r.get("configuration", "—"),
           fmt(r["sentences_per_s"], 1), fmt(r["bleu"]), fmt(r.get("ratio")),
           fmt(r.get("ratio_int8")), fmt(r.get("peak_rss_mib"), 0)]
          for r in decode if latest[r["cpu"]] == r["commit"]]
  return table(["CPU", "engine", "search", "configuration", "sentences/s", "BLEU",
                "JAX / CTranslate2 float32", "JAX / CTranslate2 int8", "peak MiB"], rows)


def decoding_imported(runs):
  """The newest comparison on an imported model of another tool's shape (decode rows with
  a `model`) on each CPU class: the same model in CTranslate2 at its best (swept)."""
  decode = [r for r in runs if r["kind"] == "decode" and "model" in r]
  latest = {(r["cpu"], r["model"]): r["commit"] for r in decode}
  rows = [[r["cpu"], r["model"], r["engine"], r["search"], r.get("configuration", "—"),
           fmt(r["sentences_per_s"], 1), fmt(r.get("ratio")), fmt(r.get("ratio_int8")),
           fmt(r.get("peak_rss_mib"), 0)]
          for r in decode if latest[(r["cpu"], r["model"])] == r["commit"]]
  return table(["CPU", "model", "engine", "search", "configuration", "sentences/s",
                "JAX / CTranslate2 float32", "JAX / CTranslate2 int8", "peak MiB"], rows)


def import_round_trips(runs):
  """A trained run exported and imported back (bench/import_models.py round-trip): the
  float32 CTranslate2 export's import against the run, the Argos package's (int8) against
  seq2seq's CTranslate2 engine on that package's model, and a fine-tuning of the import."""
  found = [r for r in runs if r["kind"] == "measurement" and r.get("benchmark") == "import_models"
           and r["figures"].get("what") == "round-trip"]
  rows = []
  for r in found:
    f = r["figures"]
    rows.append([f"`{r['commit']}`", r["cpu"], f"{f['sentences']:,}", fmt(f["bleu_run"]),
                 f"{f['float32_identical_lines']:,} / {f['sentences']:,}",
                 fmt(f["bleu_argos_int8_ctranslate2_engine"]), fmt(f["bleu_argos_int8_import"]),
                 f"{f['fine_tune_minutes']:g} min, {f['fine_tune_updates']:,} updates"
                 if "fine_tune_updates" in f else "—",
                 f"{fmt(f['val_bleu_greedy_run'])} → {fmt(f['val_bleu_greedy_fine_tuned'])}"
                 + (f" (averaged {fmt(f['val_bleu_greedy_fine_tuned_averaged'])})"
                    if "val_bleu_greedy_fine_tuned_averaged" in f else "")
                 if "val_bleu_greedy_fine_tuned" in f else "—"])
  return table(["commit", "CPU", "test sentences", "BLEU of the run (beam 5)",
                "float32 import: lines identical to the run",
                "Argos int8: CTranslate2 engine BLEU", "Argos int8: import's BLEU",
                "fine-tuning of the float32 import", "val BLEU (greedy): run → fine-tuned"],
               rows)


def serving_now(runs):
  """The newest load test of each engine, search and client count on each CPU class,
  without the commit."""
  serve = [r for r in runs if r["kind"] == "serve"]
  key = lambda r: (r["cpu"], r["engine"], r["search"], r["clients"])  # noqa: E731
  latest = {key(r): r["commit"] for r in serve}
  return table(["CPU", "engine", "search", "clients", "sentences/s", "of batch decoding",
                "of its unsorted batches", "p50 ms", "p95 ms", "p99 ms", "1 client p50 / engine alone"],
               [row[1:] for row, r in zip(serving_rows(serve), serve)
                if latest[key(r)] == r["commit"]])


def auto_recipe_now(runs):
  """The automatic recipe of the latest rules against the hand recipe, per case."""
  autos = [r for r in runs if r["kind"] == "auto" and r["arm"] == "auto"]
  latest = autos[-1]["commit"] if autos else None
  rows = [row for row, commit in auto_rows(runs) if commit == latest]
  return table(["case", "CPU", "minutes", "hand val sacreBLEU", "hand updates",
                "auto val sacreBLEU", "auto updates", "auto − hand", "auto chose"],
               [row[:8] + row[9:] for row in rows])


def auto_rows(runs):
  """(row, commit of its rules) for each automatic run beside the hand run of its case
  before it in the file (the same machine, one arm after the other), in file order."""
  rows, hand = [], {}
  for r in runs:
    if r["kind"] != "auto":
      continue
    key = (r["case"], r["minutes"], r["cpu"])
    if r["arm"] == "hand":
      hand[key] = r
      continue
    h, s = hand.get(key), r["settings"]
    rows.append(([r["case"], r["cpu"], f"{r['minutes']:g}", fmt(h and h["val_bleu"]),
                  f"{h['updates']:,}" if h else "—", fmt(r["val_bleu"]), f"{r['updates']:,}",
                  fmt(r["val_bleu"] - h["val_bleu"]) if h else "—", f"`{r['commit']}`",
                  f"vocab {s['vocab_size']:,}, dropout {s['dropout']}, smoothing "
                  f"{s['label_smoothing']}, warmup {s['warmup_steps']}, ramp "
                  f"{s['dropout_ramp_steps']:,}, checkpoints every {s['checkpoint_every']}"
                  + (f", rows of {s['pack_length']} pieces" if s.get("pack_length") else "")],
                 r["commit"]))
  return rows


def auto_recipe(runs):
  """Every automatic run beside its hand run, with the commit whose rules it ran; the
  latest first."""
  return table(["case", "CPU", "minutes", "hand val sacreBLEU", "hand updates",
                "auto val sacreBLEU", "auto updates", "auto − hand", "rules of",
                "auto chose"], [row for row, _ in auto_rows(runs)][::-1])


def auto_plan(runs):
  """The updates the automatic recipe planned against those its run made."""
  rows = [[r["case"], r["cpu"], f"{r['minutes']:g}", f"{r['update_s']:.3f}",
           f"{r['compile_s']:.1f} x {r['buckets']}", r["factors"], f"{r['planned']:,}",
           f"{r['made']:,}", f"{r['planned'] / r['made']:.2f}", fmt(r['s_per_update'], 3),
           f"`{r['commit']}`"] for r in runs if r["kind"] == "auto_plan"]
  return table(["case", "CPU", "minutes", "timed update (s)", "its compile (s) x buckets",
                "factors", "planned updates", "made", "planned / made",
                "run's s per update", "code"], rows)


def settings(runs):
  """Decoding, averaging and ensembling choices scored on validation for trained runs."""
  rows = [[r["run"], r["setting"], fmt(r["val_bleu"]), fmt(r["val_lc_tok"]), r["note"]]
          for r in runs if r["kind"] == "setting"]
  return table(["run", "setting", "val sacreBLEU", "val lc-tok", "note"], rows)


def proxies(runs):
  rows = [[f"`{r['change']}`" if r["change"] else "r1 itself", f"{r['updates']:,}", fmt(r["val_greedy"]),
           fmt(r["val_avg5"]), fmt(r["val_avg10"]), fmt(r["val_avg20"])]
          for r in runs if r["kind"] == "proxy"]
  return table(["change", "updates", "greedy val BLEU", "average of 5", "of 10", "of 20"], rows)


TABLES = {"multilingual": multilingual, "multilingual_zero_shot": multilingual_zero_shot,
          "proxies": proxies, "settings": settings, "hour_by_cpu": hour_by_cpu, "glossary_sets": glossary_sets, "detection": detection, "serve_mixed": serve_mixed, "hour_now": hour_now, "past_the_hour": past_the_hour, "ablations": ablations,
          "recipe_versions": recipe_versions, "decoding": decoding, "serving": serving, "auto_recipe": auto_recipe, "auto_plan": auto_plan,
          "decoding_now": decoding_now, "baseline_sweep": baseline_sweep, "auto_recipe_now": auto_recipe_now,
          "serving_now": serving_now, "decode_compile": decode_compile,
          "first_minutes": first_minutes, "decode_memory": decode_memory,
          "paragraphs": paragraphs, "batch_rows": batch_rows, "soak": soak,
          "unpunctuated": unpunctuated, "styled_documents": styled_documents,
          "decoding_imported": decoding_imported, "import_round_trips": import_round_trips,
          "glossary_agreement": glossary_agreement, "glossary_example": glossary_example}
BENCH_README = ROOT / "bench" / "README.md"
BENCH_INTRO = r"""Each script measures one thing on the machine at hand and prints its figures with a
last JSON line. Run them from a checkout after `make install`, with `.venv/bin/python`
(or an activated `.venv`), on an otherwise idle machine: the test suite on the other
core halves a figure. A speed claim is a ratio measured in one run: two variants timed
alternately in one process, or a figure against the matmul ceiling measured in the same
run. Each figure below names its CPU; the ones this project has seen:

| CPU | float32 matmul ceiling (GFLOP/s) | bfloat16 operands, float32 products |
|---|---|---|
| Intel Xeon with AMX (`amx_tile` in `/proc/cpuinfo`) | 189-338 | 1,026-1,757 (4.5x) |
| AMD EPYC with AVX-512 BF16 (`avx512_bf16`) | 209 | 391 (1.9x) |
| AMD EPYC with AVX2 only | 113-136 | no faster than float32 |

`grep -o 'avx512_bf16\|amx_tile' /proc/cpuinfo | sort -u` tells which class a machine
is. The speed of one machine drifts by up to 2x between days: compare within one run.

Each script takes `--results FILE` and appends its figures there as rows of
results.jsonl's format (its kind's fields, `check_row` in report.py; a script whose
figures no table shows writes kind "measurement"), with the CPU, the command and the
commit; a script that cannot run on the machine (Multi30k or an optional package missing)
says why in one line. `make bench-smoke` runs every script end to end on the suite's tiny
run with its smallest arguments (tests/bench/test_bench_smoke.py), and CI runs it.

Every measured run is a row of [results.jsonl](results.jsonl) (its name, CPU, figures,
command and commit); [report.py](report.py) turns the rows into the tables of the
[README](../README.md#results), the docs and this page, and `python bench/report.py
--check` (run by the test suite) fails when one is stale. Every run, with what it
showed: [docs/experiments.md](../docs/experiments.md#benchmarks-run-by-run)."""


def bench_readme(runs) -> str:
  """bench/README.md, generated: the introduction, each script's docstring (what it
  measures and how to run it), and the latest figures of each kind."""
  parts = ["# Benchmarks", "", "<!-- generated by bench/report.py from the scripts' "
           "docstrings and results.jsonl: edit those, not this file -->", "", BENCH_INTRO,
           "", "## The scripts", ""]
  for path in sorted((ROOT / "bench").glob("*.py")):
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    parts += [f"### {path.name}", "", doc.strip(), ""]
  parts += ["## Latest figures", "",
            "Decoding against CTranslate2, the newest run on each CPU class:", "",
            decoding_now(runs), "",
            "The HTTP server, the newest run of each engine, search and client count:", "",
            serving_now(runs), "",
            "A lone sentence against a batch, by CPU class:", "", batch_rows(runs), "",
            "The first minutes of a run from an empty compilation cache:", "",
            first_minutes(runs), ""]
  return "\n".join(parts)


DOCS = [ROOT / "README.md", ROOT / "docs" / "recipe.md", ROOT / "docs" / "experiments.md",
        ROOT / "docs" / "serving.md", ROOT / "docs" / "translating.md",
        ROOT / "docs" / "pretrained.md"]


def render(text, runs):
  """`text` with every marked table regenerated from `runs`."""
  def sub(m):
    if m.group(2) not in TABLES:
      raise SystemExit(f"unknown results table {m.group(2)!r}; known: {', '.join(TABLES)}")
    return m.group(1) + TABLES[m.group(2)](runs) + m.group(4)
  return MARK.sub(sub, text)


def stale(runs=None):
  """The Markdown files whose tables differ from what the results give."""
  runs = load() if runs is None else runs
  bad = [p for p in DOCS if p.exists() and render(p.read_text(encoding="utf-8"), runs)
         != p.read_text(encoding="utf-8")]
  if not BENCH_README.exists() or BENCH_README.read_text(encoding="utf-8") != bench_readme(runs):
    bad.append(BENCH_README)
  return bad


def plot_curves(runs, path=CURVES):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (ax_nll, ax_bleu) = plt.subplots(1, 2, figsize=(10, 3.8))
  for r in training(runs):
    if r["kind"] == "hour" and version(r) in SAME_MODEL[1:] and r["curve"]:
      steps, minutes, nll, bleu = zip(*r["curve"])
      label = f"{version(r)}, seed {r['seed']}, {r['cpu'] or 'CPU not recorded'}"
      ax_nll.plot(steps, nll, label=label)
      ax_bleu.plot(minutes, [b if not math.isnan(b) else None for b in bleu], label=label)
  ax_nll.set(xlabel="update", ylabel="validation NLL per piece", ylim=(1.5, 2.5))
  ax_bleu.set(xlabel="minutes", ylabel="greedy validation sacreBLEU", ylim=(30, 44))
  ax_nll.legend(fontsize=7)
  for ax in (ax_nll, ax_bleu):
    ax.grid(alpha=0.3)
  fig.suptitle(f"configs/multi30k.py ({', '.join(SAME_MODEL[1:])}), Multi30k en→de, 2 CPU cores")
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=100)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="exit 1 if a table is stale")
  args = parser.parse_args(argv)
  runs = load()
  if args.check:
    bad = stale(runs)
    for p in bad:
      print(f"{p.relative_to(ROOT)}: tables differ from bench/results.jsonl; "
            "run python bench/report.py", file=sys.stderr)
    return 1 if bad else 0
  for p in DOCS:
    if p.exists():
      p.write_text(render(p.read_text(encoding="utf-8"), runs), encoding="utf-8")
  BENCH_README.write_text(bench_readme(runs), encoding="utf-8")
  plot_curves(runs)
  return 0


if __name__ == "__main__":
  sys.exit(main())
