#!/usr/bin/env python3
"""http_proxy.py -- a fault-injecting TCP relay for tests/integration/http.sh.

Usage: http_proxy.py MODE UPSTREAM_PORT PORT_FILE [SEED]

Listens on a free loopback port (written to PORT_FILE once listening) and
relays every connection to 127.0.0.1:UPSTREAM_PORT, byte for byte, except:
  cut    each response stream is cut (both sockets closed) after a random
         number of bytes (seeded; 2 KiB .. 120 KiB), so transfers break at
         random offsets and clients must resume them;
  stall  the response stream stops after 2000 bytes and the connection is
         held open, silent, until the client goes away;
  503    no upstream: every request is answered "503 Service Unavailable".
The faults libcurl reports as a complete transfer, or that end a response
with no byte of its body; every other request (the 1st, 3rd, ...) is hit,
the others are relayed whole on a kept-alive connection:
  accept   the connection is closed at once, nothing read;
  status   only the response's status line is sent, then close;
  headers  only the response's headers (Content-Length kept), then close:
           a cut at byte 0 of the body;
  nolen    Content-Length is dropped from every response, whose body then
           ends at close (HTTP/1.1 allows it); hit responses are cut at a
           random offset (0 included), so only a Range request at the end
           can tell the cut from the end.
Counts connections and cuts in PORT_FILE.log (one line per event).
Standard library only; stopped by SIGTERM.
"""
import random
import socket
import sys
import threading

mode, upstream, port_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
lock = threading.Lock()
log = open(port_file + ".log", "a", buffering=1)


def note(line):
    with lock:
        log.write(line + "\n")


def pump(src, dst, budget):
    """Copies src to dst; stops after budget bytes (None: no limit)."""
    sent = 0
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if budget is not None and sent + len(data) >= budget:
                dst.sendall(data[: budget - sent])
                return True
            dst.sendall(data)
            sent += len(data)
    except OSError:
        pass
    return False


def close(*socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


turns = [0]


def hit():
    """Every other request (or connection, for accept) is hit."""
    with lock:
        turns[0] += 1
        return turns[0] % 2 == 1


def read_head(sock, buf):
    """Reads until the end of a header block: (head, rest), or (None, b"")."""
    while b"\r\n\r\n" not in buf:
        d = sock.recv(65536)
        if not d:
            return None, b""
        buf += d
    i = buf.index(b"\r\n\r\n") + 4
    return buf[:i], buf[i:]


def relay_http(client):
    """The HTTP-aware modes: one upstream connection per request."""
    if mode == "accept" and hit():
        note("cut accept")
        return
    pending = b""
    while True:
        req, pending = read_head(client, pending)
        if req is None:
            return
        up = socket.create_connection(("127.0.0.1", upstream))
        try:
            up.sendall(req)
            head, body = read_head(up, b"")
            if head is None:
                return
            length = None
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            while length is not None and len(body) < length:
                d = up.recv(65536)
                if not d:
                    break
                body += d
        finally:
            close(up)
        if mode == "nolen":
            head = b"\r\n".join(
                line for line in head.split(b"\r\n")
                if not line.lower().startswith(b"content-length:"))
        if mode != "accept" and hit():
            if mode == "status":
                client.sendall(head.split(b"\r\n", 1)[0] + b"\r\n")
            elif mode == "headers":
                client.sendall(head)
            else:
                with lock:
                    n = rng.randint(0, len(body))
                client.sendall(head + body[:n])
            note("cut %s" % mode)
            return
        client.sendall(head + body)
        if mode == "nolen":
            return  # the body ends at close


def serve(client):
    note("connection")
    if mode in ("accept", "status", "headers", "nolen"):
        try:
            relay_http(client)
        except OSError:
            pass
        finally:
            close(client)
        return
    if mode == "503":
        try:
            while True:
                req = b""
                while b"\r\n\r\n" not in req:
                    d = client.recv(65536)
                    if not d:
                        return
                    req += d
                body = b"<html><body>busy</body></html>"
                client.sendall(b"HTTP/1.1 503 Service Unavailable\r\n"
                               b"Content-Type: text/html\r\nContent-Length: "
                               + str(len(body)).encode() + b"\r\n\r\n" + body)
        except OSError:
            return
        finally:
            close(client)
    up = socket.create_connection(("127.0.0.1", upstream))
    threading.Thread(target=pump, args=(client, up, None), daemon=True).start()
    if mode == "cut":
        with lock:
            budget = rng.randint(2048, 120 * 1024)
        if pump(up, client, budget):
            note("cut %d" % budget)
        close(client, up)
    elif mode == "stall":
        pump(up, client, 2000)
        note("stall")
        try:
            while client.recv(65536):
                pass
        except OSError:
            pass
        close(client, up)
    else:
        pump(up, client, None)
        close(client, up)


def main():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(srv.getsockname()[1]))
    import os
    os.rename(port_file + ".tmp", port_file)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


main()
