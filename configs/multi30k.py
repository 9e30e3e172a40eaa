"""Reference recipe: Multi30k en->de on this machine (2 CPU cores), one hour of training.

Every choice is made for a small corpus (29k pairs) and a small compute budget; the
measured runs behind them are in bench/README.md ("Quality"):
- model: the `compact` preset (d 128, 4+4 layers, 4 heads, ff 512), the shape of Wu et
  al.'s (2021) text-only `transformer_tiny` with a wider feed-forward layer. It trains
  at ~2,250 target tokens/s here against ~1,300 for `small` (d 256, 3+3), so the hour
  holds ~13 epochs instead of ~8, and its greedy validation BLEU runs ahead of
  `small`'s at every point of the hour (32.3 against 28.1 at 28 minutes).
  Not wider: d_model 192 (4 heads of 48; session 52) cost 1.40x per update (7,768
  updates in the hour) and was 0.04-0.06 validation NLL ahead per update, ahead per
  minute by the end, but tied on the beam (val 42.31 against the four bfloat16 hours'
  42.13-42.98) and decodes val ~3.5x slower. With the chunked loss on an Intel Xeon
  with AMX (8,285 updates, session 56) it was again 0.05-0.06 validation NLL ahead per
  update and tied again (val 42.39 against 41.73 for the recipe's hour after it on the
  same machine and 42.17 / 43.47 for session 55's), decoding val ~4x slower.
- 4 heads of width 32: 2 heads of width 64 (fewer heads, as some small-corpus studies
  suggest) were level in validation NLL to 6,400 updates and lost on the beam (val
  41.86 with 8,325 updates against the fast-machine recipe's 42.32-42.66, session 42);
  8 heads of width 16 were level in NLL too and lost as well (val 41.74 with 7,784
  updates, session 43).
- 4+4 layers: 6+6 at d 128 was ahead per update but cost 1.27x per update; over the
  hour it tied (val 40.12, session 7), and so did 6+6 with label smoothing 0.2 (three
  seeds, val mean 39.87 against the previous recipe's 39.72, session 12), while
  decoding with six decoder layers costs every user more. With this recipe's
  regularisation 6+6 learned no faster per update and lost (val 39.75 against 41.20 /
  41.21, 5,459 updates against ~7,100, session 17). 6 encoder + 2 decoder layers
  (1.06x faster) was behind per update and per minute at every validation and was
  stopped at 41 minutes (session 20).
- feed-forward 512, not the published 256: d_ff 256 trains 1.16x faster (8,258 updates
  in the hour) but learns less per update and lost (val 40.53, session 18). Not gated:
  ReGLU (`model.glu=True model.d_ff=352`, 3 % more feed-forward FLOPs) was ahead in validation NLL to
  ~2,000 updates, level after, and tied (val 40.98 with 3,671 updates, session 35).
  Nor wider: d_ff 1024 cost 1.19x per token and was 0.003-0.031 validation NLL ahead per
  update, but lost to the recipe run after it on the same machine (val 41.64 with 6,414
  updates against 42.66 with 7,700, session 41). With bfloat16 operands (8,495 updates,
  session 49) it was 0.01-0.04 validation NLL ahead per update and scored val 43.09 (then
  the best of any hour) but lost on test: 40.35 / 40.65 lowercased-tokenized against the
  recipe's 40.81-40.98 / 41.14-41.33.
- pre-norm (layer norm before each sub-layer, the preset's default): post-norm, as in
  fairseq's `transformer_tiny`, stalls through this short warmup and ended the hour
  3.1 greedy / 4.1 averaged-beam val BLEU behind with 1,850 more updates (session 7).
  Layer norm, not ScaleNorm with FixNorm embeddings (`model.norm=scale
  model.fix_norm=True`, Nguyen and Salazar 2019, proposed for low-resource
  translation): ~3 % faster per update (7,410 updates against 7,066 on the same
  machine), 0.03-0.07 NLL behind per update to 3,200 updates and level after ~5,000, and
  a tie (val 40.96, session 27). Nor QK-norm (`model.qk_norm=10`, Henry et al. 2020:
  unit-length queries and keys times a learned scale, also proposed for low-resource
  translation): with bfloat16 operands ~6 % more per update (9,730 updates), level or up
  to 0.02 validation NLL ahead per update, and lost on the beam (val 41.85 against the
  four bfloat16 hours' 42.13-42.98, session 51).
- bfloat16 matmul operands (`model.matmul_dtype=bfloat16`; session 46): every matmul,
  forward and backward, rounds its operands to bfloat16 and keeps float32 products;
  parameters, activations, layer norm, softmax and the loss stay float32. On a CPU with
  AMX (this project's recent machines) XLA runs such products ~4.5x faster than float32
  ones and the recipe's step 1.27x faster (5,249 against 4,134 target tokens/s in
  bench/train_throughput.py, one after the other), so the hour held 11,383 updates (41
  epochs) against 7,700-8,517 for the float32 recipe's four fast-machine hours. Per
  update the rounding cost 0.00-0.03 validation NLL (level to 6,000 updates, behind by
  up to 0.03 at 7,600-8,400); per minute it was ahead throughout. Seed 0 scored val
  42.80, test 40.89 sacreBLEU, 41.14 lowercased-tokenized, against 42.32-42.66 and
  40.49-40.61 / 40.85-40.93 for those four hours: the best one-hour figures, still 0.36
  short of 41.5 lowercased-tokenized. Seed 1 (11,411 updates): val 42.13, test
  40.98 / 41.33, 0.17 short. On an AMD EPYC without AMX (AVX-512 BF16; session 47)
  the products ran 1.9x faster than float32 and the step 1.32x (4,873 against 3,693
  tokens/s); seed 2's hour there (9,352 updates) scored val 42.98, test 40.81 / 41.18.
  Run again after the loss stopped using argmax (the step 11 % faster, session 49), the
  same seed trained 10,383 updates and scored val 42.49, test 40.84 / 41.20: within the
  hour's 9,352-11,411 updates test stayed flat (four hours: 41.14-41.33). The hour is
  not enough for 41.5. With ~3,000 more updates the recipe gets there: those two AMD
  EPYC hours, resumed to 80 minutes (13,600 / 12,400 updates), scored test 41.61 / 41.63
  lowercased-tokenized, and 41.57 / 41.81 at 90; the first, resumed again, 41.64 at 70
  and 41.27 at 75 (session 53). A third hour (seed 3, session 54: 9,904 updates, test
  40.87 / 41.20) scored 41.47 at 80 minutes and 41.56 at 90: ~80 minutes on average
  (mean 41.57), 90 for every run so far, with ~0.2 of noise per measurement.
  A backend that cannot run these products (the model probes once) falls back to
  float32 operands with a warning, and `--config.model.matmul_dtype=float32` restores
  the float32 recipe.
- the output layer and loss 512 tokens at a time (`train.loss_chunk=512`, session 55):
  the same loss and gradients to float rounding, 1.13-1.15x per update with bfloat16
  operands (bench/loss_chunk_ab.py: 202 against 233 ms per step), because one
  [2048, 128] x [128, 8000] product with its 62.5 MiB result runs ~5x slower than the
  same work in smaller pieces here. On an Intel Xeon with AMX the hour then held 15,200 /
  14,329 updates (56 / 53 epochs; seeds 0 / 1): val 43.47 / 42.17 (the first the best of
  any hour), test 40.46 / 41.11 sacreBLEU, 40.73 / 41.42 lowercased-tokenized. More
  updates than any hour before, and still short of 41.5: at ~15,000 updates test spreads
  over ~1.1 (these two and session 53-54's 90-minute runs, 41.56-41.81) while val does
  not predict where a run lands.
- rotary positions (`model.positional=rotary`, RoPE, Su et al. 2021; session 29), not
  the preset's sinusoidal ones: every self-attention rotates its queries and keys by
  their positions. They learn ~1.5x as much per update (validation NLL 0.08-0.18 ahead
  from 800 updates on, two seeds; at 4,000 updates where the sinusoidal recipe is at
  ~5,600-6,000) for ~7 % more time per update. On slow machines (4,266 / 5,175 updates
  in the hour) the two seeds scored val 41.70 / 40.95 and test 39.42 / 40.57 sacreBLEU,
  lowercased-tokenized 39.74 / 40.98, against 40.84 / 40.99 and 39.87 / 39.55 (40.26 /
  39.96) for the sinusoidal recipe's hours of ~7,000 updates on a fast machine, and val
  40.09 for it averaged at 4,400 updates (bench/README.md, "Rotary positions").
  Attention dropout 0.1 on top of them tied (val 41.31 with 5,472 updates, session 29).
  The hour is not enough for 41.5 lowercased-tokenized on test: the two runs resumed to
  90 minutes (6,905 / 7,970 updates) scored val 41.92 / 42.13 and test 40.53 / 41.27
  sacreBLEU, 40.80 / 41.64 lowercased-tokenized, and seed 0 at 120 minutes (8,919
  updates) val 42.28, test 41.21 / 41.52 (session 30). A third seed's hour on a slower
  machine (3,735 updates, its NLL per update level with the first two) scored val
  41.02, test 39.64 / 39.99, and resumed to 90 minutes (5,477 updates) val 41.50, test
  41.17 / 41.53 (session 31): the updates a seed needs for 41.5 ranged from 5,477 to
  8,919. On a machine with 2.3x the throughput (session 40) the hour held 8,517 / 8,113 updates:
  seeds 0 / 1 scored val 42.32 / 42.37, test 40.54 / 40.49 sacreBLEU, 40.85 / 40.85
  lowercased-tokenized, still short of 41.5; seed 0 on session 41's (7,700 updates) scored
  val 42.66, test 40.59 / 40.93; seed 2 on session 45's (7,738 updates) val 42.46, test
  40.61 / 40.91: four fast-machine hours within 0.08 of each other on test. R-Drop
  (`train.rdrop_alpha=5`) costs ~2.2x per update and was behind per update at 1,200;
  stopped at 30 minutes (session 41).
- tied source/target/output embeddings: one 8,000-piece joint unigram vocabulary
  shared by both languages; on small data sharing is a strong regulariser.
  8,000 pieces: 4k was behind and 12k tied with the first recipe (session 3); with this
  recipe on a fast machine 6k was behind in greedy BLEU early, within ~1 after, and
  lost (val 41.63 with 8,642 updates against 42.32-42.66, session 44). 10k with bfloat16
  operands cost ~7 % per sentence and tied (val 42.65 with 9,538 updates against the
  four bfloat16 hours' 42.13-42.98, session 50).
- regularisation: dropout 0.2, label smoothing 0.2 and subword sampling
  (`data.sampling_alpha=0.5`, every epoch segmented anew; Kudo 2018; drawn by
  seq2seq/subword_sampling.py since session 54, SentencePiece's distribution from a
  seed that means the same in every process), all three together
  (session 15). Each alone tied or lost over one hour (dropout 0.2 alone lost 1.7 val
  BLEU; smoothing 0.2 and sampling tied), and the 100-minute run of the previous recipe
  (dropout 0.1, smoothing 0.1) overfit after ~18 epochs. Together, on a machine that ran
  ~7,100 updates (26 epochs) in the hour, two seeds reached val 41.20 / 41.21 and test
  39.56 / 39.98 against 39.38-40.19 / 36.85-38.42 for the previous recipe's five runs.
  A third seed (session 23; 7,529 updates, validation NLL level with the first two)
  scored val 40.56 and test 39.58 (39.94 lowercased-tokenized): one run's averaged-beam
  val figure carries ~0.65 of seed noise, the size of most one-knob differences below.
  The gain needs those updates: the same run averaged at 4,400 updates (what a slower
  machine of this kind trains in the hour) scored val 38.72, about a point below the
  previous recipe at that count: on such a machine the hour was not enough for this
  recipe (~95 minutes give it the same updates) until the dropout ramp below. Past the
  hour it does not overfit (validation NLL falls through two hours) but the averaged
  model flattens: seed 0 at 60 / 90 / 120 minutes scored val 41.20 / 41.65 / 41.68,
  test 39.86 / 40.34 / 40.56 lowercased-tokenized, seed 1 at 60 / 90 / 120 val 41.21 / 41.86 / 42.55, test
  40.38 / 40.94 / 40.63 (sessions 16-17), so more minutes alone do not reach 41.5.
  Dropout 0.15 with the same smoothing and sampling learned faster to ~4,000 updates,
  was level from ~5,600 and tied (val 41.02 with 7,481 updates, session 21).
  Dropout 0.25 (ramped as below), for a fast machine's ~30 epochs in the hour, was
  0.00-0.04 validation NLL behind the recipe's fast-machine runs per update and tied
  (val 42.43 with 8,255 updates against their 42.32-42.66, session 42); with bfloat16
  operands (8,969 updates, 33 epochs) it was level in NLL and lost (val 41.98 against
  42.13-42.98, session 47).
  Stronger sampling, α 0.3, was behind at every validation (NLL +0.14-0.19) and was
  stopped at 34 minutes (session 21). Sampling the source side only
  (`data.sampling_sides=source`) with bfloat16 operands tied (val 42.62 with 10,525
  updates against the four bfloat16 hours' 42.13-42.98, session 50).
  Label smoothing 0.3 (with the dropout ramp) learned at the same rate in greedy BLEU
  and tied (val 40.86 at alpha 1.3, 41.21 at 1.6, session 27).
  Label smoothing 0.1 (the published value) with bfloat16 operands kept greedy BLEU within
  the seeds' spread and tied (9,283 updates; val 42.89 at alpha 1.6, 42.36 at 1.3,
  session 48).
- dropout ramped up (`train.dropout_ramp_steps=3000`, session 26): every dropout rate
  rises linearly from 0 at the first update to 0.2 at update 3,000 (~25 minutes), so the
  recipe learns as fast as the lightly regularised one early and is regularised once it
  could overfit. Over the full hour it ties (two seeds, 7,329 / 7,062 updates: val 40.84
  / 40.99, test 39.87 / 39.55, lowercased-tokenized 40.26 / 39.96, against 41.20 /
  41.21 / 40.56 and 39.56-39.98 / 39.86-40.38 without it), with validation NLL below all
  three earlier seeds at every validation (0.06-0.26 at 800-2,400 updates, 0.00-0.05
  after 4,000). What it buys is a result that does not hinge on the machine's speed: seed 1
  averaged at 4,400 updates, what a slower machine's hour holds, scores val 40.09
  against 38.72 without the ramp (+1.4), level with the previous light recipe's best.
  Stretched to 5,000 updates (0.16 at update 4,000) for the slow machines' hours of
  3,700-5,200 updates, it tied with rotary positions (val 41.14 with 3,899 updates,
  NLL within the seeds' spread, session 33).
- no word dropout (`model.word_dropout`, Sennrich and Zhang 2019): 0.1 on top of this
  regularisation was behind at every validation (0.04-0.14 NLL) and lost (val 39.75,
  session 24).
- no stochastic depth (`model.drop_path`, Huang et al. 2016): 0.1 on top of this
  regularisation was level or just behind in validation NLL per update and lost (val
  41.98 with 7,360 updates against the fast-machine recipe's 42.32-42.66, session 43).
- no bidirectional training (`data.bidirectional_epochs`, Ding et al. 2021): with the
  first 4 epochs in both directions (~2,100 updates) the run caught up from 0.27 NLL
  behind to 0.01 and ended with the best greedy BLEU of any hour (39.58), but its
  averaged beam scored val 40.59 against 41.20 / 41.21; with 2 epochs (~1,080 updates)
  it was level in NLL from 2,800 updates and scored 40.35 (session 22).
- ReLU feed-forward layers: GELU learned at the same rate per update (validation NLL
  level), cost ~3 % more per update and tied (val 40.78 against the three seeds' 40.56-41.21,
  session 23).
- batches of 2,048 padded tokens per side (~1,800 real target tokens): 4,100-4,434
  updates (15-17 epochs) in the hour on slower machines (2,340-2,550 target tokens/s in
  the trainer's log), 7,070-7,144 (26 epochs, ~3,900 tokens/s) on session 15's. Length
  buckets, not packed rows: rows of 48 pieces (`data.pack_length=48`, session 38) train
  as many tokens/s, compile one update shape instead of 14 (~3 minutes less) and kept
  validation NLL 0.01-0.03 ahead of the four seeds at 4,000 updates (two seeds, 4,043 /
  4,121 updates; seeds 2 / 3, session 39: 0.04-0.06 ahead at 3,600), but tied on the beam (val 41.01 /
  40.65 / 40.90 / 41.54, mean 41.03 against the four seeds' 41.15). 1,024-token batches
  (twice the updates, the same schedule per token) were ahead early, behind by the end of
  the hour and lost (val 40.43, session 19); 4,096 lost in the proxy sweep, and with
  bfloat16 operands over the hour (session 48; 4,630 updates, 33 epochs, warmup, ramp and
  checkpoints halved in updates so that they fall at the same tokens) it was 0.03-0.09
  validation NLL behind at every validation and lost (val 41.58).
- peak learning rate 4e-3 after 800 warmup updates, inverse square root decay: in the
  proxy sweep (bench/README.md, 3,900 updates each) 4e-3 beat 2.5e-3 by ~1 validation
  BLEU at every averaging span; warmup 400 did not help. 6e-3 for the full hour lost
  with the previous recipe (val 39.30 against 39.38-40.19, session 8) and with this one
  (val 39.59 against 41.20, session 20); 3e-3 lost too (val 39.47, session 21).
  With rotary positions 5e-3 was ahead to ~2,000 updates (0.02-0.13 validation NLL),
  level after, and tied (val 41.13 with 4,350 updates, session 36).
  (Published: 5e-3 for 4x larger batches.) Warmup over 2,000 updates (published) at the
  same peak, which keeps the late rate 1.58x higher, was far behind through warmup,
  level in validation NLL from ~7,200 updates, and tied on val at alpha 1.3 (42.92 with
  10,310 updates). Its val-best alpha, 1.6 (43.23), lost on test: 40.27 / 40.64
  lowercased-tokenized, with outputs 2.8 % longer than the references (session 51).
- Adam (0.9, 0.98), gradient clipping at norm 1, no weight decay: AdamW with decay 0.05
  was ahead to ~2,800 updates, behind by 0.01-0.03 NLL at the end and tied (val 40.50,
  session 24). Adam b2 0.995 (a longer second-moment average for these small
  batches) with bfloat16 operands was ahead in validation NLL (below the four
  bfloat16 hours' range at every validation, 1.589 at 10,000 updates against
  1.598-1.611) and tied on the beam (val 42.35 with 10,592 updates, session 52).
  Muon on the weight matrices (`train.optimizer=muon`) learned much more per update
  (0.15-0.28 NLL ahead to 1,600 updates, its 6,000 matching the recipe's 7,200) but its
  Newton-Schulz iterations cost ~16 % per update, and it tied over the hour (val 41.05
  with 6,275 updates, session 25); with dropout 0.25 it lost (val 40.09, 5,913 updates).
  With rotary positions on a slow machine (3,217 / 3,410 updates) it was 0.04-0.06 NLL
  ahead at equal minutes but tied on the beam: val 41.32 / 40.98, test
  lowercased-tokenized 39.75 / 40.22 against the recipe's 39.74-40.98 (session 32). On a
  fast machine Muon cost ~33 % per update (5,828 updates in the hour against 7,738 for
  Adam's seed 2 on the same machine) and tied again: val 42.40 against the recipe's
  42.32-42.66 there (session 45).
  No moving average of the weights:
  `train.ema_decay=0.999` lost 0.8 val BLEU to the averaged checkpoints of the same run
  (session 12). No learning-rate cooldown: `train.cooldown=0.2` (linear to 0 over the
  hour's last 12 minutes) brought validation NLL to what ~8,000 recipe updates reach but
  lost on the beam (val 40.24 averaged, 40.37 last checkpoint, session 19). Nor
  schedule-free AdamW (`train.optimizer=schedule_free`, constant 4e-3 after the same
  warmup): 0.02-0.03 validation NLL behind the seeds' mean from 2,400 updates, and its
  average gained little from the beam: val 39.58 (4,050 updates, session 37).
- validation every 400 updates (~7 minutes) with greedy search; checkpoints every 100
  updates and the last 10 averaged at the end (they span the last 1,000 updates, 8-15
  minutes by the machine, where the learning rate has decayed enough for their mean to
  beat each of them). On seed 1's hour the last 5 / 10 / 20 / 30 scored val 40.75 /
  41.21 / 40.57 / 40.17; with the dropout ramp the last 10 / 20 / 30 / 50 scored 40.99 /
  41.07 / 41.13 / 40.59 (session 27). On a fast machine's hour (seed 2, 7,738 updates,
  session 45) the last 5 / 10 / 20 / 30 / 40 scored 42.50 / 42.46 / 41.95 / 41.87 / 41.69.
- beam 5, length penalty alpha 1.3, outputs up to 1.5 x source + 10 pieces: alpha
  chosen on the validation set with bench/tune_decoding.py (bench/README.md). With label
  smoothing 0.2 the best alpha is lower than the previous recipe's 1.6 (val, seeds 0 / 1:
  1.0 -> 41.21 / 41.19, 1.3 -> 41.20 / 41.21, 1.6 -> 40.57 / 41.11, 2.0 -> 38.79 / -).
  Beams 8 and 12 tie with 5 (seed 1: 41.18, 41.27 against 41.21) at up to 2.4x the time.
  With bfloat16 operands (seed 2's 9,352 updates, session 48) alpha 1.3 is still best:
  0.8 / 1.0 / 1.3 / 1.6 / 2.0 -> 42.64 / 42.78 / 42.98 / 42.87 / 40.93.
  No minimum Bayes risk choice (`decode.mbr`): among the beam's hypotheses it gained 0.3
  val on one model and lost 0.7 on another; with sampled candidates it lost 1.3
  (session 20).
"""

