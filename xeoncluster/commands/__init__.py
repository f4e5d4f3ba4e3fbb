"""One module per command, or one package per command that needs several (up/, train/, storage/). Each
exposes `run(ctx, ...)` returning a typed result for cli/ to render."""
