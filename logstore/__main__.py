"""`python -m logstore`: the same entry point as the `logstore` console script."""
from logstore.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
