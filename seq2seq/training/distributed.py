"""Multi-process training on JAX's distributed runtime: joining, agreeing, gathering.

One process per host (or per GPU) runs the same program; together they hold one global
"data" mesh over every device of the cluster. Each process builds only its own rows of a
global batch (`global_batch`), process 0 alone writes the run's files, and decisions
that could differ between processes (a wall-clock time limit) are taken by process 0 and
broadcast (`agree`). With one process every function here is a no-op or the identity.

Launching: `train.py --coordinator-address HOST:PORT --num-processes N --process-id I`
on each process, or without flags where JAX detects the cluster itself (SLURM, Open MPI,
Cloud TPU, Kubernetes); README.md ("Scaling out") has the commands.
"""

from __future__ import annotations

import os
from typing import Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils


def cluster_in_environment() -> bool:
  """Whether the environment describes a multi-process job that JAX can join by itself."""
  env = os.environ
  return bool(env.get("JAX_COORDINATOR_ADDRESS")) or any(
      env.get(name, "1") not in ("", "1") for name in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"))


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None,
               local_device_ids: Sequence[int] | None = None) -> None:
  """Joins the cluster: with explicit arguments (all three), or by JAX's detection when the
  environment describes a cluster; otherwise stays a single process."""
  given = (coordinator_address, num_processes, process_id)
  if any(v is not None for v in given):
    if any(v is None for v in given):
      raise ValueError("a multi-process run needs all of --coordinator-address, "
                       "--num-processes and --process-id")
    if not 0 <= process_id < num_processes:
      raise ValueError(f"--process-id {process_id} is not in [0, {num_processes})")
    jax.distributed.initialize(coordinator_address, num_processes, process_id,
                               local_device_ids=local_device_ids)
  elif cluster_in_environment():
    jax.distributed.initialize(local_device_ids=local_device_ids)


def process_index() -> int:
  return jax.process_index()


def process_count() -> int:
  return jax.process_count()


def is_primary() -> bool:
  """Process 0: the one that trains the tokenizer and writes logs, metrics and cards."""
  return jax.process_index() == 0


def barrier(name: str) -> None:
  """Waits until every process has reached the barrier `name`."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def agree(flag: bool) -> bool:
  """Process 0's `flag`, on every process."""
  if jax.process_count() == 1:
    return flag
  return bool(multihost_utils.broadcast_one_to_all(np.asarray(flag, np.bool_)))


def agree_int(value: int) -> int:
  """Process 0's integer `value`, on every process."""
  if jax.process_count() == 1:
    return int(value)
  return int(multihost_utils.broadcast_one_to_all(np.asarray(value, np.int64)))


def gather_texts(texts: Sequence[str]) -> list[list[str]]:
  """Every process's list of strings, indexed by process (all processes call this)."""
  if jax.process_count() == 1:
    return [list(texts)]
  encoded = [t.encode("utf-8") for t in texts]
  sizes = np.array([len(b) for b in encoded], np.int64)
  counts = multihost_utils.process_allgather(np.array([len(encoded), sizes.sum()], np.int64))
  longest_list, longest_bytes = int(counts[:, 0].max()), int(counts[:, 1].max())
  padded_sizes = np.zeros(longest_list, np.int64)
  padded_sizes[:len(sizes)] = sizes
  blob = np.zeros(max(longest_bytes, 1), np.uint8)
  joined = b"".join(encoded)
  blob[:len(joined)] = np.frombuffer(joined, np.uint8)
  all_sizes = multihost_utils.process_allgather(padded_sizes)
  all_blobs = multihost_utils.process_allgather(blob)
  result = []
  for p, (n, _) in enumerate(counts):
    ends = np.cumsum(all_sizes[p][:n])
    data = all_blobs[p].tobytes()
    result.append([data[a:b].decode("utf-8") for a, b in zip(np.r_[0, ends[:-1]], ends)])
  return result


def global_batch(local_tree, sharding, global_rows: int):
  """A pytree of this process's rows (numpy, leading axis = rows) as global arrays of
  `global_rows` rows, split over the mesh by `sharding`."""
  def put(x):
    return jax.make_array_from_process_local_data(sharding, x, (global_rows, *x.shape[1:]))
  return jax.tree_util.tree_map(put, local_tree)


def local_copy(tree):
  """A replicated pytree of global arrays as arrays on this process's first device, for
  work that each process does on its own (decoding its share of the validation set)."""
  if jax.process_count() == 1:
    return tree
  return jax.tree_util.tree_map(lambda x: x.addressable_data(0), tree)
