#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets into corpus/<target>/ (next
to this file) from the repository's own corpora and formats: guard
commands from tests/corpus/commands, paths from tests/corpus/paths,
archives from tests/corpus/archives/make.py, requests encoded by protoc,
frames and records built here. Run it from the repository root after a
format changes; the result is committed. Reproducers of fixed crashes
(corpus/<target>/crash-*) are kept as they are.

Usage: tests/fuzz/make_seeds.py
"""
import glob
import gzip
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def case_values(path, key):
    out = []
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            if line.startswith(key + ": "):
                out.append(line[len(key) + 2:].rstrip("\n"))
    return out


def unescape(s):
    """tests/corpus/paths escapes: \\\\, \\n, \\t, \\xHH, \\r{N:text}."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out.append(c.encode("utf-8", "surrogateescape"))
            i += 1
            continue
        n = s[i + 1]
        if n == "\\":
            out.append(b"\\"); i += 2
        elif n == "n":
            out.append(b"\n"); i += 2
        elif n == "t":
            out.append(b"\t"); i += 2
        elif n == "x":
            out.append(bytes([int(s[i + 2:i + 4], 16)])); i += 4
        elif n == "r":
            end = s.index("}", i)
            count, text = s[i + 3:end].split(":", 1)
            out.append(text.encode() * int(count)); i = end + 1
        else:
            out.append(b"\\"); i += 1
    return b"".join(out)


def guard():
    files = sorted(glob.glob(os.path.join(ROOT, "tests/corpus/commands/*.case")))
    n = 0
    for path in files:
        for cmd in case_values(path, "command"):
            put("guard_fuzz", os.path.basename(path)[:-5],
                cmd.encode("utf-8", "surrogateescape"))
            n += 1
    for name, cmd in [("plain", b"ls -la"), ("quotes", b"echo 'a b' \"c\\\"d\" e\\ f"),
                      ("git", b"git status --short")]:
        put("guard_fuzz", name, cmd)


def paths():
    files = sorted(glob.glob(os.path.join(ROOT, "tests/corpus/paths/*.case")))
    for path in files:
        for p in case_values(path, "path"):
            data = unescape(p)
            if len(data) <= 600:
                put("path_fuzz", os.path.basename(path)[:-5], data)
    for i, p in enumerate([b"a.txt", b"dir/b.txt", b"link_root/etc/passwd", b"dir/up/x",
                           b"link_up/root/a.txt", b"link_dir/b.txt", b"./dir//sub/../b.txt",
                           b"loop/x", b"abs_passwd", b"dir/sub/../../a.txt"]):
        put("path_fuzz", "tree_%02d" % i, p)


# The order of tests/fuzz/wire_fuzz.c's `requests`.
REQUESTS = """AttachRequest CloseInputRequest CloseRequest DeleteSnapshotRequest DescribeRequest
EditFileRequest ExtendRequest GlobRequest GrepRequest ListDirRequest ListProcessesRequest
ListProvidersRequest ListRequest ListSnapshotsRequest MakeDirRequest MoveRequest OpenRequest
ReadArchiveRequest ReadAuditRequest ReadFileRequest RemoveRequest ResizeRequest ResolveRequest
RestoreRequest RunRequest SendInputRequest SendSignalRequest SetSecretsRequest SnapshotRequest
StartRequest StatRequest WatchRequest WriteArchiveRequest WriteFileRequest""".split()


def encode(msg, text):
    protos = ["workspace/v1/common.proto", "workspace/v1/providers.proto",
              "workspace/v1/workspaces.proto", "workspace/v1/filesystem.proto",
              "workspace/v1/exec.proto"]
    return subprocess.run(
        ["protoc", "-I", os.path.join(ROOT, "proto"), "-I", "/usr/include",
         "--encode=workspace.v1." + msg] + protos,
        input=text.encode(), stdout=subprocess.PIPE, check=True).stdout


