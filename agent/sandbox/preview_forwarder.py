"""Runs inside a conversation's terminal sandbox (its network namespace), as the user, on
the interpreter's standard library alone: listens on a Unix socket in a directory the
server made and bound into the sandbox, and for each connection reads one request line:

    PORTS\\n      → one JSON line: the TCP ports listening on loopback or any address
    <port>\\n     → ``OK\\n`` and then the bytes of a connection to 127.0.0.1:<port> (or
                   [::1]) relayed both ways, or ``ERR <why>\\n``

    python -I -S preview_forwarder.py SOCKET

One thread, one event loop: a sandbox's process bound counts threads too. The socket is
open to everyone who can reach the directory (the server runs as another uid); only the
server's state directory and this sandbox can.
"""

import asyncio
import json
import os
import sys

MAX_CONNECTIONS = 64
LINE_LIMIT = 16
CONNECT_TIMEOUT = 5.0
LISTEN = "0A"  # /proc/net/tcp's state of a listening socket
LOOPBACK_OR_ANY = ("0100007F", "00000000", "0" * 32, "0" * 24 + "01000000")


def listening_ports() -> list[int]:
    """Ports with a listening socket on 127.0.0.1, ::1 or any address, from this network
    namespace's /proc/net/tcp and tcp6."""
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as table:
                lines = table.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != LISTEN:
                continue
            address, _, port = fields[1].partition(":")
            if address in LOOPBACK_OR_ANY:
                ports.add(int(port, 16))
    return sorted(ports)


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


async def upstream(port: int):
    last = None
    for host in ("127.0.0.1", "::1"):
        try:
            return await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT)
        except (TimeoutError, OSError) as exc:
            last = exc
    raise OSError(f"nothing listens on port {port} ({last})")


async def serve(reader, writer, slots: asyncio.Semaphore) -> None:
    if slots.locked():
        writer.write(b"ERR too many connections\n")
        writer.close()
        return
    async with slots:
        try:
            line = (await asyncio.wait_for(reader.readline(), CONNECT_TIMEOUT))[:LINE_LIMIT]
            request = line.strip().decode("ascii", "replace")
            if request == "PORTS":
                writer.write(json.dumps(listening_ports()).encode() + b"\n")
                await writer.drain()
                return
            if not request.isdigit() or not 1 <= int(request) <= 65535:
                writer.write(b"ERR not a port\n")
                return
            try:
                inner_reader, inner_writer = await upstream(int(request))
            except OSError as exc:
                writer.write(f"ERR {exc}\n".encode())
                return
            writer.write(b"OK\n")
            await asyncio.gather(pump(reader, inner_writer), pump(inner_reader, writer))
            inner_writer.close()
        except (TimeoutError, OSError, ValueError):
            pass
        finally:
            writer.close()


async def main(path: str) -> None:
    slots = asyncio.Semaphore(MAX_CONNECTIONS)
    if os.path.lexists(path):
        os.unlink(path)  # a previous shell's
    server = await asyncio.start_unix_server(lambda r, w: serve(r, w, slots), path)
    os.chmod(path, 0o666)  # the server connects as its own uid
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1]))
    except KeyboardInterrupt:
        sys.exit(0)
