"""`python -m zoo.cli ...`: the `zoo` command."""
from zoo.cli.main import main

main()
