"""A tiny HTTP server whose memory the tests drive: /fill?n=N&size=S keeps N objects of S bytes
(above pymalloc's 512-byte limit, so each one is a malloc of the allocator under test), /free
drops every other one or all of them, /stats tells how many are kept, /hit counts a request. Loopback only."""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

kept: list[bytes] = []
hits = 0


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        global kept, hits
        url = urlparse(self.path)
        q = {k: int(v[0]) for k, v in parse_qs(url.query).items()}
        if url.path == "/fill":
            # Distinct objects (the first bytes vary), each written in full.
            kept.extend(i.to_bytes(8, "little") * (q.get("size", 1000) // 8) for i in range(q.get("n", 1000)))
            body = f"filled={len(kept)} hits_before={hits}"
        elif url.path == "/stats":
            body = f"kept={len(kept)}"
        elif url.path == "/free":
            kept = kept[1::2] if q.get("half") else []
            body = f"kept={len(kept)}"
        else:
            hits += 1
            body = f"hits={hits}"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("serving", flush=True)
    server.serve_forever()
