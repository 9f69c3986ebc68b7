"""`python -m sie serve|_device|_frontend`: argv -> Settings -> the right process main.

`serve` is for people and systemd. `_device` and `_frontend` are how the supervisor starts its
children; they take the settings and their spec as JSON and never read `SIE_*` themselves.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import msgspec

from sie import catalog_report
from sie.settings import HELP, Settings, env_names, environment_notices, load_settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sie", description="sie inference server")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="start the server",
        description="Start the supervisor, its device processes and its HTTP frontends. "
        "Each flag has an environment twin (shown); flags win over the environment.",
    )
    defaults = Settings()
    for field in Settings.__struct_fields__:
        default = getattr(defaults, field)
        serve.add_argument(
            "--" + field.replace("_", "-"),
            dest=field,
            default=None,
            metavar=field.upper(),
            help=f"{HELP[field]} [env {' or '.join(env_names(field))}; default {default}]",
        )
    catalog_report.add_parser(commands)
    for role in ("_device", "_frontend"):
        child = commands.add_parser(role, help=argparse.SUPPRESS)
        child.add_argument("settings")
        child.add_argument("spec")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return _serve({k: v for k, v in vars(args).items() if k != "command"})
    if args.command == "catalog":
        return catalog_report.run(args)
    settings = Settings.decode(args.settings)
    if args.command == "_device":
        from sie.gpu_proc.main import main as device_main
        from sie.specs import DeviceSpec

        return device_main(settings, msgspec.json.decode(args.spec, type=DeviceSpec))
    from sie.frontend.serve import main as frontend_main
    from sie.specs import FrontendSpec

    return frontend_main(settings, msgspec.json.decode(args.spec, type=FrontendSpec))


def _serve(cli: dict[str, object]) -> int:
    from sie.logs import configure_logging
    from sie.model_config import ModelConfigError
    from sie.supervisor.run import Supervisor

    try:
        settings = load_settings(cli, os.environ)
    except ValueError as exc:
        print(f"sie: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format, "supervisor")
    for notice in environment_notices(os.environ):
        logging.getLogger("sie.settings").warning(notice)
    try:
        supervisor = Supervisor(settings)
    except (ModelConfigError, ValueError) as exc:
        print(f"sie: {exc}", file=sys.stderr)
        return 2
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
