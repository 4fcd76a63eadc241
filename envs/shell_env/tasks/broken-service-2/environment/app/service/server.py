import configparser
import http.server
import os
import sys

config = configparser.ConfigParser()
config.read(os.path.join(os.path.dirname(__file__), "service.ini"))
section = config["service"]
data_dir = section["data_dir"]
if not os.path.isdir(data_dir):
    sys.exit(f"fatal: data_dir {data_dir} does not exist")
greeting = open(os.path.join(data_dir, "greeting.txt")).read().strip()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = greeting.encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(section["port"])), Handler).serve_forever()
