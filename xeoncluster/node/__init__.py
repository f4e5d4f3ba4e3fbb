"""Node-side training package: ``python -m xeoncluster.node squad|glue|demo-assets ...``.

Its top holds only the module paths remote command lines run (``__main__``, ``user_script``,
``usage``) and the contracts with the laptop (``rank_env``, ``stack_rules``); the rest is by job:
tasks/, checkpoints/, events/, scripts/, startup/, diagnostics/."""
