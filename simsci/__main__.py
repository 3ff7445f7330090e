"""``python -m simsci`` is the ``simsci`` command."""

from simsci.cli import main

raise SystemExit(main())
