"""Runs inside a user's sandbox (its own network namespace, only loopback), as the user,
on the standard library alone: listens on the sandbox's loopback and relays each
connection to the egress proxy's Unix socket bound into the sandbox (the git forwarder's
relay), then runs the command with ``HTTP_PROXY``/``HTTPS_PROXY`` (and the lower-case
forms) pointing at it. There is no other route out and no DNS: the proxy resolves names.

    python -I -S egress_forwarder.py SOCKET PORT COMMAND...

The exit status is the command's.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from git_forwarder import listen  # noqa: E402


def proxy_environment(port: int, environ: dict[str, str]) -> dict[str, str]:
    """The proxy variables. ``NO_PROXY`` is empty unless the starter set it: a CLI agent's
    sandbox names its own loopback there (its model gateway's port), which is inside the
    sandbox's network namespace and reaches nothing outside it."""
    url = f"http://127.0.0.1:{port}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
    bypass = environ.get("NO_PROXY", "")
    return {name: url for name in names} | {"NO_PROXY": bypass, "no_proxy": bypass}


def main(argv: list[str]) -> int:
    socket_path, port, command = argv[0], int(argv[1]), argv[2:]
    listen(socket_path, port)
    environ = dict(os.environ)
    return subprocess.call(command, env=environ | proxy_environment(port, environ))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
