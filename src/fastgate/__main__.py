from fastgate.cli import main

raise SystemExit(main())
