"""Writes polymesh-opt --serve requests for test/Tools/serve.test: each
argument is a file whose text becomes one request ("<n>\\n" and n bytes)."""
import sys

for name in sys.argv[1:]:
    data = open(name, "rb").read()
    sys.stdout.buffer.write(b"%d\n" % len(data) + data)