def wire():
    seeds = [
        ("RunRequest", 'workspace_id: "ws-1" process { argv: "ls" argv: "-la" cwd: "src" '
                       'env { key: "LANG" value: "C.UTF-8" } timeout_ms: 1000 tag: "t" }'),
        ("RunRequest", 'workspace_id: "ws-1" process { command: "echo h\u00e9llo" }'),
        ("ReadFileRequest", 'workspace_id: "ws-1" path: "a/b.txt" offset: 3 length: 10'),
        ("WriteFileRequest", 'header { workspace_id: "ws-1" path: "x.txt" mode: 420 }'),
        ("WriteFileRequest", 'data: "hello" finish: true'),
        ("EditFileRequest", 'workspace_id: "w" path: "f" old_text: "a" new_text: "\u00fc" '
                            'replace_all: true'),
        ("GlobRequest", 'workspace_id: "w" pattern: "**/*.c" path: "src" max_results: 5'),
        ("SetSecretsRequest", 'workspace_id: "w" secrets { key: "TOKEN" value: "s3cr3t" } '
                              'replace: true'),
        ("StartRequest", 'start { workspace_id: "w" process { argv: "cat" stdin: true } }'),
        ("OpenRequest", 'name: "dev" labels { key: "team" value: "core" }'),
        ("MoveRequest", 'workspace_id: "w" from_path: "a" to_path: "b" replace: true'),
    ]
    for i, (msg, text) in enumerate(seeds):
        put("wire_fuzz", "%02d_%s" % (i, msg), bytes([REQUESTS.index(msg)]) + encode(msg, text))


def frames():
    def frame(stream, payload):
        return struct.pack(">BxxxI", stream, len(payload)) + payload
    put("frames_fuzz", "framed", b"\x00" + frame(1, b"out\n") + frame(2, b"err\n") +
        frame(1, b"") + frame(3, b"sys"))
    put("frames_fuzz", "framed_split", b"\x02" + frame(1, b"x" * 100) + frame(2, b"y" * 30))
    put("frames_fuzz", "bad_stream", b"\x00" + frame(1, b"ok") + frame(4, b"no"))
    put("frames_fuzz", "truncated", b"\x00" + frame(1, b"abc")[:-1])
    put("frames_fuzz", "raw", b"\x01" + b"\x1b[31mterminal output\r\n")


def agent_wire():
    def field(tag, data):
        return struct.pack("<HI", tag, len(data)) + data

    def num(tag, v):
        return field(tag, struct.pack("<Q", v))

    def frame(kind, stream, payload, version=1, flags=0):
        return struct.pack("<BBHII", version, kind, flags, stream, len(payload)) + payload
    hello = frame(1, 0, num(1, 1) + num(3, 42))
    started = frame(4, 7, num(3, 1234))
    exited = frame(5, 7, num(30, 0) + num(31, 3) + num(20, 0) + num(32, 0) + num(33, 0) +
                   num(34, 0) + num(35, 12) + num(36, 4) + num(37, 2048))
    signaled = frame(5, 8, num(30, 1) + num(20, 9) + num(32, 1) + num(33, 1))
    failed = frame(6, 9, num(40, 2) + field(41, b"no such file"))
    start = frame(2, 7, field(10, b"/bin/ls") + field(10, b"-la") + field(11, b"LANG=C") +
                  field(12, b"/workspace") + num(13, 0))
    put("agent_wire_fuzz", "session", hello + started + exited)
    put("agent_wire_fuzz", "signaled", hello + signaled + failed)
    put("agent_wire_fuzz", "start", start + frame(3, 7, num(20, 15)))
    put("agent_wire_fuzz", "unknown_tag", frame(5, 3, field(999, b"new") + num(31, 1)))
    put("agent_wire_fuzz", "bad_version", frame(4, 1, num(3, 1), version=2))
    put("agent_wire_fuzz", "short_field", frame(6, 1, struct.pack("<HI", 41, 50) + b"abc"))