from seq2seq import presets
from seq2seq.config import default_config


def get_config(folder: str | None = None):
  """`--config multi30k[:FOLDER]`: Multi30k from FOLDER, else from presets.multi30k_dir()
  ($SEQ2SEQ_MULTI30K, or ../shared/data/multi30k beside this checkout), else from the
  Hugging Face Hub (bentrevett/multi30k, which needs network access on first use)."""
  cfg = default_config("compact")
  local = presets.multi30k_dir(folder)
  if local is not None:
    cfg.data.dir = str(local)  # val.{en,de}.gz, test_2016_flickr.{en,de}.gz, ...
  else:
    cfg.data.hub = presets.MULTI30K_HUB
  # The Hub calls the splits validation and test; the recipe keeps the release's names.
  cfg.data.hub_splits = "val=validation,test_2016_flickr=test"
  cfg.data.max_tokens = 2048
  cfg.model.positional = "rotary"
  cfg.model.matmul_dtype = "bfloat16"  # bfloat16 operands, float32 products
  cfg.train.loss_chunk = 512  # output layer + loss 512 tokens at a time: 1.13x per update
  cfg.model.dropout = 0.2
  cfg.train.dropout_ramp_steps = 3000  # dropout rises from 0 to 0.2 over these updates
  cfg.data.sampling_alpha = 0.5
  cfg.train.label_smoothing = 0.2
  cfg.train.learning_rate = 4e-3
  cfg.train.warmup_steps = 800
  cfg.train.max_steps = 100_000  # bounded by max_minutes instead
  cfg.train.max_minutes = 60.0
  cfg.train.log_every = 50
  cfg.train.eval_every = 400
  cfg.train.checkpoint_every = 100
  cfg.train.keep_checkpoints = 10
  cfg.train.average_last = 10
  cfg.decode.beam_size = 5
  # Tuned on val, rotary seeds 0 / 1: 1.0 -> 41.57 / 40.67, 1.3 -> 41.70 / 40.95,
  # 1.6 -> 41.66 / 41.04 (sinusoidal seeds 0 / 1 / 2: 1.3 best or within 0.1 too).
  cfg.decode.alpha = 1.3
  return cfg
