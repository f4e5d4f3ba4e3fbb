"""One module per command. Each exposes `run(ctx, ...)` returning a typed result for cli.py to render."""
