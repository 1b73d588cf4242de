"""``python -m rlmm.cli``: the `rlmm` command."""

from rlmm.cli import main

main(prog_name="rlmm")  # its messages name the command a user types
