#!/usr/bin/env python3
"""s3_fake.py -- a misbehaving S3 endpoint for tests/integration/s3.sh.

Usage: s3_fake.py PORT_FILE [SHARD]

Listens on a free loopback port (written to PORT_FILE once listening) and
answers every GET by the bucket named in its path (path style, no signature
check), so wds's listing must refuse each answer with a clear error:
  notxml   a 200 whose body is not XML
  error    a 200 whose body is S3's <Error> document, not a listing
  notoken  a page with <IsTruncated>true</IsTruncated> and no
           <NextContinuationToken>
  loop     every page truncated with the same token "again"
  page     an empty listing page (nothing matches)
  html     a 403 whose body is an HTML page (no S3 error code to show)
  endless  every page truncated with a fresh token and 1,000 new keys
           a/k-PAGE-I.tar: the listing must stop at the caller's URL limit
           while it lists, not after it holds every key
or behaves as a flaky or stalled endpoint does:
  stall    never answers (the connection stays open): the read timeout
  flaky*   a bucket whose name starts with "flaky" answers its first
           listing request 503 (no Retry-After), later ones with a page
           listing a/k.tar; a GET of a/k.tar is SHARD's bytes
Each request's "BUCKET PATH STATUS" line is appended to PORT_FILE.log.
Standard library only; stopped by SIGTERM.
"""
import http.server
import sys
import threading
import time

PAGE = ('<?xml version="1.0" encoding="UTF-8"?>\n'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        "<Name>b</Name>%s</ListBucketResult>")
ANSWERS = {
    "notxml": (200, "application/xml", "hello, not xml"),
    "error": (200, "application/xml",
              "<Error><Code>InternalError</Code><Message>x</Message></Error>"),
    "notoken": (200, "application/xml", PAGE % (
        "<IsTruncated>true</IsTruncated>"
        "<Contents><Key>a/k.tar</Key></Contents>")),
    "loop": (200, "application/xml", PAGE % (
        "<IsTruncated>true</IsTruncated>"
        "<NextContinuationToken>again</NextContinuationToken>"
        "<Contents><Key>a/k.tar</Key></Contents>")),
    "page": (200, "application/xml", PAGE % "<IsTruncated>false</IsTruncated>"),
    "html": (403, "text/html", "<html><body>Forbidden</body></html>"),
}


LOCK = threading.Lock()
LISTED = {}  # flaky bucket -> listing requests seen
LOG = None
SHARD = b""


def flaky(bucket, path):
    if "?" not in path:  # an object
        if path.split("?")[0] == "/%s/a/k.tar" % bucket and SHARD:
            return 200, "application/x-tar", SHARD
        return 404, "text/plain", b"no"
    with LOCK:
        LISTED[bucket] = LISTED.get(bucket, 0) + 1
        first = LISTED[bucket] == 1
    if first:
        return 503, "text/plain", b"try again"
    return 200, "application/xml", (PAGE % (
        "<IsTruncated>false</IsTruncated>"
        "<Contents><Key>a/k.tar</Key></Contents>")).encode()


def endless(path):
    page = 0
    if "continuation-token=p" in path:
        page = int(path.split("continuation-token=p")[1].split("&")[0]) + 1
    keys = "".join("<Contents><Key>a/k-%06d-%04d.tar</Key></Contents>" % (page, i)
                   for i in range(1000))
    return 200, "application/xml", (PAGE % (
        "<IsTruncated>true</IsTruncated>"
        "<NextContinuationToken>p%d</NextContinuationToken>%s" % (page, keys))).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        bucket = self.path.lstrip("/").split("/")[0].split("?")[0]
        if bucket == "stall":
            self.log_line(bucket, "stalled")
            time.sleep(3600)  # the client gives up; SIGTERM ends us
            return
        if bucket.startswith("flaky"):
            status, ctype, data = flaky(bucket, self.path)
        elif bucket == "endless":
            status, ctype, data = endless(self.path)
        else:
            status, ctype, body = ANSWERS.get(bucket, (404, "text/plain", "no"))
            data = body.encode()
        self.log_line(bucket, status)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_line(self, bucket, status):
        with LOCK, open(LOG, "a") as f:
            f.write("%s %s %s\n" % (bucket, self.path, status))

    def log_message(self, *args):
        pass


def main():
    global LOG, SHARD
    LOG = sys.argv[1] + ".log"
    if len(sys.argv) > 2:
        with open(sys.argv[2], "rb") as f:
            SHARD = f.read()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
