#!/usr/bin/python3
"""Transport abuse against the real workspaced binary, through a raw HTTP/2
client on its unix socket.

Each attack gets a server of its own (so one attack's leftovers never
colour the next one's figures) and runs beside a well-behaved gRPC client
(a separate process: grpcio and the generated API stubs) whose Health.Check
latency is taken before the attack and during it. The server's RSS, peak
RSS (VmHWM), CPU time and descriptor count are sampled before, during and
after.

Asserted, for every attack: the server is alive and serves a fresh
connection afterwards (Health.Check SERVING, Workspaces.List, a memory
workspace opened and closed); every call of the well-behaved client
succeeded; the server's peak RSS grew by less than a stated bound over its
RSS before the attack; its descriptor count came back near its baseline
once the attack's connections were gone; and it exits cleanly on SIGTERM.
For the connection flood, connections past --max-connections are closed.
Latencies are recorded, never asserted.

    transport_attack.py --server BIN [--full] [--only NAME,...]

--full runs the long version (bigger counts and durations) and prints a
markdown table of the figures. The bounded version (the default) is what
the test suite runs; WORKSPACED_SANITIZED=1 (the ASan build) scales its
counts down and its memory bounds up (ASan's shadow memory and quarantine).
PYTHONPATH must hold the generated stubs package `wspb` (see BUILD.bazel).
"""

import argparse
import json
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9)
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
SETTINGS_NAMES = {1: "HEADER_TABLE_SIZE", 2: "ENABLE_PUSH", 3: "MAX_CONCURRENT_STREAMS",
                  4: "INITIAL_WINDOW_SIZE", 5: "MAX_FRAME_SIZE", 6: "MAX_HEADER_LIST_SIZE"}
CANCEL, REFUSED_STREAM = 0x8, 0x7
MAX_FRAME = 16384  # the default SETTINGS_MAX_FRAME_SIZE; what we send never exceeds it
MIB = 1024 * 1024
RESOURCE_EXHAUSTED = 8  # the grpc-status code
# What a stream ended by the send buffer's cap is told (server/rpc/sendq.c).
SEND_CAP_MESSAGE = ("the server's buffer for responses waiting to be read is full, "
                    "and this stream's response waited longest")

HEALTH = "/grpc.health.v1.Health/Check"
READ_FILE = "/workspace.v1.FileSystem/ReadFile"
EMPTY_MESSAGE = b"\x00\x00\x00\x00\x00"  # a gRPC frame holding an empty protobuf

SANITIZED = os.environ.get("WORKSPACED_SANITIZED") == "1"


# ---------------------------------------------------------------- HTTP/2 frames

def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def settings_frame(values=None):
    payload = b"".join(struct.pack(">HI", k, v) for k, v in (values or {}).items())
    return frame(SETTINGS, 0, 0, payload)


def grpc_headers(path, extra=()):
    return [(":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", "localhost"), ("content-type", "application/grpc"),
            ("te", "trailers")] + list(extra)


def encode(headers):
    """A header block that stands alone: a fresh encoder refers to no
    dynamic-table entry of an earlier block."""
    return hpack.Encoder().encode(headers)


def header_frames(sid, block, end_stream=False, end_headers=True):
    """HEADERS plus as many CONTINUATION frames as the block needs."""
    chunks = [block[i:i + MAX_FRAME] for i in range(0, len(block), MAX_FRAME)] or [b""]
    out = []
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        flags = (END_HEADERS if last and end_headers else 0)
        if i == 0:
            out.append(frame(HEADERS, flags | (END_STREAM if end_stream else 0), sid, chunk))
        else:
            out.append(frame(CONTINUATION, flags, sid, chunk))
    return b"".join(out)


def readable(socks, timeout):
    """The sockets of `socks` with something to read (or closed): poll, as
    select() stops at descriptor 1024."""
    by_fd = {sk.fileno(): sk for sk in socks}
    p = select.poll()
    for fd in by_fd:
        p.register(fd, select.POLLIN)
    return [by_fd[fd] for fd, _ in p.poll(timeout * 1000)]


def grpc_message(payload):
    return b"\x00" + struct.pack(">I", len(payload)) + payload


def literal(name, value):
    """A header field as a literal without indexing, plain (no Huffman)."""
    def s(b):
        n = len(b)
        if n < 127:
            return bytes([n]) + b
        out, n = [127], n - 127
        while n >= 128:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out) + b
    return b"\x00" + s(name) + s(value)


def plain_block(headers):
    return b"".join(literal(k.encode(), v.encode()) for k, v in headers)


def literal_indexed(name, value):
    """A literal with incremental indexing: it becomes dynamic entry 62."""
    return b"\x40" + literal(name, value)[1:]


