"""`seq2seq-serve`: the HTTP server (`seq2seq.serving.http_server`) from the command line.

    seq2seq-serve --workdir RUN | --engine ctranslate2 --model EXPORT_DIR
    seq2seq-serve --workdir RUN --workdir RUN2 ... | --models DIR    several models
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import threading
from pathlib import Path

from seq2seq import runtime
from seq2seq.cli import parsing
from seq2seq.rundir import checkpoint, ctranslate2_model
from seq2seq.serving import models
from seq2seq.serving.http_api import Limits, check_defaults
from seq2seq.serving.http_server import access_log, create_app, follow_checkpoint, log


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description="HTTP server: seq2seq-serve --workdir RUN | --engine ctranslate2 --model EXPORT_DIR.",
                              formatter_class=parsing.HelpFormatter)
  parsing.add_model_flags(p, models=True, required=False)
  p.add_argument("--models", metavar="DIR", help="serve every run and CTranslate2 export in "
                 "DIR (each folder's engine by what it holds), as LibreTranslate serves its "
                 "packages folder; with --workdir, after those")
  p.add_argument("--skip-broken", action="store_true", help="with several models: serve "
                 "the others when one cannot be read (a warning names it); default: stop")
  parsing.add_search_flags(p, batching=False)
  parsing.add_glossary_flag(p)
  p.add_argument("--host", default="127.0.0.1", help="address to listen on")
  p.add_argument("--port", type=int, default=8080, help="port to listen on")
  p.add_argument("--reload-every", type=float, default=0, metavar="SECONDS",
                 help="JAX engine, --checkpoint best, latest, averaged or ema: every SECONDS, "
                 "serve the newest complete checkpoint of that kind (a run that is "
                 "training writes new ones); 0: keep the one loaded at start")
  p.add_argument("--api-keys", metavar="FILE", help="require an API key, one per line of "
                 "FILE: LibreTranslate's api_key field, or Authorization: Bearer KEY on the "
                 "native API (403 without a valid one); default: open")
  p.add_argument("--require-api-key", action="store_true",
                 help="with --api-keys: refuse requests without a key (400), as "
                 "LibreTranslate's operators require one; without it a request may come "
                 "without a key, and one with a key must have a valid one (403)")
  p.add_argument("--cors-origins", default="*", metavar="ORIGINS",
                 help="comma-separated origins whose pages may call the server from a "
                 "browser (CORS); * any (LibreTranslate's default); '' none")
  p.add_argument("--decoders", type=int, default=None, help="batches of requests decoded "
                 "at once per model, each on a thread of its own; each batch holds up to "
                 "--max-batch sentences (default: the engine's own: the JAX run's "
                 "decode.workers, CTranslate2's parallel workers of --ct2-threads)")
  for f in dataclasses.fields(Limits):
    p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default,
                   help=f"limit: {f.metadata['help']}")
  return p


def main(argv=None) -> None:
  p = parser()
  args = p.parse_args(argv)
  parsing.check_search_flags(p, args)
  glossary = parsing.read_glossary(p, args)
  limits = Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)})
  if min(limits.max_batch, limits.max_texts, limits.max_beam, limits.max_queue,
         limits.max_body, args.decoders or 1) < 1 or limits.timeout_s <= 0:
    p.error("--max-batch, --max-texts, --max-beam, --max-queue, --max-body, --decoders and "
            "--timeout-s must be positive")
  try:
    import prometheus_client  # noqa: F401
    import uvicorn
  except ImportError:
    sys.exit("error: seq2seq-serve needs starlette, uvicorn and prometheus-client: "
             "pip install 'seq2seq-haiku[serve]'")
  runtime.setup_cli_logging()  # diagnostics on stderr; the XLA cache makes restarts fast
  to_stdout = logging.StreamHandler(sys.stdout)  # the access log: JSON lines on stdout
  to_stdout.setFormatter(logging.Formatter("%(message)s"))
  access_log.addHandler(to_stdout)
  access_log.propagate = False

  if args.reload_every < 0:
    p.error("--reload-every must be 0 (never) or a number of seconds")
  if args.reload_every and (args.engine != "jax" or args.checkpoint not in checkpoint.KINDS):
    p.error("--reload-every needs the JAX engine and --checkpoint "
            f"{', '.join(checkpoint.KINDS)}")
  api_keys = None
  if args.api_keys:
    try:
      lines = open(args.api_keys, encoding="utf-8").read().splitlines()
    except OSError as e:
      sys.exit(f"error: --api-keys {args.api_keys}: {e.strerror}")
    api_keys = frozenset(x.strip() for x in lines if x.strip() and not x.strip().startswith("#"))
    if not api_keys:
      sys.exit(f"error: --api-keys {args.api_keys} holds no key (one per line)")
  if args.require_api_key and not args.api_keys:
    p.error("--require-api-key needs --api-keys FILE")
  parsing.resolve_model(p, args)  # after the usage checks: a Hub model downloads here
  folders = [(str(w), args.engine) for w in args.workdir or []]
  if args.models:
    try:
      folders += [(str(f), models.engine_kind(f)) for f in models.model_folders(args.models)]
    except ValueError as e:
      sys.exit(f"error: {e}")
  if not folders:
    p.error("--workdir RUN, --model PATH|ORG/NAME or --models DIR is required")
  served = []  # (name, folder, engine kind, config)
  for folder, kind in folders:
    try:  # a wrong directory is an error now, not a failed /health
      cfg = ctranslate2_model.model_config(folder, kind)
      check_defaults(  # the defaults in the same ranges as a request's own settings
          args.beam if args.beam is not None else cfg.decode.beam_size,
          args.alpha if args.alpha is not None else cfg.decode.alpha, limits,
          "--beam" if args.beam is not None else f"{folder}: the run's decode.beam_size",
          "--alpha" if args.alpha is not None else f"{folder}: the run's decode.alpha")
    except (checkpoint.CheckpointError, ValueError, OSError) as e:
      if not args.skip_broken or len(folders) == 1:
        sys.exit(f"error: {e}")
      log.warning("--skip-broken: not serving %s: %s", folder, e)
      continue
    # /health names each model (its folder's or Hub name), never this machine's paths
    name = Path(folder).resolve().name
    names = [n for n, *_ in served]
    name = name if name not in names else f"{name}-{len(served) + 1}"
    served.append((name, folder, kind))
  if not served:
    sys.exit("error: no model could be read")
  if args.reload_every and len(served) > 1:
    p.error("--reload-every follows one model's checkpoints: give one --workdir")
  shown = args.model[0] if args.from_hub else served[0][0]
  info = {"engine": args.engine, "model": shown, "checkpoint": args.checkpoint}

  def load():  # the app warms them (`TranslationService.warm_up`)
    engines = []
    for name, folder, kind in served:
      engine, _ = parsing.load_engine(argparse.Namespace(**{**vars(args), "workdir": folder,
                                                            "engine": kind}))
      if args.reload_every:
        follow_checkpoint(engine, args.reload_every, info, threading.Event())
      engines.append((name, engine))
    return engines

  logging.getLogger("uvicorn").setLevel(logging.WARNING)
  logging.getLogger("uvicorn.access").disabled = True  # ours is seq2seq.serve.access
  uvicorn.run(create_app(None, limits, info, load=load, workers=args.decoders,
                         api_keys=api_keys, require_key=args.require_api_key,
                         cors_origins=[o.strip() for o in args.cors_origins.split(",")
                                       if o.strip()], glossary=glossary),
              host=args.host, port=args.port, log_config=None,  # keep this logging setup
              timeout_graceful_shutdown=max(1, int(limits.timeout_s)),
              limit_concurrency=limits.max_connections, timeout_keep_alive=5)


if __name__ == "__main__":
  main()
