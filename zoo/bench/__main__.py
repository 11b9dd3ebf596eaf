"""`python -m zoo.bench SPEC.json OUT.json`: one bench in this process (the worker of the comparisons)."""

import sys

import torch  # noqa: F401  (fail early in the worker, not in the parent)

from zoo.bench.run import main

sys.exit(main(sys.argv[1:]))