class RawConn:
    """One raw HTTP/2 connection to the server's unix socket. A reader thread
    answers SETTINGS and PING (as any peer must), decodes the server's
    headers and counts what came back per kind; it never sends
    WINDOW_UPDATE, so a caller that asks a small window gets it."""

    def __init__(self, path, settings=None, read=True, timeout=30):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.server_settings = {}
        self.goaway = None
        self.rst = {}           # error code -> count
        self.responses = 0      # response HEADERS blocks with END_STREAM (trailers)
        self.statuses = {}      # grpc-status -> count
        self.messages = {}      # grpc-message -> count
        self.data_bytes = 0
        self.send_error = None
        self.next_sid = 1
        self._decoder = hpack.Decoder()
        self._decoder.max_header_list_size = 1 << 30
        self._frag = {}
        self.got_settings = threading.Event()
        self.send(PREFACE + settings_frame(settings))
        self.reader = None
        if read:
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()

    def sid(self):
        s = self.next_sid
        self.next_sid += 2
        return s

    def send(self, data):
        """False once the server closed the connection (or stopped reading
        for the socket timeout)."""
        try:
            with self.lock:
                self.sock.sendall(data)
            return True
        except OSError as e:
            self.send_error = self.send_error or e.__class__.__name__
            return False

    def _on_block(self, sid, flags, block):
        try:
            headers = self._decoder.decode(block, raw=True)
        except Exception:  # a server we cannot decode is recorded, not fatal
            headers = []
        for k, v in headers:
            if k == b"grpc-status":
                code = int(v)
                self.statuses[code] = self.statuses.get(code, 0) + 1
            elif k == b"grpc-message":
                m = urllib.parse.unquote(v.decode("utf-8", "replace"))
                self.messages[m] = self.messages.get(m, 0) + 1
        if flags & END_STREAM:
            self.responses += 1

    def _read(self):
        buf = b""
        try:
            while True:
                try:
                    chunk = self.sock.recv(256 * 1024)
                except socket.timeout:
                    continue
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 9:
                    n = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + n:
                        break
                    ftype, flags = buf[3], buf[4]
                    sid = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                    payload, buf = buf[9:9 + n], buf[9 + n:]
                    self._frame(ftype, flags, sid, payload)
        except OSError:
            pass
        self.closed.set()

    def _frame(self, ftype, flags, sid, payload):
        if ftype == SETTINGS and not flags & ACK:
            for i in range(0, len(payload) - 5, 6):
                k, v = struct.unpack(">HI", payload[i:i + 6])
                self.server_settings[SETTINGS_NAMES.get(k, str(k))] = v
            self.send(frame(SETTINGS, ACK, 0))
            self.got_settings.set()
        elif ftype == PING and not flags & ACK:
            self.send(frame(PING, ACK, 0, payload))
        elif ftype == GOAWAY:
            last, code = struct.unpack(">II", payload[:8])
            self.goaway = (last & 0x7FFFFFFF, code, payload[8:200].decode("utf-8", "replace"))
        elif ftype == RST_STREAM:
            code = struct.unpack(">I", payload[:4])[0]
            self.rst[code] = self.rst.get(code, 0) + 1
        elif ftype == DATA:
            self.data_bytes += len(payload)
        elif ftype == HEADERS:
            if flags & 0x8:  # PADDED
                payload = payload[1:len(payload) - payload[0]]
            if flags & 0x20:  # PRIORITY
                payload = payload[5:]
            if flags & END_HEADERS:
                self._on_block(sid, flags, payload)
            else:
                self._frag[sid] = (flags, payload)
        elif ftype == CONTINUATION and sid in self._frag:
            f, block = self._frag[sid]
            block += payload
            if flags & END_HEADERS:
                del self._frag[sid]
                self._on_block(sid, f, block)
            else:
                self._frag[sid] = (f, block)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed.set()

    def summary(self):
        out = {}
        if self.goaway:
            out["goaway"] = self.goaway
        if self.rst:
            out["rst"] = dict(self.rst)
        if self.statuses:
            out["grpc_status"] = dict(self.statuses)
        if self.send_error:
            out["send_error"] = self.send_error
        return out


# ---------------------------------------------------------------- the server

