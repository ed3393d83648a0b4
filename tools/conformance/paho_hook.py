#!/usr/bin/env python3
"""The webhook the paho.mqtt.testing run authenticates against: every client is admitted with
the ACL the suite expects of a broker, everything but subscribing to test/nosubscribe.

    python3 paho_hook.py PORT
"""
import http.server
import json
import sys

ANSWER = json.dumps(
    {
        "allow": True,
        "acl": [
            {"pattern": "test/nosubscribe", "permission": "deny"},
            {"pattern": "#", "permission": "all"},
        ],
    }
).encode()


class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Hook).serve_forever()
