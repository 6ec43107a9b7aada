from nnlm.cli import main

raise SystemExit(main())
