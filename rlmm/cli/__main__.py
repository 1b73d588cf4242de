"""``python -m rlmm.cli``: the `rlmm` command."""

from rlmm.cli import main

main()
