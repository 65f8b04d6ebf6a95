"""``python -m lastword`` is the ``lastword`` command."""
from lastword.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
