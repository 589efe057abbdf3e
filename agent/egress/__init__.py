"""The network policy for sandboxes: the egress proxy and what it records."""
