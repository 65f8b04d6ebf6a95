"""The ``lastword`` command: ``serve`` runs the service, ``demo`` plays a scripted child."""

from __future__ import annotations

import argparse
import sys

from app.settings import Settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.main import create_app

    settings = Settings()
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = settings.model_copy(update=overrides)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=10,
    )
    return 0


def _demo(args: argparse.Namespace) -> int:
    from app.demo import SCENARIOS, run_scenario

    if args.scenario not in SCENARIOS:
        print(f"unknown scenario {args.scenario!r}; choose one of: {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    run_id = run_scenario(args.scenario, args.url, run_id=args.run_id)
    print(run_id)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lastword", description="Keeps a subagent's last word.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="run the service",
        description="Run the HTTP service. Configuration comes from LASTWORD_* variables.",
        epilog="example: LASTWORD_PORT=8080 lastword serve",
    )
    serve.add_argument("--host", help="overrides LASTWORD_HOST")
    serve.add_argument("--port", type=int, help="overrides LASTWORD_PORT")
    serve.set_defaults(handler=_serve)

    from app.demo import SCENARIOS

    demo = commands.add_parser(
        "demo",
        help="play a scripted child run against a running service",
        description="Drive a running service over HTTP as a child runtime would; prints the run id.",
        epilog="example: lastword demo max-tokens-partial --url http://127.0.0.1:8000",
    )
    demo.add_argument("scenario", choices=sorted(SCENARIOS), metavar="SCENARIO",
                      help="one of: " + ", ".join(sorted(SCENARIOS)))
    demo.add_argument("--url", default="http://127.0.0.1:8000", help="the service's base URL")
    demo.add_argument("--run-id", help="use this run id instead of a generated one")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
