"""`python -m training squad|glue|demo-assets ...`"""

from __future__ import annotations

import json
import os
import sys

from .errors import TrainingError


def load_env_file(environ: os._Environ[str] | dict[str, str]) -> None:
    """`xeoncluster train --env` values: read from a 0600 file, never from argv (visible to `ps`).
    Before anything imports torch, so thread settings among them still take effect."""
    path = environ.get("XC_ENV_FILE")
    if path:
        with open(path) as handle:
            environ.update({str(k): str(v) for k, v in json.load(handle).items()})


def main(argv: list[str] | None = None) -> int:
    load_env_file(os.environ)

    from . import cli
    from .distributed import from_env
    from .labels import label_streams

    info = from_env(os.environ)
    if info.world_size > 1:
        label_streams(info.rank)

    try:
        args, overrides = cli.parse(argv)
        if args.command == "demo-assets":
            from .demo_assets import ensure_demo_assets

            built = ensure_demo_assets(args.out, args.seed)
            print(f"training: demo assets {'built' if built else 'already complete'} in {args.out}")
            return 0
        from .config import from_args
        from .runner import run

        return run(from_args(args, overrides))
    except TrainingError as exc:
        print(f"training: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("training: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
