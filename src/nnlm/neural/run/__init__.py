"""A training run, in the order it happens: typed options (config.py) -> the run directory and its resolved
configuration (run_config.py, checkpoint.py) -> the one setup every trainer shares (pipeline.py) -> the loop
(train.py) driving a trainer (trainer.py) batch by batch (batches.py, optim.py) under a recipe (recipes.py,
schedules.py) until it stops (stop_signals.py); tune.py searches recipes.

(No imports here: the command-line parser reads config.py without torch.)"""
