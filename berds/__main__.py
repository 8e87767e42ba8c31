"""``python -m berds``: the same command line as ``berds``."""

from berds.cli import main

if __name__ == "__main__":
    main()
