"""`python -m gen_agent` runs the `gen-agent` command line."""

from gen_agent.cli import main

main()
