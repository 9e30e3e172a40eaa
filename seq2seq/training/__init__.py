"""Training: the loss, the optimizer, the pure train and eval steps, the loop.

    loss.py          label-smoothed cross entropy, summed over non-pad tokens
    optimizer.py     Adam(W), warmup and decay, clipping
    train_step.py    train_step / eval_step and their jitted data-parallel forms
    compiling.py     the run's programs compiled on worker threads
    validation.py    loss, accuracy and greedy BLEU during training
    metrics.py       metrics.jsonl and its plot
    distributed.py   multi-process training on JAX's distributed runtime
    auto_recipe.py   `--config auto`: a recipe for the corpus, the minutes and the machine
    trainer.py       the loop: update, log, validate, checkpoint, stop, resume exactly
"""