class Server:
    """The real binary on a unix socket in a fresh directory."""

    def __init__(self, binary, extra=()):
        self.dir = tempfile.mkdtemp(prefix="wstransport.", dir="/tmp")
        os.chmod(self.dir, 0o711)
        self.state = os.path.join(self.dir, "state")
        self.sock = os.path.join(self.dir, "ws.sock")
        self.stderr_path = os.path.join(self.dir, "stderr")
        env = dict(os.environ)
        # ASan's quarantine holds up to 256 MiB of freed memory by default:
        # the memory bounds below are about the server, not that cache.
        env.setdefault("ASAN_OPTIONS", "quarantine_size_mb=32:malloc_context_size=5")
        argv = [binary, "--state-dir", self.state, "--listen", "unix:" + self.sock,
                "--policy-providers", "memory"] + list(extra)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env)
        line = self._first_line(60)
        if not line.startswith("workspaced listening on "):
            self.proc.kill()
            raise RuntimeError("workspaced did not start: %r\n%s" % (line, self.stderr()))
        self.pid = self.proc.pid

    def _first_line(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline().decode(errors="replace").strip() if r else ""

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read()[-4000:].decode(errors="replace")

    def alive(self):
        if self.proc.poll() is not None:
            return False
        with open("/proc/%d/stat" % self.pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")

    def status(self):
        out = {}
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1]) * 1024
        return out

    def cpu(self):
        with open("/proc/%d/stat" % self.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            raise AssertionError("workspaced did not exit within 60 s of SIGTERM")
        return rc


class Sampler(threading.Thread):
    """RSS every 20 ms while running; VmHWM is the kernel's exact peak."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server, self.stop_ev, self.peak = server, threading.Event(), 0

    def run(self):
        while not self.stop_ev.wait(0.02):
            try:
                self.peak = max(self.peak, self.server.status()["VmRSS"])
            except (OSError, KeyError):
                return

    def stop(self):
        self.stop_ev.set()
        self.join()


def metrics(srv):
    """The server's /metrics as {name: value} for unlabelled series (its
    --metrics-listen port is in its log)."""
    import urllib.request
    port = None
    with open(srv.stderr_path, "rb") as f:
        log = f.read().decode(errors="replace")
    for line in log.splitlines():
        if '"event":"metrics.listen"' in line:
            port = json.loads(line)["fields"]["port"]
    if port is None:
        return {}
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
            out[parts[0]] = float(parts[1])
    return out


# ---------------------------------------------------------------- well-behaved client

def probe_main(argv):
    """The well-behaved client, in a process of its own (so the attacker's
    Python threads never delay it): Health.Check calls over one channel,
    `count` of them, or until its stdin closes when count is 0. Prints
    {"lat": [ms...], "failures": [...]} on stdout."""
    import grpc
    from wspb import health_pb2, health_pb2_grpc

    sock, count = argv[0], int(argv[1])
    channel = grpc.insecure_channel("unix:" + sock)
    stub = health_pb2_grpc.HealthStub(channel)
    stop = threading.Event()
    if count == 0:
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    lat, failures = [], []
    n = 0
    # Connected (grpcio dials on the first call) before the attack starts.
    try:
        stub.Check(health_pb2.HealthCheckRequest(), timeout=60)
    except grpc.RpcError as e:
        failures.append("first call: %s: %s" % (e.code(), e.details()))
    print("ready", flush=True)
    while (count and n < count) or (not count and not stop.is_set()):
        t = time.monotonic()
        try:
            resp = stub.Check(health_pb2.HealthCheckRequest(), timeout=60)
            if resp.status != health_pb2.HealthCheckResponse.SERVING:
                failures.append("status %d" % resp.status)
            else:
                lat.append((time.monotonic() - t) * 1000)
        except grpc.RpcError as e:
            failures.append("%s: %s" % (e.code(), e.details()))
        n += 1
        if not count:
            time.sleep(0.005)
    channel.close()
    json.dump({"lat": lat, "failures": failures}, sys.stdout)


class Prober:
    def __init__(self, sock, count=0):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--probe", sock,
                                      str(count)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ready(self):
        line = self.proc.stdout.readline()
        assert line == b"ready\n", "the well-behaved client did not start: %r" % line

    def result(self):
        out, _ = self.proc.communicate(timeout=300)
        assert self.proc.returncode == 0, "the well-behaved client failed (exit %d)" % self.proc.returncode
        if out.startswith(b"ready\n"):
            out = out[len(b"ready\n"):]
        return json.loads(out)


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def serves(sock):
    """A fresh connection's real calls succeed; the reason why not, else None."""
    import grpc
    from wspb import health_pb2, health_pb2_grpc, workspaces_pb2, workspaces_pb2_grpc, common_pb2
    channel = grpc.insecure_channel("unix:" + sock)
    try:
        h = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=60)
        if h.status != health_pb2.HealthCheckResponse.SERVING:
            return "health status %d" % h.status
        ws = workspaces_pb2_grpc.WorkspacesStub(channel)
        ws.List(workspaces_pb2.ListRequest(), timeout=60)
        opened = ws.Open(workspaces_pb2.OpenRequest(memory=common_pb2.MemoryConfig()), timeout=60)
        ws.Close(workspaces_pb2.CloseRequest(workspace_id=opened.workspace.id), timeout=60)
        return None
    except grpc.RpcError as e:
        return "%s: %s" % (e.code(), e.details())
    finally:
        channel.close()


# ---------------------------------------------------------------- the attacks
# Each takes (server, scale) and returns a dict: "sent" (what was sent, in
# words) and "outcome" (what the server did). It closes its connections.

