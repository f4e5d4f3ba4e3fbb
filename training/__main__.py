"""`python -m training squad|glue|demo-assets ...`"""

from __future__ import annotations

import sys

from .errors import TrainingError


def main(argv: list[str] | None = None) -> int:
    import os

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
