from cbi1kit.cli import main

raise SystemExit(main())
