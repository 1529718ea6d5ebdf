"""The option model of ``convert``: the option table, argv parsed into it, the rules and checks run before any work."""
