"""``python -m harness.watch``: the command lives in :mod:`harness.commands.watch`."""

if __name__ == "__main__":
    from harness.commands.watch import main

    main()