def attack_rapid_reset(srv, s):
    """HEADERS (a Health.Check), its request DATA, RST_STREAM(CANCEL) at
    once, in batches on one connection; a connection the server closes is
    replaced, as an attacker would."""
    block = encode(grpc_headers(HEALTH))
    total, conns, deadline = 0, 0, time.monotonic() + s["rr_seconds"]
    notes = []
    while total < s["rr_streams"] and time.monotonic() < deadline:
        c = RawConn(srv.sock)
        conns += 1
        while total < s["rr_streams"] and time.monotonic() < deadline and not c.closed.is_set():
            batch = []
            for _ in range(200):
                sid = c.sid()
                batch.append(frame(HEADERS, END_HEADERS, sid, block))
                batch.append(frame(DATA, END_STREAM, sid, EMPTY_MESSAGE))
                batch.append(frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL)))
            if not c.send(b"".join(batch)):
                break
            total += 200
        time.sleep(0.2)
        notes.append(c.summary())
        c.close()
    elapsed = s["rr_seconds"] - max(0.0, deadline - time.monotonic())
    closed = sum(1 for n in notes if "goaway" in n or "send_error" in n)
    return {"sent": "%d streams opened and reset (%.0f/s) on %d connection(s)" % (total, total / max(elapsed, 0.001), conns),
            "outcome": "server closed %d of %d connections; %s" % (closed, conns, notes[0] if notes else "")}


