"""``python -m harness.diagnose``: the command lives in :mod:`harness.commands.diagnose`."""

if __name__ == "__main__":
    from harness.commands.diagnose import main

    main()
