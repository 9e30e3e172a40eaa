"""The numerics policy: how this machine computes the model's products, as one object.

Machine-dependent choices are made here and nowhere else. `resolve` turns the config's
`model.matmul_dtype` ("float32", "bfloat16" or "auto") into a `Numerics` once per process
and use (training or decoding), logs the choice once with its reason, and the trainer
saves it with the run (`config.json`). The model takes that one object; each of its
methods has the plain JAX meaning its docstring gives, and the XLA:CPU arrangements that
compute it faster (or alike at any batch size) live in `ops`, each tested against that
meaning (tests/numerics/). The backend checks live here and in `ops`, not in the model.

    numerics/policy.py       `Numerics` and `resolve`: the choice, made once, as one object
    numerics/ops.py          the XLA:CPU-shaped operations
    numerics/speed_probe.py  which operand dtype this machine multiplies faster, cached
    numerics/row_select.py   arg-max, top-k and log-sum-exp over long rows (the searches)
"""

from seq2seq.numerics.policy import LEAST_ROWS, USES, Numerics, clear_cache, resolve

__all__ = ["LEAST_ROWS", "USES", "Numerics", "clear_cache", "resolve"]