def agent_exit():
    def field(tag, data):
        return struct.pack("<HI", tag, len(data)) + data

    def num(tag, v):
        return field(tag, struct.pack("<Q", v))
    # STATUS 30, CODE 31, SIGNO 20, CORE 32, OOM 33, TIMED_OUT 34, USER_MS 35,
    # SYS_MS 36, MAXRSS_KIB 37.
    usage = num(35, 12) + num(36, 4) + num(37, 2048)
    put("agent_exit_fuzz", "exited_3", num(30, 0) + num(31, 3) + num(20, 0) + num(32, 0) +
        num(33, 0) + num(34, 0) + usage)
    put("agent_exit_fuzz", "signaled_core", num(30, 1) + num(20, 11) + num(32, 1) + usage)
    put("agent_exit_fuzz", "oom_killed", num(30, 1) + num(20, 9) + num(33, 1))
    put("agent_exit_fuzz", "oom_flag_exited", num(30, 0) + num(31, 137) + num(33, 1))
    put("agent_exit_fuzz", "repeated_last_wins", num(30, 1) + num(30, 0) + num(31, 7) + num(31, 1))
    put("agent_exit_fuzz", "unknown_tags", field(999, b"new") + num(30, 0) + field(41, b"x"))
    put("agent_exit_fuzz", "no_status", num(31, 0))
    put("agent_exit_fuzz", "status_2", num(30, 2))
    put("agent_exit_fuzz", "code_256", num(30, 0) + num(31, 256))
    put("agent_exit_fuzz", "signaled_signo_0", num(30, 1) + num(20, 0))
    put("agent_exit_fuzz", "signaled_signo_65", num(30, 1) + num(20, 65))
    put("agent_exit_fuzz", "short_number", num(30, 0) + field(31, b"\x01\x00\x00\x00"))
    put("agent_exit_fuzz", "field_past_end", num(30, 0) + struct.pack("<HI", 31, 8) + b"\x01")
    put("agent_exit_fuzz", "empty", b"")


def tar_out():
    # tests/fuzz/tar_out_fuzz.c's records: kind | parent << 2, name length
    # - 1, name, u16 mode, u16 length, content (none for a hard link: the
    # length picks the file).
    def rec(kind, parent, name, mode, data=b"", link=None):
        n = link if kind == 3 else len(data)
        return (bytes([kind | parent << 2, len(name) - 1]) + name + struct.pack("<HH", mode, n) +
                (b"" if kind == 3 else data))

    def f(parent, name, data, mode=0o644):
        return rec(0, parent, name, mode, data)

    def d(parent, name, mode=0o755):
        return rec(1, parent, name, mode)

    def s(parent, name, target):
        return rec(2, parent, name, 0, target)

    def h(parent, name, which):
        return rec(3, parent, name, 0, link=which)
    # Directories: 0 the root, then in the order made; files likewise.
    basic = (f(0, b"a.txt", b"hello\n") + d(0, b"src") + f(1, b"main.c", b"int main;\n" * 40) +
             s(0, b"link", b"a.txt") + h(1, b"again.txt", 0) + d(1, b"empty", 0o700) +
             f(0, b"empty.txt", b""))
    put("tar_out_fuzz", "basic", b"\x00" + basic)
    put("tar_out_fuzz", "basic_gzip", b"\x01" + basic)
    put("tar_out_fuzz", "basic_small_stretches", b"\x08" + basic)
    put("tar_out_fuzz", "subdir", b"\x02" + basic)
    put("tar_out_fuzz", "single_file", b"\x05" + basic)
    put("tar_out_fuzz", "escaping_links", b"\x00" +
        s(0, b"root", b"/") + s(0, b"up", b"..") + s(0, b"secret", b"../outside/secret") +
        s(0, b"outside", b"../outside") + s(0, b"passwd", b"/etc/passwd") + d(0, b"d") +
        s(1, b"upup", b"../..") + s(1, b"deep", b"../" * 30 + b"etc/shadow") +
        s(0, b"loop", b"loop") + f(1, b"in.txt", b"inside\n"))
    put("tar_out_fuzz", "transient_names", b"\x00" +
        f(0, b".ws-tmp-0123456789abcdef", b"half-written") +
        d(0, b".ws-stage-00112233445566aa") + f(1, b"staged", b"s") +
        f(0, b".ws-tmp-short", b"kept: not a transient name") + f(0, b"real", b"r") +
        h(0, b"real_again", 2) + h(0, b"hidden_again", 0))
    long_name = b"n" * 110
    put("tar_out_fuzz", "long_and_odd_names", b"\x09" +
        d(0, long_name) + d(1, long_name) + f(2, long_name, b"deep\n") +
        f(0, b"caf\xc3\xa9 \xe2\x98\x83", b"utf-8") + f(0, b"bin\xff\xfe\x80", b"not utf-8") +
        f(0, b"new\nline\ttab", b"x") + f(0, b"-rf", b"dash") + f(0, b" ", b"space") +
        s(0, b"\xffl", b"\xfe\xfd target") + f(0, b".", b"dot"))
    put("tar_out_fuzz", "modes", b"\x00" +
        f(0, b"setuid", b"#!/bin/sh\n", 0o4755) + f(0, b"setgid", b"g", 0o2750) +
        f(0, b"none", b"n", 0) + d(0, b"sticky", 0o1777) + d(0, b"gid", 0o2755) +
        f(2, b"in_gid", b"i", 0o640) + d(0, b"closed", 0))


