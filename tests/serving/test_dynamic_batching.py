"""Dynamic batching over a stand-in engine: which texts decode together, and when a batch
waits for company."""

import asyncio
import time

from seq2seq.decoding.engine_io import SearchSettings
from seq2seq.serving.dynamic_batching import Batcher, Metrics
from seq2seq.serving.http_api import Limits

SEARCH = SearchSettings(beam_size=1, alpha=0.6)
# Generous against a loaded machine: the clients send 1 ms apart, the batcher's quiet
# period is 25 ms (2 ms in the server), and a batch never waits more than half a second.
WAIT_MS, QUIET_MS = 500.0, 25.0


def run_waves(waves: list[int], spans: list | None = None) -> tuple[list[int], list[float]]:
  """Sends each wave's texts as one-text requests 1 ms apart, the next wave once the last
  is answered (as that many clients do). Returns the sizes of the batches decoded and the
  seconds each wave took; `spans` receives each batch's (start, end) time."""
  sizes = []

  def translate(texts, search, prefixes, first_index):
    sizes.append(len(texts))
    start = time.perf_counter()
    time.sleep(0.05)
    if spans is not None:
      spans.append((start, time.perf_counter()))
    return list(texts)

  async def main():
    batcher = Batcher(translate, Limits(max_wait_ms=WAIT_MS), Metrics().for_model("test"), workers=2,
                      quiet_ms=QUIET_MS)
    batcher.start()
    seconds = []
    for n in waves:
      async def client(i):
        await asyncio.sleep(0.001 * i)
        return await batcher.submit([f"text {i}"], SEARCH)
      start = time.perf_counter()
      answers = await asyncio.gather(*(client(i) for i in range(n)))
      seconds.append(time.perf_counter() - start)
      assert answers == [[f"text {i}"] for i in range(n)]
    await batcher.stop()
    return seconds

  return sizes, asyncio.run(main())


def test_a_lone_text_goes_at_once():
  sizes, seconds = run_waves([1] * 5)
  assert sizes == [1] * 5
  assert max(seconds) < WAIT_MS / 2000  # never held back for company


def test_after_full_batches_an_idle_batcher_waits_for_the_next_wave():
  """Clients whose answers just went out send their next texts within a few ms: once
  batches have been that large, the first text of a wave waits for them instead of going
  alone, and a wave of 8 decodes as two batches of 4, one on each free decoder, at once."""
  spans = []
  sizes, _ = run_waves([8] * 12, spans)
  # the control: the first wave, its first text alone, the other 7 shared out once it is done
  assert sizes[:3] == [1, 4, 3]
  assert sizes[-6:] == [4] * 6
  for (start_a, end_a), (start_b, end_b) in zip(spans[-6::2], spans[-5::2]):
    assert start_b < end_a and start_a < end_b  # the two halves of a wave overlap
