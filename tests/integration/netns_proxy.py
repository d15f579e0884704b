#!/usr/bin/env python3
"""netns_proxy.py -- a slow, lossy TCP relay for tests/integration/netns.sh.

Usage: netns_proxy.py LISTEN_ADDR PORT UPSTREAM_PORT LOG SEED

The kernel of the test machines has no netem qdisc, so the network's
latency and loss are made here, in user space, between the nodes and the
HTTP server (in the server's namespace): every connection accepted on
LISTEN_ADDR:PORT is relayed to 127.0.0.1:UPSTREAM_PORT, with
  delay  40 ms before the first byte goes upstream (a round trip), and
         3 ms per relayed chunk of at most 16 KiB of the response;
  drop   one connection in 6 closed at once, nothing read (a connection
         lost before its request);
  cut    one response stream in 2 cut (both sockets closed) after a random
         number of bytes (16 KiB .. 256 KiB), so transfers break at random
         offsets and clients must resume them (Range).
The faults are drawn from one random.Random(SEED) in the order the
connections arrive. Each event is a line of LOG ("conn", "drop", "cut N").
Standard library only; stopped by SIGTERM.
"""
import random
import socket
import sys
import threading
import time

addr, port, upstream, log_path, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
rng = random.Random(seed)
lock = threading.Lock()
log = open(log_path, "a", buffering=1)


def note(line):
    with lock:
        log.write(line + "\n")


def close(*socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def upward(client, up):
    """Requests, as they come (their end ends the upstream's writes)."""
    try:
        while True:
            d = client.recv(65536)
            if not d:
                break
            up.sendall(d)
    except OSError:
        pass
    try:
        up.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def handle(client):
    with lock:
        drop = rng.random() < 1 / 6
        budget = rng.randrange(16 << 10, 256 << 10) if rng.random() < 0.5 else None
    if drop:
        note("drop")
        close(client)
        return
    note("conn")
    time.sleep(0.04)
    try:
        up = socket.create_connection(("127.0.0.1", upstream))
    except OSError:
        close(client)
        return
    threading.Thread(target=upward, args=(client, up), daemon=True).start()
    sent = 0
    try:
        while True:
            d = up.recv(16384)
            if not d:
                break
            time.sleep(0.003)
            if budget is not None and sent + len(d) >= budget:
                client.sendall(d[: budget - sent])
                note(f"cut {budget}")
                break
            client.sendall(d)
            sent += len(d)
    except OSError:
        pass
    close(client, up)


def main():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, port))
    srv.listen(64)
    note("listening")
    while True:
        c, _ = srv.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


main()