def docker_api():
    cid = "a" * 64
    bodies = [
        (0, {"ApiVersion": "1.43", "MinAPIVersion": "1.12", "Version": "24.0.5"}),
        (1, {"Id": cid, "Warnings": ["Your kernel does not support swap limit capabilities"]}),
        (2, {"HostConfig": {"CapDrop": ["ALL"], "CapAdd": ["KILL", "CAP_CHOWN"],
                            "Privileged": False, "SecurityOpt": ["no-new-privileges:true"],
                            "ReadonlyRootfs": True, "Init": True, "NetworkMode": "none",
                            "IpcMode": "private", "LogConfig": {"Type": "local"},
                            "PidsLimit": 256, "Memory": 536870912, "MemorySwap": 536870912,
                            "NanoCpus": 1000000000, "Runtime": "runc",
                            "Tmpfs": {"/tmp": "rw,nosuid,nodev,size=67108864"}},
             "Config": {"User": "1000:1000", "Labels": {"workspaced.server": "s1",
                                                        "workspaced.workspace": "w1"}},
             "Mounts": [{"Destination": "/workspace", "RW": True, "Type": "bind"},
                        {"Destination": "/etc/passwd", "RW": False, "Type": "bind"}]}),
        (3, {"State": {"Running": False, "OOMKilled": True, "ExitCode": 137,
                       "Status": "exited"}}),
        (4, {"Config": {"Volumes": {"/data": {}}}}),
        (5, {"Config": {"Env": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"]}}),
        (6, [{"Id": cid, "Names": ["/x"]}, {"Id": "b" * 64}]),
        (7, {"Running": False, "ExitCode": 0, "Pid": 4242}),
        (8, {"message": "No such container: \u00e9\n\tx"}),
    ]
    for sel, body in bodies:
        put("docker_api_fuzz", "body_%d" % sel, bytes([sel]) + json.dumps(body).encode())
    put("docker_api_fuzz", "user", b"\x09" + b"1000:1000")
    put("docker_api_fuzz", "version", b"\x00" + b"1.41")


def conf():
    with open(os.path.join(ROOT, "server/deploy/workspaced.conf.example"), "rb") as f:
        example = f.read()
    put("conf_fuzz", "example", example[:8192])
    put("conf_fuzz", "sections", b"[server]\r\nlisten = unix:/run/w.sock\n\n; c\n"
        b"[policy.team-a]\nallowed = ls cat\n[limits]\nmax = 3  \n")
    put("conf_fuzz", "tokens", b"# tokens\ndefault " + b"0123456789abcdef" * 4 + b"\n"
        b"team.a\t" + b"fedcba9876543210" * 4 + b"\n\n")


def audit():
    prev = "0" * 64
    lines = []
    events = [
        {"event": "write", "path": "a.txt", "size": 5,
         "sha256": hashlib.sha256(b"hello").hexdigest()},
        {"event": "command", "process_id": "p1", "tag": "", "argv": ["ls", "-la"], "cwd": ".",
         "cause": "EXITED", "background": False, "exit_code": 0, "signal": 0,
         "duration_ms": 3, "stdout_bytes": 10, "stderr_bytes": 0, "pty_bytes": 0},
        {"event": "move", "path": "a.txt", "to_path": "b.txt"},
        {"event": "remove", "path": "b.txt", "removed": 1},
    ]
    for seq, ev in enumerate(events, 1):
        o = dict(ev, seq=seq, ts=1700000000000 + seq, prev=prev)
        body = json.dumps(o, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        o["hash"] = hashlib.sha256(body.encode()).hexdigest()
        line = json.dumps(o, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        prev = hashlib.sha256(line.encode()).hexdigest()
        lines.append(line.encode() + b"\n")
    put("audit_fuzz", "valid", b"".join(lines))
    put("audit_fuzz", "torn", b"".join(lines)[:-20])
    put("audit_fuzz", "edited", b"".join(lines).replace(b"b.txt", b"c.txt", 1))
    put("audit_fuzz", "swapped", lines[1] + lines[0])


def tar():
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(ROOT, "tests/corpus/archives/make.py"), tmp],
                       check=True)
        # Plain tar is 10 KiB at least: a few stay plain, the rest are
        # gzipped (the extractor reads both the same way past the codec).
        plain = ("absolute.tar", "dotdot.tar", "hardlink_out.tar")
        paths = glob.glob(os.path.join(tmp, "*.tar")) + glob.glob(os.path.join(tmp, "*.tgz"))
        for path in sorted(paths):
            with open(path, "rb") as f:
                data = f.read()
            name = os.path.basename(path)
            gz = name.endswith(".tgz")
            if gz or name not in plain:
                packed = data if gz else gzip.compress(data, 9)
                if len(packed) > 3 * 1024:
                    continue
                data, gz = packed, True
            put("tar_fuzz", name, bytes([1 if gz else 0]) + data)

    def tarball(entries):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
            for name, data in entries:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 1700000000
                tf.addfile(info, io.BytesIO(data))
        return gzip.compress(buf.getvalue(), 9)
    # MERGE into out/, REPLACE out/, MERGE into the root.
    small = tarball([("keep.txt", b"new\n"), ("dir/x", b"x"), ("y", b"y")])
    put("tar_fuzz", "merge_out", b"\x05" + small)
    put("tar_fuzz", "replace_out", b"\x03" + small)
    put("tar_fuzz", "merge_root", b"\x0d" + small)
    # Entry names are the archive's: one refused with a printf directive in
    # its name once reached a format string (the refusal's "entry").
    put("tar_fuzz", "format_entry", b"\x01" + tarball([("/%s%s%s%s%s%s%s%s%n", b"x")]))
    put("tar_fuzz", "format_entry_dotdot",
        b"\x01" + tarball([("../%s%s%s%s%s%s%s%s%n", b"x"), ("%n%n%n", b"y")]))


def main():
    for f in (guard, paths, wire, frames, agent_wire, agent_exit, docker_api, conf, audit, tar,
              tar_out):
        f()


if __name__ == "__main__":
    main()
