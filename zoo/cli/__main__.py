"""`python -m zoo.cli ...`: the `zoo` command."""

from zoo.cli.entry import main

main()
