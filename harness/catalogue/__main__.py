"""``python -m harness.catalogue``: the command (:mod:`harness.commands.catalogue`)."""

from harness.commands.catalogue import main

main()
