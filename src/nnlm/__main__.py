"""`python -m nnlm`: the command line, as the `nnlm` script runs it (nnlm.cli.main)."""
from nnlm.cli import main

raise SystemExit(main())
