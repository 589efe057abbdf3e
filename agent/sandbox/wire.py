"""Messages between the server, its broker and the per-user hosts.

Broker socket (``SOCK_SEQPACKET``): one JSON object per packet, descriptors beside it as
``SCM_RIGHTS``; the packet boundary is the message boundary, so no framing can be forged.
Host socket (``SOCK_STREAM``): a 4-byte length, a JSON header, then ``blob`` bytes of
payload (file contents travel raw, not inside JSON); a frame from the server may carry
descriptors (``SCM_RIGHTS`` with its first bytes), which only the host reads. Both ends
bound what they read: neither trusts the other's lengths.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import struct

MAX_PACKET = 256 * 1024  # a broker request or reply
MAX_FDS = 4
MAX_HEADER = 64 * 1024 * 1024  # a host frame's JSON (a write's content is in its params)
MAX_BLOB = 64 * 1024 * 1024
_LENGTH = struct.Struct(">I")


class WireError(Exception):
    """The peer sent something outside the protocol, or went away."""


def send_packet(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_PACKET:
        raise WireError("message too large")
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def recv_packet(sock: socket.socket) -> tuple[dict, list[int]]:
    """One message and the descriptors that came with it; WireError at EOF or on garbage
    (the descriptors of a bad message are closed, never leaked)."""
    data, fds, flags, _ = socket.recv_fds(sock, MAX_PACKET + 1, MAX_FDS)
    bad = None
    if not data:
        bad = "closed"
    elif len(data) > MAX_PACKET or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        bad = "message too large"
    else:
        try:
            message = json.loads(data)
        except ValueError:
            bad = "not JSON"
        else:
            if not isinstance(message, dict):
                bad = "not an object"
    if bad is not None:
        for fd in fds:
            _close(fd)
        raise WireError(bad)
    return message, fds


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def write_frame(sock: socket.socket, header: dict, blob: bytes = b"",
                fds: tuple[int, ...] = ()) -> None:  # fmt: skip
    if blob:
        header = {**header, "blob": len(blob)}
    data = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    frame = _LENGTH.pack(len(data)) + data + blob
    if fds:  # with the frame's first bytes, where the reader's length read finds them
        sent = socket.send_fds(sock, [frame], list(fds))
        frame = frame[sent:]
    sock.sendall(frame)


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise WireError("closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> tuple[dict, bytes]:
    (size,) = _LENGTH.unpack(_exactly(sock, _LENGTH.size))
    return _rest_of_frame(sock, size)


def read_frame_fds(sock: socket.socket) -> tuple[dict, bytes, list[int]]:
    """A frame and the descriptors sent with it (close-on-exec; the caller's to close;
    closed here when the frame is bad)."""
    received = array.array("i")
    fds: list[int] = []
    try:
        data, ancillary, flags, _ = sock.recvmsg(
            _LENGTH.size, socket.CMSG_SPACE(MAX_FDS * received.itemsize), socket.MSG_CMSG_CLOEXEC
        )
        for level, kind, payload in ancillary:
            if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
                received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
        fds = list(received)
        if not data:
            raise WireError("closed")
        if flags & socket.MSG_CTRUNC:
            raise WireError("too many descriptors")
        (size,) = _LENGTH.unpack(data + _exactly(sock, _LENGTH.size - len(data)))
        header, blob = _rest_of_frame(sock, size)
    except BaseException:
        for fd in fds:
            _close(fd)
        raise
    return header, blob, fds


def _rest_of_frame(sock: socket.socket, size: int) -> tuple[dict, bytes]:
    if size > MAX_HEADER:
        raise WireError("frame too large")
    try:
        header = json.loads(_exactly(sock, size))
    except ValueError:
        raise WireError("not JSON") from None
    if not isinstance(header, dict):
        raise WireError("not an object")
    blob_size = header.get("blob", 0)
    if not isinstance(blob_size, int) or not 0 <= blob_size <= MAX_BLOB:
        raise WireError("bad blob length")
    return header, _exactly(sock, blob_size) if blob_size else b""