def attack_hpack_bomb(srv, s):
    """Three header blocks built to cost the decoder: a 4000-byte header
    put in the dynamic table, then referenced by its one-byte index
    hundreds of thousands of times; thousands of distinct headers over many
    CONTINUATION frames; and a block that never ends (CONTINUATION frames
    without END_HEADERS)."""
    outcomes = []
    base = plain_block(grpc_headers(HEALTH))
    # (a) the dynamic-table bomb: ~refs x 4 KB of decoded headers.
    bomb = base + literal_indexed(b"x-bomb", b"b" * 4000) + b"\xbe" * s["bomb_refs"]
    c = RawConn(srv.sock)
    for _ in range(s["bomb_streams"]):
        sid = c.sid()
        if not c.send(header_frames(sid, bomb) + frame(DATA, END_STREAM, sid, EMPTY_MESSAGE)):
            break
    time.sleep(0.5)
    outcomes.append(("indexed bomb", c.summary()))
    c.close()
    # (b) many distinct headers.
    many = base + b"".join(literal(b"x-h%06d" % i, b"v") for i in range(s["many_headers"]))
    c = RawConn(srv.sock)
    for _ in range(s["bomb_streams"]):
        sid = c.sid()
        if not c.send(header_frames(sid, many) + frame(DATA, END_STREAM, sid, EMPTY_MESSAGE)):
            break
    time.sleep(0.5)
    outcomes.append(("many headers", c.summary()))
    c.close()
    # (c) the CONTINUATION flood: one header block that never ends.
    c = RawConn(srv.sock)
    sid = c.sid()
    sent = 0
    ok = c.send(header_frames(sid, base, end_headers=False))
    piece = literal(b"x-c", b"c" * (MAX_FRAME - 16))
    batch = b"".join(frame(CONTINUATION, 0, sid, piece) for _ in range(4))
    while ok and sent < s["cont_bytes"] and not c.closed.is_set():
        ok = c.send(batch)
        sent += len(batch) if ok else 0
    time.sleep(0.5)
    outcomes.append(("CONTINUATION flood", dict(c.summary(), sent_mib=round(sent / MIB, 1))))
    c.close()
    return {"sent": "%d x (4000 B header + %d one-byte references, ~%d MiB decoded); %d x %d distinct headers; "
                    "a never-ending header block of %d MiB" % (
                        s["bomb_streams"], s["bomb_refs"], s["bomb_refs"] * 4032 // MIB, s["bomb_streams"],
                        s["many_headers"], s["cont_bytes"] // MIB),
            "outcome": "; ".join("%s: %s" % o for o in outcomes)}


def attack_oversized_metadata(srv, s):
    """A 1 MiB header value; then many 8 KiB values in one block."""
    outcomes = []
    # Plain literals: the encoder's Huffman coding of megabytes in Python
    # would take minutes, and the server is to see raw size anyway.
    one = plain_block(grpc_headers(HEALTH, [("x-huge", "h" * MIB)]))
    c = RawConn(srv.sock)
    for _ in range(s["meta_streams"]):
        sid = c.sid()
        if not c.send(header_frames(sid, one) + frame(DATA, END_STREAM, sid, EMPTY_MESSAGE)):
            break
    time.sleep(0.5)
    outcomes.append(("1 MiB value", c.summary()))
    c.close()
    many = plain_block(grpc_headers(HEALTH, [("x-m%04d" % i, chr(97 + i % 26) * 8192)
                                        for i in range(s["meta_8k"])]))
    c = RawConn(srv.sock)
    for _ in range(s["meta_streams"]):
        sid = c.sid()
        if not c.send(header_frames(sid, many) + frame(DATA, END_STREAM, sid, EMPTY_MESSAGE)):
            break
    time.sleep(0.5)
    outcomes.append(("%d x 8 KiB" % s["meta_8k"], c.summary()))
    c.close()
    return {"sent": "%d streams with a 1 MiB header value; %d streams with %d 8 KiB values" % (
        s["meta_streams"], s["meta_streams"], s["meta_8k"]),
            "outcome": "; ".join("%s: %s" % o for o in outcomes)}


def attack_many_streams(srv, s):
    """Streams opened (HEADERS, no END_STREAM) far past the advertised
    SETTINGS_MAX_CONCURRENT_STREAMS on one connection; then each stream the
    server kept gets its request, and its answer is counted."""
    block = encode(grpc_headers(HEALTH))
    c = RawConn(srv.sock)
    # The server's SETTINGS read and acknowledged first: its limit is in
    # force from then on.
    c.got_settings.wait(30)
    time.sleep(0.2)
    sids = []
    for start in range(0, s["streams"], 500):
        batch = []
        for _ in range(min(500, s["streams"] - start)):
            sid = c.sid()
            sids.append(sid)
            batch.append(frame(HEADERS, END_HEADERS, sid, block))
        if not c.send(b"".join(batch)):
            break
    # Wait for the refusals to stop coming.
    last, t0 = -1, time.monotonic()
    while time.monotonic() - t0 < 30:
        time.sleep(0.5)
        n = sum(c.rst.values())
        if n == last:
            break
        last = n
    refused = c.rst.get(REFUSED_STREAM, 0)
    # Finish every stream: the refused ones are closed and the server
    # ignores (or resets) DATA on them.
    for start in range(0, len(sids), 500):
        if not c.send(b"".join(frame(DATA, END_STREAM, sid, EMPTY_MESSAGE) for sid in sids[start:start + 500])):
            break
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30 and c.responses < len(sids) - refused and not c.closed.is_set():
        time.sleep(0.2)
    adv = c.server_settings.get("MAX_CONCURRENT_STREAMS")
    c.close()
    ok = c.statuses.get(0, 0)
    return {"sent": "%d streams opened at once on one connection (%d written before it closed)" % (
        s["streams"], len(sids)),
            "outcome": "advertised MAX_CONCURRENT_STREAMS=%s; %d refused (REFUSED_STREAM), %d answered OK, "
                       "%d answered with an error; %s" % (adv, refused, ok, c.responses - ok, c.summary()),
            "advertised": adv, "refused": refused, "answered_ok": ok, "opened": len(sids)}


def attack_slowloris(srv, s):
    """Many connections, each trickling one byte at a time: half the
    connection preface itself, half a valid preface and then a request's
    header block."""
    block = encode(grpc_headers(HEALTH))
    conns = []
    for i in range(s["slow_conns"]):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(srv.sock)
        sock.setblocking(False)
        if i % 2:
            sock.setblocking(True)
            sock.sendall(PREFACE + settings_frame())
            sock.setblocking(False)
            payload = frame(HEADERS, END_HEADERS, 1, block) + frame(DATA, END_STREAM, 1, EMPTY_MESSAGE)
        else:
            payload = PREFACE + settings_frame()
        conns.append([sock, payload, 0, False])
    t_end, sent = time.monotonic() + s["slow_seconds"], 0
    while time.monotonic() < t_end:
        for c in conns:
            if c[3] or c[2] >= len(c[1]):
                continue
            try:
                c[0].send(c[1][c[2]:c[2] + 1])
                c[2] += 1
                sent += 1
            except OSError:
                c[3] = True
        # Drain and notice closes.
        r = readable([c[0] for c in conns if not c[3]], 0)
        for sock in r:
            try:
                if not sock.recv(65536):
                    next(c for c in conns if c[0] is sock)[3] = True
            except OSError:
                next(c for c in conns if c[0] is sock)[3] = True
        time.sleep(s["slow_tick"])
    closed = sum(1 for c in conns if c[3])
    for c in conns:
        c[0].close()
    return {"sent": "%d connections trickling 1 byte each per %.2f s for %d s (%d bytes)" % (
        len(conns), s["slow_tick"], s["slow_seconds"], sent),
            "outcome": "%d of %d closed by the server during the attack" % (closed, len(conns))}


def attack_never_read(srv, s):
    """ReadFile of a big file on many streams of connections that asked a
    1-byte stream window and never send WINDOW_UPDATE: the server can send
    next to nothing. What waits for the clients is capped server-wide
    (--max-send-buffer-bytes): past the cap the streams that waited longest
    are ended RESOURCE_EXHAUSTED, so memory is bounded by the cap, not by
    the number of streams."""
    import grpc
    from wspb import common_pb2, filesystem_pb2, filesystem_pb2_grpc, workspaces_pb2, workspaces_pb2_grpc
    channel = grpc.insecure_channel("unix:" + srv.sock)
    ws = workspaces_pb2_grpc.WorkspacesStub(channel)
    fs = filesystem_pb2_grpc.FileSystemStub(channel)
    wid = ws.Open(workspaces_pb2.OpenRequest(memory=common_pb2.MemoryConfig()), timeout=60).workspace.id
    size = s["file_mib"] * MIB
    chunk = b"z" * MIB

    def chunks():
        yield filesystem_pb2.WriteFileRequest(header=filesystem_pb2.WriteFileHeader(
            workspace_id=wid, path="big", require_finish=True))
        for i in range(s["file_mib"]):
            yield filesystem_pb2.WriteFileRequest(data=chunk, finish=i == s["file_mib"] - 1)
    fs.WriteFile(chunks(), timeout=120)
    channel.close()
    req = grpc_message(filesystem_pb2.ReadFileRequest(workspace_id=wid, path="big").SerializeToString())
    block = encode(grpc_headers(READ_FILE))
    # The file is in the server's memory now: the attack's own baseline.
    rss_file = srv.status()["VmRSS"]
    conns = []
    for _ in range(s["stall_conns"]):
        c = RawConn(srv.sock, settings={4: 1})
        batch = []
        for _ in range(s["stall_streams"]):
            sid = c.sid()
            batch.append(frame(HEADERS, END_HEADERS, sid, block) + frame(DATA, END_STREAM, sid, req))
        c.send(b"".join(batch))
        conns.append(c)
    # What the server holds once the streams are set up; then a client
    # that reads, while the stalled streams hold the cap: its responses
    # are the newest, so it is served in full.
    time.sleep(s["stall_seconds"] / 2)
    rss_hold = srv.status()["VmRSS"]
    channel = grpc.insecure_channel("unix:" + srv.sock)
    fs = filesystem_pb2_grpc.FileSystemStub(channel)
    good = sum(len(r.data) for r in fs.ReadFile(filesystem_pb2.ReadFileRequest(workspace_id=wid, path="big"),
                                                timeout=60))
    channel.close()
    time.sleep(s["stall_seconds"] / 2)
    got = sum(c.data_bytes for c in conns)
    alive = sum(1 for c in conns if not c.closed.is_set())
    evicted = sum(c.statuses.get(RESOURCE_EXHAUSTED, 0) for c in conns)
    messages = set(m for c in conns for m in c.messages)
    other = sum(n for c in conns for code, n in c.statuses.items() if code != RESOURCE_EXHAUSTED)
    for c in conns:
        c.close()
    return {"sent": "%d connections x %d ReadFile streams of a %d MiB file, 1-byte window, never read, held %d s" % (
        s["stall_conns"], s["stall_streams"], s["file_mib"], s["stall_seconds"]),
            "outcome": "server sent %d bytes in all; %d streams ended RESOURCE_EXHAUSTED by the %d MiB cap, "
                       "%d with another status; %d of %d connections still open at the end; RSS in the hold "
                       "%.0f MiB over its start" % (
                got, evicted, s["send_cap_mib"], other, alive, len(conns), (rss_hold - rss_file) / MIB),
            "rss_before": rss_file, "evicted": evicted, "other": other, "messages": messages,
            "good_read": good, "size": size, "hold_growth": (rss_hold - rss_file) / MIB}


def attack_flood(srv, s):
    """Connections far past --max-connections, each sending a preface and
    held open: the ones the server admitted answer with SETTINGS, the rest
    are closed on accept."""
    conns = []
    for _ in range(s["flood_conns"]):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect(srv.sock)
            sock.sendall(PREFACE + settings_frame())
        except OSError:
            pass
        sock.setblocking(False)
        conns.append(sock)
    state = {}  # sock -> "admitted" | "refused"
    t0 = time.monotonic()
    while len(state) < len(conns) and time.monotonic() - t0 < 60:
        pending = [c for c in conns if c not in state]
        r = readable(pending, 0.5)
        for sock in r:
            try:
                state[sock] = "admitted" if sock.recv(65536) else "refused"
            except OSError:
                state[sock] = "refused"
    admitted = sum(1 for v in state.values() if v == "admitted")
    refused = sum(1 for v in state.values() if v == "refused")
    # A new well-behaved connection while the cap is taken: recorded only.
    for c in conns:
        c.close()
    return {"sent": "%d connections held open against --max-connections %d" % (len(conns), s["flood_cap"]),
            "outcome": "%d admitted, %d closed on accept, %d unanswered" % (
                admitted, refused, len(conns) - admitted - refused),
            "admitted": admitted, "refused": refused, "opened": len(conns)}


# name, function, memory bound (MiB of peak RSS over RSS before; regular,
# sanitized), extra server flags. The bounds: the largest growth measured
# over runs of the bounded and the long version, with a margin of 2-3x
# (see README.md).
ATTACKS = [
    # Measured: 14 MiB over 20,000 resets, 75 to 99 MiB over 175,000 to
    # 213,000 in 30 s, given back after (the server keeps pace: the
    # allocator's arenas, not a backlog).
    ("rapid_reset", attack_rapid_reset, (192, 384), []),
    ("hpack_bomb", attack_hpack_bomb, (64, 256), []),
    ("oversized_metadata", attack_oversized_metadata, (64, 256), []),
    ("many_streams", attack_many_streams, (64, 256), []),
    ("slowloris", attack_slowloris, (64, 256), []),
    # A stalled ReadFile stream holds 0.51 MiB (a 256 KiB chunk in flight
    # and its next one read), so without a cap 3,000 of them held 1.58 GiB.
    # The cap counts what is in flight, half a stream's cost: once the
    # streams are set up, what the server holds is twice the cap (32 MiB
    # measured, from 200 to 2,000 streams), and the check on it is below.
    # The peak is higher while a burst of new streams runs ahead of the
    # cancels' completions: 48 MiB over 200 streams, 124 over 1,000 and
    # 139 over 2,000.
    ("never_read", attack_never_read, (256, 512),
     lambda s: ["--max-send-buffer-bytes", str(s["send_cap_mib"] * MIB), "--metrics-listen", "127.0.0.1:0"]),
    ("connection_flood", attack_flood, (64, 256), ["--max-connections", "64"]),
]

BOUNDED = dict(rr_streams=20000, rr_seconds=6, bomb_refs=200000, bomb_streams=3, many_headers=20000,
               cont_bytes=16 * MIB, meta_streams=4, meta_8k=128, streams=10000, slow_conns=40,
               slow_tick=0.1, slow_seconds=5, file_mib=16, stall_conns=2, stall_streams=100,
               stall_seconds=4, send_cap_mib=16, flood_conns=400, flood_cap=64, baseline_calls=100)
SANITIZED_SCALE = dict(rr_streams=8000, bomb_refs=100000, bomb_streams=2, many_headers=10000,
                       cont_bytes=8 * MIB, meta_streams=2, slow_conns=20, flood_conns=200,
                       baseline_calls=50)
FULL = dict(rr_streams=500000, rr_seconds=30, bomb_refs=1000000, bomb_streams=20, many_headers=100000,
            cont_bytes=256 * MIB, meta_streams=32, meta_8k=512, streams=100000, slow_conns=400,
            slow_tick=0.1, slow_seconds=30, file_mib=64, stall_conns=10, stall_streams=100,
            stall_seconds=15, flood_conns=3000, flood_cap=64, baseline_calls=300)


def run_attack(binary, name, fn, bound, flags, scale):
    flags = flags(scale) if callable(flags) else flags
    srv = Server(binary, ["--max-connections", "1024"] + flags if "--max-connections" not in flags else flags)
    failures = []
    try:
        base = Prober(srv.sock, scale["baseline_calls"]).result()
        if base["failures"]:
            failures.append("baseline calls failed: %s" % base["failures"][:3])
        fds_before = srv.fds()
        rss_before = srv.status()["VmRSS"]
        cpu_before = srv.cpu()
        sampler = Sampler(srv)
        sampler.start()
        probe = Prober(srv.sock, 0)
        probe.ready()  # its connection is up before the attack takes the slots
        t0 = time.monotonic()
        result = fn(srv, scale)
        seconds = time.monotonic() - t0
        during = probe.result()
        sampler.stop()
        cpu_used = srv.cpu() - cpu_before
        hwm = srv.status()["VmHWM"]
        rss_base = result.get("rss_before", rss_before)
        if not srv.alive():
            failures.append("the server died: %s" % srv.stderr())
            return dict(name=name, failures=failures)
        if during["failures"]:
            failures.append("well-behaved calls failed during the attack: %d, e.g. %s" % (
                len(during["failures"]), during["failures"][:3]))
        if not during["lat"]:
            failures.append("the well-behaved client made no call during the attack")
        growth = (hwm - rss_base) / MIB
        bounds = bound(scale) if callable(bound) else bound
        limit = bounds[1] if SANITIZED else bounds[0]
        if growth >= limit:
            failures.append("peak RSS grew %.1f MiB over %.1f MiB before the attack (bound %d MiB)" % (
                growth, rss_base / MIB, limit))
        why = serves(srv.sock)
        if why:
            failures.append("a fresh connection's calls failed after the attack: %s" % why)
        # Descriptors: the attack's connections are closed; the server's
        # count comes back near where it was. A connection whose streams
        # are stalled on flow control is seen closed only at the server's
        # next keepalive ping (--keepalive-ms, 10 s): hence the wait.
        t1 = time.monotonic()
        while srv.fds() > fds_before + 1 and time.monotonic() - t1 < 40:
            time.sleep(0.2)
        fds_after = srv.fds()
        if fds_after > fds_before + 1:
            failures.append("server descriptors %d after the attack, %d before" % (fds_after, fds_before))
        if name == "connection_flood":
            # The well-behaved client holds one slot.
            if result["admitted"] > scale["flood_cap"] - 1:
                failures.append("%d flood connections admitted past --max-connections %d" % (
                    result["admitted"], scale["flood_cap"]))
            if result["refused"] < result["opened"] - scale["flood_cap"]:
                failures.append("only %d of %d flood connections refused" % (result["refused"], result["opened"]))
        if name == "never_read":
            # More was asked than the cap holds (256 KiB per stream): the
            # oldest streams were ended, with the cap's status and nothing
            # else.
            if scale["stall_conns"] * scale["stall_streams"] * 256 * 1024 > 2 * scale["send_cap_mib"] * MIB and \
                    not result["evicted"]:
                failures.append("no stalled stream was ended RESOURCE_EXHAUSTED past the send buffer cap")
            if result["other"]:
                failures.append("%d stalled streams ended with a status other than RESOURCE_EXHAUSTED" %
                                result["other"])
            if result["evicted"] and result["messages"] != {SEND_CAP_MESSAGE}:
                failures.append("the ended streams' messages: %s" % sorted(result["messages"]))
            hold = 2 * scale["send_cap_mib"] + 32 if not SANITIZED else 4 * scale["send_cap_mib"] + 96
            if result["hold_growth"] > hold:
                failures.append("the stalled streams held %.1f MiB in the hold (bound %d MiB: "
                                "twice the send buffer cap and 32)" % (result["hold_growth"], hold))
            # The server's own count, and its gauge back at zero once the
            # attack's connections are gone (nothing left counted).
            m = metrics(srv)
            if m.get("workspaced_send_buffer_evicted_total", -1) < result["evicted"]:
                failures.append("workspaced_send_buffer_evicted_total %s, %d streams seen ended" % (
                    m.get("workspaced_send_buffer_evicted_total"), result["evicted"]))
            if m.get("workspaced_send_buffer_bytes") != 0:
                failures.append("workspaced_send_buffer_bytes %s after the attack" %
                                m.get("workspaced_send_buffer_bytes"))
            if result["good_read"] != result["size"]:
                failures.append("a reading client's ReadFile got %d of %d bytes" % (
                    result["good_read"], result["size"]))
        if name == "many_streams":
            adv = result["advertised"]
            if adv is None or adv > 1000:
                failures.append("MAX_CONCURRENT_STREAMS advertised: %s" % adv)
            # A stream past the limit is refused, or the connection closed;
            # never served.
            if result["answered_ok"] > adv:
                failures.append("%d streams served on one connection, %s advertised" % (result["answered_ok"], adv))
        time.sleep(2)  # the server gives freed memory back on a 1 s tick
        rss_after = srv.status()["VmRSS"]
        rc = srv.stop()
        if rc != 0:
            failures.append("workspaced exited %d on SIGTERM: %s" % (rc, srv.stderr()))
        bl, dl = base["lat"], during["lat"]
        return dict(name=name, sent=result["sent"], outcome=result["outcome"], seconds=seconds,
                    rss_before=rss_base / MIB, rss_peak=hwm / MIB, rss_after=rss_after / MIB,
                    growth=growth, bound=limit, cpu=cpu_used, fds=(fds_before, fds_after),
                    base_p50=percentile(bl, 50), base_p99=percentile(bl, 99),
                    att_p50=percentile(dl, 50), att_p99=percentile(dl, 99), calls=len(dl),
                    failures=failures)
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        probe_main(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated attack names")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=N",
                    help="override one count of the scale (e.g. stall_conns=30)")
    args = ap.parse_args()
    scale = dict(BOUNDED)
    if args.full:
        scale.update(FULL)
    elif SANITIZED:
        scale.update(SANITIZED_SCALE)
    for kv in args.set:
        k, v = kv.split("=", 1)
        if k not in scale:
            ap.error("--set: no count named %s (%s)" % (k, ", ".join(sorted(scale))))
        scale[k] = type(scale[k])(v)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 8192:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, hard), hard))
    only = set(filter(None, args.only.split(",")))
    results, failed = [], 0
    for name, fn, bound, flags in ATTACKS:
        if only and name not in only:
            continue
        t = time.monotonic()
        r = run_attack(args.server, name, fn, bound, flags, scale)
        results.append(r)
        status = "FAIL" if r["failures"] else "ok"
        failed += bool(r["failures"])
        print("%-20s %-4s %5.1f s" % (name, status, time.monotonic() - t), flush=True)
        for k in ("sent", "outcome"):
            if k in r:
                print("    %s: %s" % (k, r[k]))
        if "growth" in r:
            print("    RSS %.1f -> peak %.1f -> %.1f MiB (growth %.1f, bound %d); CPU %.2f s; fds %d -> %d; "
                  "p50/p99 %.2f/%.2f ms -> %.2f/%.2f ms over %d calls" % (
                      r["rss_before"], r["rss_peak"], r["rss_after"], r["growth"], r["bound"], r["cpu"],
                      r["fds"][0], r["fds"][1], r["base_p50"], r["base_p99"], r["att_p50"], r["att_p99"],
                      r["calls"]))
        for f in r["failures"]:
            print("    FAILED: %s" % f)
        sys.stdout.flush()
    if args.full:
        print()
        print("| attack | sent | server RSS before / peak / after (MiB) | server CPU (s) | "
              "client p50 / p99 baseline (ms) | p50 / p99 under attack (ms) | p99 ratio | outcome |")
        print("|---|---|---|---|---|---|---|---|")
        for r in results:
            if "growth" not in r:
                print("| `%s` | | | | | | | FAILED: %s |" % (r["name"], "; ".join(r["failures"])))
                continue
            print("| `%s` | %s | %.0f / %.0f / %.0f | %.2f | %.2f / %.2f | %.2f / %.2f | %.1fx | %s%s |" % (
                r["name"], r["sent"], r["rss_before"], r["rss_peak"], r["rss_after"], r["cpu"],
                r["base_p50"], r["base_p99"], r["att_p50"], r["att_p99"], r["att_p99"] / r["base_p99"],
                r["outcome"].replace("|", "/"), " **FAILED: %s**" % "; ".join(r["failures"]) if r["failures"] else ""))
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
