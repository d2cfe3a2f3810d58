"""``python -m harness``: the run command (:mod:`harness.commands.run`)."""

from harness.commands.run import main

main()
