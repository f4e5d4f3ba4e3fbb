"""`python -m xeoncluster.node.warm_start ADDRESS`: a node's warm rank server (started by the first rank)."""
from __future__ import annotations

import sys

from xeoncluster.node.warm_start.server import serve

if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
