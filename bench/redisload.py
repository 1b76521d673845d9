"""The redis workload: redis-server, with the allocator under test preloaded,
driven by redis-benchmark over loopback, then checked with a small RESP
client (written values read back intact) and stopped with SIGTERM.

Time is redis-benchmark's wall time; peak RSS is the server's. Debian's
redis-server links jemalloc itself, so for "glibc" the runner preloads
libc.so.6 to put glibc's malloc first in symbol lookup."""
import random
import shutil
import socket
import subprocess
import time

from benchlib import Outcome, Launched, run_helper


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Resp:
    """Just enough of the Redis protocol to set and get keys."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b"$":
            return None if int(rest) < 0 else self._exact(int(rest))
        return rest


def wait_ready(port, server, deadline_s=10):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if server.proc.poll() is not None:
            return False
        try:
            client = Resp(port)
            ok = client.call("PING") == b"PONG"
            client.close()
            if ok:
                return True
        except (OSError, RuntimeError):
            pass  # not listening yet, or still loading
        time.sleep(0.05)
    return False


def verify(port, keys, seed):
    """Writes keys with values of many sizes, reads them back; None if all
    match, else what went wrong."""
    rng = random.Random(seed)
    values = {f"verify:{i}": rng.randbytes(rng.randrange(1, 5000)) for i in range(keys)}
    client = Resp(port)
    try:
        for k, v in values.items():
            client.call("SET", k, v)
        for k, v in values.items():
            got = client.call("GET", k)
            if got != v:
                return f"GET {k} returned {len(got or b'')} bytes that differ from the {len(v)} written"
        return None
    finally:
        client.close()


def available():
    return shutil.which("redis-server") and shutil.which("redis-benchmark")


def run(launcher, preload, requests, timeout):
    port = free_port()
    server = Launched(launcher, ["redis-server", "--port", port, "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--daemonize", "no",
                                 "--loglevel", "warning"], preload, stdout=subprocess.DEVNULL)
    problem = None
    bench_wall = 0.0
    metrics = {}
    if not wait_ready(port, server):
        problem = "redis-server did not start"
    else:
        start = time.perf_counter()
        try:
            # The load client gets the scrubbed environment too: the caller's
            # LD_PRELOAD or allocator tuning would change the numbers reported.
            bench = run_helper(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-q", "--csv",
                                "-n", str(requests), "-c", "16", "-r", "100000", "-d", "256",
                                "-t", "set,get,incr,lpush,lpop,sadd,hset,spop,mset"],
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            bench = None
        bench_wall = time.perf_counter() - start
        if bench is None:
            problem = f"redis-benchmark did not finish in {timeout} s"
        elif bench.returncode != 0:
            problem = f"redis-benchmark exited with {bench.returncode}: {bench.stderr.strip()[-300:]}"
        else:
            rows = [line.split(",") for line in bench.stdout.splitlines()[1:]]
            metrics["requests_per_s"] = sum(float(r[1].strip('"')) for r in rows) / max(len(rows), 1)
            try:
                problem = verify(port, 2000, seed=1)
            except (OSError, RuntimeError) as e:
                problem = f"verification failed: {e}"

    if server.proc.poll() is None:
        server.stop()
    outcome = server.wait(timeout)
    if problem and outcome.status == "ok":
        outcome.status, outcome.exit_code = "fail", -1
    stderr = (problem + "\n" if problem else "") + outcome.stderr
    return Outcome(outcome.status, outcome.exit_code, bench_wall, outcome.maxrss_kb, metrics, stderr)
