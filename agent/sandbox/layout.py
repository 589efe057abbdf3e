"""Names reserved in a user's workspace root (light: the file host imports it at start)."""

HOMES = ".harness-cli"  # the CLI agents' homes, hidden from every sandbox but its own
