"""Privilege separation: a small root broker, the unprivileged server's client of it, and the
per-user processes the broker starts (docs/SECURITY.md, "Privilege separation").

A server started as root starts its broker, then drops to the service user before it serves
a request (``drop``). From then on every act that needs root goes through the broker's
narrow protocol (``wire``, ``broker``), and everything that touches a user's files runs as
that user, inside the sandbox (``host``), so the kernel refuses what code forgets.
"""
