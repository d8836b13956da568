#!/usr/bin/env python3
"""HTTP server of the update test (image/test-update.sh): serves the folder
ROOT on 127.0.0.1:PORT, one line per request in LOG ("GET PATH STATUS BYTES").
Files named *.root.raw.xz under /stall-*/ are cut off: after STALL_FRACTION of
the file the server writes "STALL PATH BYTES" to LOG and sends nothing more
until the client goes away (at most 600 s), as a power cut mid-download would
leave it.

    test-update-server.py ROOT PORT LOG
"""
import http.server
import os
import sys
import time

STALL_FRACTION = 0.4

root, port, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
log = open(log_path, "a", buffering=1)


class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=root, **kwargs)

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        self.sent = 0
        self.status = 0
        try:
            super().do_GET()
        finally:
            log.write(f"{self.command} {self.path} {self.status} {self.sent}\n")

    def send_response(self, code, message=None):
        self.status = code
        super().send_response(code, message)

    def copyfile(self, source, outputfile):
        stall_at = None
        if self.path.startswith("/stall-") and self.path.endswith(".root.raw.xz"):
            size = os.fstat(source.fileno()).st_size
            stall_at = int(size * STALL_FRACTION)
        while True:
            want = 1 << 20
            if stall_at is not None:
                want = min(want, stall_at - self.sent)
                if want <= 0:
                    log.write(f"STALL {self.path} {self.sent}\n")
                    # Nothing more; the guest is killed meanwhile.
                    deadline = time.time() + 600
                    while time.time() < deadline:
                        time.sleep(1)
                    return
            block = source.read(want)
            if not block:
                return
            outputfile.write(block)
            self.sent += len(block)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


Server(("127.0.0.1", port), Handler).serve_forever()
