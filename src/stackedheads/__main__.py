"""``python -m stackedheads``: the CLI without installing the package (e.g. a GPU host with
``PYTHONPATH=src`` and torch already there)."""

from stackedheads.cli import main

if __name__ == "__main__":
    main()
