"""`python -m xeoncluster`: the same command line as the `xeoncluster` console script."""
from xeoncluster.cli import main

if __name__ == "__main__":
    main()
