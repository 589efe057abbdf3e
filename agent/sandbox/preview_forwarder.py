"""Runs inside a conversation's terminal sandbox (its network namespace), as the user, on
the interpreter's standard library alone: listens on a Unix socket in a directory the
server made and bound into the sandbox, and for each connection reads one request line:

    PORTS\\n      → one JSON line: the TCP ports listening on loopback or any address
    <port>\\n     → ``OK\\n`` and then the bytes of a connection to 127.0.0.1:<port> (or
                   [::1]) relayed both ways, or ``ERR <why>\\n``
    START <n>\\n  → then <n> bytes of JSON ``{"command": ...}``: the command starts in the
                   background (its own session, output kept in memory: the last
                   ``OUTPUT_KEEP`` bytes); one JSON line answers
    JOBS\\n, OUTPUT <job>\\n, STOP <job>\\n → one JSON line (the jobs; one job with the
                   tail of its output; one job after it was told to stop)

    python -I -S preview_forwarder.py SOCKET

One thread, one event loop: a sandbox's process bound counts threads too. The socket is
open to everyone who can reach the directory (the server runs as another uid); only the
server's state directory and this sandbox can.
"""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys

MAX_CONNECTIONS = 64
LINE_LIMIT = 32
JOB_VERBS = ("START", "JOBS", "OUTPUT", "STOP")
MAX_JOBS = 16  # kept at once; a finished one makes room for a new one
COMMAND_LIMIT = 65536
OUTPUT_KEEP = 32768  # the tail of each job's output kept
STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL
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


class Job:
    def __init__(self, number: int, command: str, process: subprocess.Popen):
        self.number, self.command, self.process = number, command, process
        self.output = bytearray()
        self.dropped = 0  # bytes of output older than the tail kept
        self.exit: int | None = None
        self.reading = True  # its output pipe is open: the leader or a child of it holds it

    @property
    def live(self) -> bool:
        """Its leader runs, or what it left behind still holds its output (``cmd &`` and
        exit): STOP still signals its group, and it keeps its place among the jobs."""
        return self.exit is None or self.reading

    def state(self, output: bool = False) -> dict:
        found = {"job": self.number, "pid": self.process.pid, "command": self.command[:200],
                 "running": self.exit is None, "exit_code": self.exit}  # fmt: skip
        if output:
            found["output"] = self.output.decode("utf-8", "replace")
            found["dropped"] = self.dropped
        return found


class Jobs:
    """Commands started in the background: each in a session of its own (its process
    group is what STOP signals), stdin from /dev/null, stdout and stderr one pipe read by
    this loop (no thread: pidfds say when one exits). A job whose leader exited while the
    processes it started still hold its output counts as live: STOP still reaches them,
    and it is not dropped to make room (its pipe stays bounded by ``MAX_JOBS``)."""

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.next = 1

    async def answer(self, verb: str, argument: str, reader) -> dict | list:
        if verb == "JOBS":
            return [job.state() for job in self.jobs.values()]
        if verb == "START":
            if not argument.isdigit() or int(argument) > COMMAND_LIMIT:
                return {"error": f"a command is at most {COMMAND_LIMIT} bytes"}
            try:
                payload = await asyncio.wait_for(reader.readexactly(int(argument)),
                                                 CONNECT_TIMEOUT)  # fmt: skip
                command = json.loads(payload).get("command")
            except (EOFError, ValueError, AttributeError):
                command = None
            if not isinstance(command, str) or not command.strip():
                return {"error": 'START needs {"command": "..."}'}
            return self.start(command)
        job = self.jobs.get(int(argument)) if argument.isdigit() else None
        if job is None:
            return {"error": f"no job {argument} in this sandbox (it may have been restarted)"}
        if verb == "STOP" and job.live:
            signal_group(job.process.pid, signal.SIGTERM)
            asyncio.get_running_loop().call_later(STOP_GRACE, signal_group, job.process.pid,
                                                  signal.SIGKILL)  # fmt: skip
        return job.state(output=verb == "OUTPUT")

    def start(self, command: str) -> dict:
        if len(self.jobs) >= MAX_JOBS:
            done = [n for n, job in self.jobs.items() if not job.live]
            if not done:
                return {
                    "error": f"{MAX_JOBS} background jobs are running (or left "
                    "processes running): stop one first"
                }
            del self.jobs[done[0]]
        try:
            process = subprocess.Popen(["/bin/bash", "-c", command], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       start_new_session=True,
                                       env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        except OSError as exc:
            return {"error": f"the command could not start: {exc}"}
        job = Job(self.next, command, process)
        self.jobs[job.number] = job
        self.next += 1
        loop = asyncio.get_running_loop()
        out = process.stdout.fileno()
        os.set_blocking(out, False)
        loop.add_reader(out, self._read, job, out)
        pidfd = os.pidfd_open(process.pid)
        loop.add_reader(pidfd, self._ended, job, pidfd)
        return job.state()

    def _read(self, job: Job, fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(fd)
            job.process.stdout.close()
            job.reading = False
            return
        job.output += data
        extra = len(job.output) - OUTPUT_KEEP
        if extra > 0:
            del job.output[:extra]
            job.dropped += extra

    def _ended(self, job: Job, pidfd: int) -> None:
        asyncio.get_running_loop().remove_reader(pidfd)
        os.close(pidfd)
        job.exit = job.process.wait()
        # What the leader wrote is in the pipe now: read to its end here, so that a job
        # nothing else holds the output of is seen done at once, not a turn later.
        # (A pipe holds at most 1 MB: 16 reads, however fast a child left behind writes.)
        for _ in range(16):
            if not job.reading:
                break
            before = job.dropped + len(job.output)
            self._read(job, job.process.stdout.fileno())
            if job.reading and job.dropped + len(job.output) == before:
                break  # empty for now: something else holds it


def signal_group(pid: int, number: int) -> None:
    with contextlib.suppress(OSError):  # it ended already
        os.killpg(pid, number)


async def serve(reader, writer, slots: asyncio.Semaphore, jobs: Jobs) -> None:
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
            verb, _, argument = request.partition(" ")
            if verb in JOB_VERBS:
                answer = await jobs.answer(verb, argument, reader)
                writer.write(json.dumps(answer).encode() + b"\n")
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
    jobs = Jobs()
    ready = path + ".new"
    for stale in (path, ready):  # a previous shell's
        if os.path.lexists(stale):
            os.unlink(stale)
    # Made under another name and renamed once it listens, so whoever sees the socket can
    # connect at once; made open to the server (which connects as its own uid) by the umask
    # it is made under, not by a chmod of its path (a chmod follows a link put there).
    # The umask is the process's: put back before anything else runs here (the jobs).
    umask = os.umask(0o111)
    try:
        server = await asyncio.start_unix_server(lambda r, w: serve(r, w, slots, jobs), ready)
    finally:
        os.umask(umask)
    os.rename(ready, path)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1]))
    except KeyboardInterrupt:
        sys.exit(0)
