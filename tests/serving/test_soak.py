"""bench/soak.py's short version on the tiny run: requests arriving faster than the server
answers, open loop; no 5xx, every excess request a 429 with Retry-After."""

import json
import subprocess
import sys

from helpers import ROOT, SAMPLE


def test_an_overloaded_server_answers_429_with_retry_after_and_no_5xx(trained_run):
  done = subprocess.run(
      [sys.executable, str(ROOT / "bench" / "soak.py"), "--workdir", str(trained_run),
       "--src", str(SAMPLE / "test.en"), "--minutes", "0.25", "--capacity-seconds", "5",
       "--overload", "3", "--max-queue", "16"],
      capture_output=True, text=True, timeout=600, cwd=ROOT)
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.loads(done.stdout.strip().splitlines()[-1])
  assert result["server_errors"] == 0 and result["429_without_retry_after"] == 0, result
  assert result["statuses"].get("200", 0) > 0 and result["statuses"].get("429", 0) > 0, result
  assert set(result["statuses"]) <= {"200", "429"}, result
