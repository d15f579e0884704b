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


def serve(client):
    note("connection")
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
