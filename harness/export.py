"""``python -m harness.export``: the command lives in :mod:`harness.commands.export`."""

if __name__ == "__main__":
    from harness.commands.export import main

    main()
