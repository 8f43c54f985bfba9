from playground.cli import main

raise SystemExit(main())
