"""End-to-end tests of the Python client against a real workspaced server.

The server binary comes from $WORKSPACED_BIN (under Bazel: the one built
from //server:workspaced). Each test class starts its own server with a
fresh state directory, listening on a unix socket (the server's default
kind of listener) unless the test is about TCP; nothing is mocked except the
clock of the retry-schedule test.
"""

import hashlib
import importlib.util
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc

import workspaced
from workspaced import ExitCause, RetryPolicy

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "agent_loop.py")

ALLOWED = ["sh", "cat", "echo", "sleep", "wc", "head", "true", "false"]
CAPS = {"fs": {}, "shell": {"allowed_commands": ALLOWED}}

# The operator's policy a server needs before it opens local-bash, which
# runs commands as the server's own user without isolation and is off by
# default.
LOCAL_BASH_POLICY = ["--policy-providers", "memory,local-bash,local-sandbox,docker"]


def server_binary():
    path = os.environ.get("WORKSPACED_BIN")
    if not path:
        raise RuntimeError("WORKSPACED_BIN is not set: it must name the workspaced server binary")
    if not os.access(path, os.X_OK):
        raise RuntimeError("WORKSPACED_BIN=%s is not an executable file" % path)
    return path


def describe_returncode(returncode):
    """"exit status N" or "killed by signal N (NAME)" for a Popen returncode."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "?"
        return "killed by signal %d (%s)" % (-returncode, name)
    return "exit status %d" % returncode


def stop_cleanly(proc, what, log_path):
    """Stops a child the suite started (a server, a front) with SIGTERM.

    Returns None when it exited 0, else what went wrong followed by its
    stderr: under the sanitizer build a leak or a crash at shutdown makes
    the exit status non-zero, and the report is on stderr. A child that had
    already ended before it was stopped crashed under the tests and fails
    as well."""
    if proc.poll() is not None:
        problem = "%s ended before the suite stopped it (%s)" % (what, describe_returncode(proc.returncode))
    else:
        proc.send_signal(signal.SIGTERM)
        try:
            # A drain is bounded by the server's grace periods; never hang
            # the suite on one that is not.
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            problem = "%s did not exit within 60 s of SIGTERM" % what
        else:
            if proc.returncode == 0:
                return None
            problem = "%s did not exit cleanly after SIGTERM (%s)" % (what, describe_returncode(proc.returncode))
    with open(log_path, errors="replace") as f:
        return problem + "; its stderr:\n" + f.read()


def stop_all(*stoppables):
    """Stops every one of `stoppables` (in order), then raises one
    AssertionError naming every one that did not exit cleanly."""
    problems = []
    for s in stoppables:
        try:
            s.stop()
        except AssertionError as e:
            problems.append(str(e))
    if problems:
        raise AssertionError("\n\n".join(problems))


# The longest path a unix socket address holds (sun_path is 108 bytes with
# its terminating NUL).
MAX_SOCKET_PATH = 107


class Server:
    """A workspaced process, stopped with SIGTERM.

    It listens on the unix socket ws.sock in a fresh temporary directory,
    or with tcp=True on 127.0.0.1:<free port>, which the server opens only
    when extra_args give it authentication (--tokens-file or
    --tls-client-ca). extra_args: more flags (TLS, tokens, policy). stop()
    raises AssertionError unless the server exits 0 after the SIGTERM."""

    def __init__(self, extra_args=(), tcp=False):
        self.tmp = tempfile.mkdtemp(prefix="wsd-", dir=os.environ.get("TEST_TMPDIR"))
        # Workspace uids reach their directories under the state directory.
        os.chmod(self.tmp, 0o711)
        self.state = os.path.join(self.tmp, "state")
        self.stopped = False
        self.socket_dir = None
        if tcp:
            listen = "127.0.0.1:0"
        else:
            sock = os.path.join(self.tmp, "ws.sock")
            if len(sock) > MAX_SOCKET_PATH:
                # Bazel's temporary directories can be too deep for a
                # socket path; the system's temporary directory is not.
                self.socket_dir = tempfile.mkdtemp(prefix="wsd-", dir="/tmp")
                sock = os.path.join(self.socket_dir, "ws.sock")
            listen = "unix:" + sock
        self.listen = listen
        self.tcp = tcp
        self.extra_args = list(extra_args)
        # The server's log (one JSON line per command) goes to a file, shown
        # only when the server fails to start or to stop cleanly, so the
        # test output stays the unittest report.
        self.log_path = os.path.join(self.tmp, "server.log")
        self._spawn()

    def _spawn(self):
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [server_binary(), "--listen", self.listen, "--state-dir", self.state, *self.extra_args],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        found = {}

        def read_banner():
            try:
                for line in self.proc.stdout:
                    m = re.match(r"workspaced listening on (\S+)", line)
                    if m:
                        found["addr"] = m.group(1)
                        break
                # Keep draining so the server never blocks on a full pipe.
                for _ in self.proc.stdout:
                    pass
            except (ValueError, OSError):  # the pipe was closed by stop()
                pass

        threading.Thread(target=read_banner, daemon=True).start()
        deadline = time.monotonic() + 20
        while "addr" not in found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                if self.proc.poll() is None:
                    self.proc.kill()
                self.proc.wait()
                self.stopped = True
                self.proc.stdout.close()
                self.log.close()
                if self.socket_dir:
                    shutil.rmtree(self.socket_dir, ignore_errors=True)
                with open(self.log_path) as f:
                    raise RuntimeError(
                        "workspaced did not start (%s):\n%s" % (describe_returncode(self.proc.returncode), f.read())
                    )
            time.sleep(0.02)
        self.address = found["addr"]
        # The banner names the listener: a server that fell back to another
        # one would take the suite off the unix socket unnoticed.
        if not self.tcp and self.address != self.listen:
            self.stop()
            raise AssertionError("workspaced listens on %s, not on %s" % (self.address, self.listen))

    def restart(self):
        """Stops the server with SIGTERM (AssertionError unless it exits 0)
        and starts it again on the same listener and state directory, as
        an operator's restart would."""
        problem = stop_cleanly(self.proc, "workspaced", self.log_path)
        self.proc.stdout.close()
        self.log.close()
        if problem:
            self.stopped = True
            raise AssertionError(problem)
        if not self.tcp and self.listen.startswith("unix:"):
            # A socket file left behind would be in the way of the new listener.
            try:
                os.unlink(self.listen[len("unix:") :])
            except FileNotFoundError:
                pass
        self._spawn()

    def stop(self):
        """SIGTERM; AssertionError (with the server's stderr) unless it
        exits 0. Only the first call does anything."""
        if self.stopped:
            return
        self.stopped = True
        problem = stop_cleanly(self.proc, "workspaced", self.log_path)
        self.proc.stdout.close()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        if problem:
            raise AssertionError(problem)


class ServerTestCase(unittest.TestCase):
    """One server and one client per test class; a fresh workspace per test."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(LOCAL_BASH_POLICY)
        cls.client = workspaced.connect(cls.server.address, token="test-token")

    @classmethod
    def tearDownClass(cls):
        # Raises when the server did not exit cleanly: the class fails.
        cls.client.close()
        cls.server.stop()

    def setUp(self):
        self.ws = self.client.open("local-bash", CAPS)
        self.addCleanup(self.ws.close)


class WorkspaceTest(ServerTestCase):
    def test_providers_and_health(self):
        kinds = [p.kind for p in self.client.providers()]
        self.assertEqual(kinds, ["memory", "local-bash", "local-sandbox", "docker"])
        self.assertEqual(self.client.health(), "SERVING")

    def test_list_and_describe(self):
        ids = [w.id for w in self.client.list()]
        self.assertIn(self.ws.id, ids)
        d = self.ws.describe()
        self.assertEqual(d.provider, "local-bash")
        self.assertEqual(list(d.capabilities.shell.allowed_commands), ALLOWED)

    def test_resolve_by_ref(self):
        self.ws.write_file("marker", b"here")
        again = self.client.resolve(self.ws.ref)
        self.assertEqual(again.id, self.ws.id)
        self.assertEqual(again.read_file("marker"), b"here")
        # The token bytes alone are as good as the message.
        self.assertEqual(self.client.resolve(self.ws.ref.token).id, self.ws.id)

    def test_close_is_idempotent(self):
        ws = self.client.open("memory")
        self.assertFalse(ws.close())
        self.assertTrue(ws.close())
        self.assertTrue(ws.closed)

    def test_context_manager_closes(self):
        with self.client.open("memory") as ws:
            ws.write_file("f", b"x")
            wid = ws.id
        self.assertNotIn(wid, [w.id for w in self.client.list()])
        with self.assertRaises(workspaced.NoSuchWorkspace):
            ws.stat("f")
        # Resolving the ref of a closed workspace says it is gone.
        with self.assertRaises(workspaced.WorkspaceEvicted):
            self.client.resolve(ws.ref)
        self.assertTrue(ws.closed)
        self.assertEqual(ws.id, wid)


class FileTest(ServerTestCase):
    def test_write_read_roundtrip(self):
        resp = self.ws.write_file("dir/sub/hello.txt", "hello\n", create_parents=True)
        self.assertEqual(resp.bytes_written, 6)
        self.assertEqual(resp.sha256, hashlib.sha256(b"hello\n").hexdigest())
        self.assertEqual(self.ws.read_file("dir/sub/hello.txt"), b"hello\n")
        self.assertEqual(self.ws.read_file("dir/sub/hello.txt", offset=1, length=3), b"ell")
        info = self.ws.stat("dir/sub/hello.txt")
        self.assertEqual(info.size, 6)
        self.assertEqual(info.type, workspaced.pb_common.FILE_TYPE_REGULAR)

    def test_empty_file(self):
        self.ws.write_file("empty", b"")
        self.assertEqual(self.ws.read_file("empty"), b"")
        self.assertEqual(self.ws.stat("empty").size, 0)

    def test_multi_mib_streamed_write_and_read(self):
        # 9 MiB + 123 bytes of non-repeating data, written from a generator
        # of odd-sized pieces and read back as a chunk stream.
        blob = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range((9 << 20) // 32)) + os.urandom(123)
        pieces = (blob[i : i + 700001] for i in range(0, len(blob), 700001))
        resp = self.ws.write_file("big.bin", pieces)
        self.assertEqual(resp.bytes_written, len(blob))
        self.assertEqual(resp.sha256, hashlib.sha256(blob).hexdigest())
        chunks = list(self.ws.read_file_stream("big.bin"))
        self.assertGreater(len(chunks), 1, "a multi-MiB file should arrive in several chunks")
        self.assertTrue(all(len(c) <= 256 << 10 for c in chunks))
        self.assertEqual(b"".join(chunks), blob)

    def test_write_from_reader(self):
        import io

        data = os.urandom(3 << 20)
        self.ws.write_file("r.bin", io.BytesIO(data), mode=0o600)
        self.assertEqual(self.ws.read_file("r.bin"), data)
        self.assertEqual(self.ws.stat("r.bin").mode & 0o777, 0o600)

    def test_dir_ops_glob_grep_edit(self):
        self.ws.make_dir("src/pkg", parents=True)
        self.ws.write_file("src/pkg/a.py", "def f():\n    return 1\n")
        self.ws.write_file("src/b.txt", "nothing\nTODO: later\n")
        names = [e.path for e in self.ws.list_dir("src", depth=2)]
        self.assertEqual(names, ["src/b.txt", "src/pkg", "src/pkg/a.py"])
        self.assertEqual([m.path for m in self.ws.glob("**/*.py")], ["src/pkg/a.py"])

        results = self.ws.grep("todo", ignore_case=True)
        matches = list(results)
        self.assertEqual([(m.path, m.line_number, m.line) for m in matches], [("src/b.txt", 2, b"TODO: later")])
        self.assertEqual(results.summary.matches, 1)

        edit = self.ws.edit_file("src/pkg/a.py", "return 1", "return 2")
        self.assertEqual(edit.replacements, 1)
        self.assertEqual(self.ws.read_file("src/pkg/a.py"), b"def f():\n    return 2\n")

        self.ws.move("src/b.txt", "src/c.txt")
        self.assertFalse(self.ws.exists("src/b.txt"))
        self.assertTrue(self.ws.exists("src/c.txt"))
        # src, src/pkg, src/pkg/a.py, src/c.txt
        self.assertEqual(self.ws.remove("src", recursive=True), 4)
        self.assertFalse(self.ws.exists("src"))


    def test_listing_says_whether_truncated(self):
        for name in ("a.txt", "b.txt", "c.txt"):
            self.ws.write_file(name, b"x")
        for listing in (self.ws.list_dir(".", max_entries=2), self.ws.glob("*.txt", max_results=2)):
            self.assertEqual(len(listing), 2)
            self.assertTrue(listing.truncated)
            # The server says why once it knows (its own limit here); one
            # that predates reasons leaves it empty.
            self.assertIn(listing.truncated_reason, ("", "max_results"))
        whole = self.ws.glob("*.txt")
        self.assertEqual([m.path for m in whole], ["a.txt", "b.txt", "c.txt"])
        self.assertFalse(whole.truncated)
        self.assertEqual(whole.truncated_reason, "")


class ExecTest(ServerTestCase):
    def test_output_streams_before_exit(self):
        # The command cannot go past `read` before the test writes a line,
        # so output held back until the exit would never bring "a" (the
        # test would hang until its deadline): no timing involved.
        proc = self.ws.exec(["sh", "-c", "echo a; read line; echo b"], stdin=True, tag="held")
        self.assertGreater(proc.pid, 0)
        events = iter(proc)
        first = next(events)
        self.assertEqual(first.data, b"a\n")
        self.assertIsNone(proc.exited, "'a' arrived only after the exit")
        self.assertTrue([p for p in self.ws.ps() if p.tag == "held" and p.running])
        proc.write_stdin(b"go\n")
        proc.close_stdin()
        rest = b"".join(ev.data for ev in events)
        self.assertEqual(rest, b"b\n")
        result = proc.wait()
        self.assertEqual(result.cause, ExitCause.EXITED)
        self.assertEqual(result.exit_code, 0)
        self.assertEqual(result.stdout.bytes_total, 4)

    def test_stderr_and_exit_code(self):
        proc = self.ws.exec("sh -c 'echo oops >&2; exit 3'")
        out, err, result = proc.communicate()
        self.assertEqual((out, err), (b"", b"oops\n"))
        self.assertEqual(result.cause, ExitCause.EXITED)
        self.assertEqual(result.exit_code, 3)
        self.assertFalse(result.ok)

    def test_stdin_roundtrip(self):
        proc = self.ws.exec(["cat"], stdin=True)
        proc.write_stdin(b"first line\n")
        first = next(iter(proc))
        self.assertEqual(first.data, b"first line\n")  # echoed while stdin is still open
        proc.write_stdin(b"x" * (3 << 20))
        proc.close_stdin()
        out, _, result = proc.communicate()
        self.assertEqual(out, b"x" * (3 << 20))
        self.assertEqual(result.cause, ExitCause.EXITED)
        self.assertEqual(result.stdout.bytes_total, len(b"first line\n") + (3 << 20))

    def test_run(self):
        res = self.ws.run(["wc", "-c"], stdin_data=b"12345")
        self.assertEqual(res.stdout.strip(), b"5")
        self.assertTrue(res.ok)
        self.assertTrue(res.process_id)

    def test_cancel_kills_command(self):
        proc = self.ws.exec(["sleep", "30"], tag="to-cancel")
        start = time.monotonic()
        proc.cancel()
        result = proc.wait()
        self.assertEqual(result.cause, ExitCause.CANCELLED)
        self.assertLess(time.monotonic() - start, 10)
        info = [p for p in self.ws.ps() if p.tag == "to-cancel"]
        self.assertEqual(len(info), 1)
        self.assertFalse(info[0].running)
        self.assertEqual(info[0].exited.cause, ExitCause.CANCELLED)

    def test_timeout_cause(self):
        proc = self.ws.exec(["sh", "-c", "echo started; sleep 30"], command_timeout=0.5)
        out, _, result = proc.communicate()
        self.assertEqual(out, b"started\n")
        self.assertEqual(result.cause, ExitCause.TIMEOUT)
        self.assertLess(result.wall_time_ms, 10000)
        self.assertEqual(self.ws.run(["sleep", "30"], command_timeout=0.3).exited.cause, ExitCause.TIMEOUT)

    def test_signal_and_kill(self):
        proc = self.ws.exec(["sleep", "30"], stdin=True)
        proc.signal(signal.SIGTERM)
        result = proc.wait()
        self.assertEqual(result.cause, ExitCause.SIGNALED)
        self.assertEqual(result.signal, signal.SIGTERM)

        bg = self.ws.exec(["sleep", "30"], tag="bg", background=True)
        self.assertTrue([p for p in self.ws.ps() if p.tag == "bg" and p.running])
        self.ws.kill("bg")
        self.assertEqual(bg.wait().signal, signal.SIGKILL)

    def test_attach_by_tag_replays_output(self):
        proc = self.ws.exec(["sh", "-c", "echo one; echo two; echo three"], tag="replay")
        first = proc.wait()
        again = self.ws.attach("replay")
        self.assertEqual(again.id, proc.id)
        out = b"".join(ev.data for ev in again if isinstance(ev, workspaced.Output))
        self.assertEqual(out, b"one\ntwo\nthree\n")
        self.assertEqual(again.wait().cause, first.cause)
        # From an offset: only what follows it.
        tail = self.ws.attach("replay", offset=4)
        self.assertEqual(tail.communicate()[0], b"two\nthree\n")
        # By id as well.
        self.assertEqual(self.ws.attach(id=proc.id).communicate()[0], b"one\ntwo\nthree\n")
        with self.assertRaises(RuntimeError):
            tail.write_stdin(b"x")  # read-only handle
        with self.assertRaises(workspaced.NoSuchProcess):
            self.ws.attach("no-such-tag")

    def test_attach_to_background_process(self):
        proc = self.ws.exec(["sh", "-c", "echo early; sleep 1; echo late"], tag="bgr", background=True)
        proc.cancel()  # the stream ends; a background process keeps running
        att = self.ws.attach("bgr")
        out, _, result = att.communicate()
        self.assertEqual(out, b"early\nlate\n")
        self.assertEqual(result.cause, ExitCause.EXITED)


class ErrorTest(ServerTestCase):
    def test_path_escape(self):
        with self.assertRaises(workspaced.PathEscape) as cm:
            self.ws.read_file("../x")
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(cm.exception.reason, "PATH_ESCAPE")
        with self.assertRaises(workspaced.PathEscape):
            self.ws.write_file("../x", b"no")

    def test_command_not_allowed(self):
        with self.assertRaises(workspaced.CommandNotAllowed) as cm:
            self.ws.exec(["ls"])
        self.assertEqual(cm.exception.code, grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(cm.exception.metadata.get("token"), "ls")
        with self.assertRaises(workspaced.CommandNotAllowed):
            self.ws.run(["rm", "-rf", "."])

    def test_no_such_file(self):
        with self.assertRaises(workspaced.NoSuchFile) as cm:
            self.ws.read_file("missing.txt")
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(workspaced.NoSuchFile):
            self.ws.stat("missing/deeper")

    def test_no_such_workspace_after_close(self):
        ws = self.client.open("local-bash", CAPS)
        ws.close()
        with self.assertRaises(workspaced.NoSuchWorkspace):
            ws.write_file("f", b"x")
        with self.assertRaises(workspaced.NoSuchWorkspace):
            ws.exec(["true"])

    def test_local_bash_needs_the_operators_policy(self):
        # The suite's servers open local-bash only because their policy
        # lists it; by default the server refuses it, naming the rule.
        server = Server()
        self.addCleanup(server.stop)
        with workspaced.connect(server.address) as client:
            with self.assertRaises(workspaced.PolicyDenied) as cm:
                client.open("local-bash", CAPS)
            self.assertEqual(cm.exception.code, grpc.StatusCode.PERMISSION_DENIED)
            self.assertEqual(cm.exception.reason, "POLICY")
            self.assertEqual(cm.exception.rule, "providers")
            self.assertEqual(cm.exception.metadata.get("provider"), "local-bash")
            self.assertFalse(cm.exception.transient)
            self.assertEqual(client.list(), [])

    def test_capability_missing(self):
        with self.assertRaises(workspaced.CapabilityMissing) as cm:
            self.client.open("memory", {"fs": {}, "shell": {"allowed_commands": ["true"]}})
        self.assertEqual(cm.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(cm.exception.metadata.get("capability"), "shell")
        self.assertFalse(cm.exception.transient)

    def test_bad_ref(self):
        token = bytearray(self.ws.ref.token)
        token[len(token) // 2] ^= 0x01
        with self.assertRaises(workspaced.BadRef):
            self.client.resolve(bytes(token))

    def test_exists_is_typed(self):
        self.ws.write_file("f", b"x")
        with self.assertRaises(workspaced.AlreadyExists) as cm:
            self.ws.write_file("f", b"y", if_absent=True)
        self.assertEqual(cm.exception.reason, "EXISTS")
        self.assertEqual(cm.exception.code, grpc.StatusCode.ALREADY_EXISTS)

    def test_call_deadline_is_not_the_commands_timeout(self):
        # The call's deadline fires first: the client gets
        # DEADLINE_EXCEEDED, not a result, although the command's own
        # limit is far away.
        with self.assertRaises(workspaced.DeadlineExceeded) as cm:
            self.ws.run(["sleep", "30"], command_timeout=60, timeout=0.3)
        self.assertEqual(cm.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        # And the command's own limit, with no deadline, ends in a result.
        self.assertEqual(self.ws.run(["sleep", "30"], command_timeout=0.2).exited.cause, ExitCause.TIMEOUT)

    def test_client_default_deadline(self):
        # The default applies to a call given no timeout= ...
        with silent_server() as address, workspaced.connect(address, timeout=0.2) as silent:
            with self.assertRaises(workspaced.DeadlineExceeded) as cm:
                silent.list()
            self.assertEqual(cm.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
            # ... and a call's own timeout= fires as well; it replaces the
            # default (None: no deadline at all).
            with self.assertRaises(workspaced.DeadlineExceeded):
                silent.health(timeout=0.1)
            self.assertEqual(
                [silent._deadline(workspaced.USE_DEFAULT), silent._deadline(5), silent._deadline(None)], [0.2, 5, None]
            )
        # Calls that wait for a command do not take the default: a command
        # that sleeps longer than it still ends in a result.
        with workspaced.connect(self.server.address, timeout=0.2) as client:
            ws = client.open("local-bash", CAPS)
            try:
                self.assertTrue(ws.run(["sleep", "0.6"]).ok)
                self.assertTrue(ws.exec(["sleep", "0.6"]).wait().ok)
                self.assertIsInstance(client.list(timeout=None), list)
            finally:
                ws.close()
        with self.assertRaises(ValueError):
            workspaced.connect(self.server.address, timeout=-1)

    def test_server_info_names_the_servers_version(self):
        with open(os.environ["WORKSPACED_VERSION_FILE"]) as f:
            version = f.read().strip()
        self.assertEqual(self.client.server_info().version, version)
        self.assertEqual(self.ws.describe().server.version, version)

    def test_conflict(self):
        self.ws.write_file("f", b"v1")
        with self.assertRaises(workspaced.Conflict) as cm:
            self.ws.write_file("f", b"v2", if_match="0" * 64)
        self.assertEqual(cm.exception.metadata.get("actual_sha256"), hashlib.sha256(b"v1").hexdigest())
        self.assertEqual(self.ws.read_file("f"), b"v1")


class FakeClock:
    """Records sleeps instead of sleeping."""

    def __init__(self):
        self.sleeps = []

    def sleep(self, seconds):
        self.sleeps.append(seconds)


def transient_error():
    return workspaced.WorkspaceFailed(
        grpc.StatusCode.UNAVAILABLE, "WORKSPACE_FAILED", "backend restarting", {"transient": "true"}
    )


class RetryPolicyTest(unittest.TestCase):
    """The backoff schedule, deterministically (injected sleep and random)."""

    def test_backoff_schedule_without_jitter_effect(self):
        clock = FakeClock()
        # random() == 0.5 puts the jitter factor at exactly 1.
        policy = RetryPolicy(max_attempts=5, initial_backoff=0.2, max_backoff=1.0, sleep=clock.sleep, random=lambda: 0.5)
        calls = []

        def flaky():
            calls.append(1)
            if len(calls) < 5:
                raise transient_error()
            return "opened"

        self.assertEqual(policy.call(flaky), "opened")
        self.assertEqual(len(calls), 5)
        self.assertEqual([round(s, 6) for s in clock.sleeps], [0.2, 0.4, 0.8, 1.0])

    def test_jitter_bounds(self):
        low = RetryPolicy(initial_backoff=1.0, max_backoff=10, jitter=0.25, random=lambda: 0.0)
        high = RetryPolicy(initial_backoff=1.0, max_backoff=10, jitter=0.25, random=lambda: 0.999999)
        self.assertAlmostEqual(low.backoff(2), 1.5)
        self.assertAlmostEqual(high.backoff(2), 2.5, places=4)
        # Jitter never pushes past the cap.
        capped = RetryPolicy(initial_backoff=1.0, max_backoff=2.0, jitter=0.5, random=lambda: 0.999999)
        self.assertLessEqual(capped.backoff(5), 2.0)

    def test_gives_up_after_max_attempts(self):
        clock = FakeClock()
        policy = RetryPolicy(max_attempts=3, sleep=clock.sleep, random=lambda: 0.5)
        calls = []

        def always():
            calls.append(1)
            raise transient_error()

        with self.assertRaises(workspaced.WorkspaceFailed):
            policy.call(always)
        self.assertEqual(len(calls), 3)
        self.assertEqual(len(clock.sleeps), 2)

    def test_non_transient_not_retried(self):
        clock = FakeClock()
        policy = RetryPolicy(sleep=clock.sleep)
        calls = []

        def denied():
            calls.append(1)
            raise workspaced.CapabilityMissing(grpc.StatusCode.FAILED_PRECONDITION, "CAPABILITY_MISSING", "", {})

        with self.assertRaises(workspaced.CapabilityMissing):
            policy.call(denied)
        self.assertEqual((len(calls), clock.sleeps), (1, []))

    def test_max_attempts_one_disables(self):
        clock = FakeClock()
        with self.assertRaises(workspaced.WorkspaceFailed):
            RetryPolicy(max_attempts=1, sleep=clock.sleep).call(lambda: (_ for _ in ()).throw(transient_error()))
        self.assertEqual(clock.sleeps, [])


def varint(n):
    """n as a protobuf base-128 varint."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def field(number, wire_type, payload):
    """One field on the wire: its tag, then (for length-delimited fields)
    the length, then the payload."""
    if wire_type == 2:
        payload = varint(len(payload)) + payload
    return varint(number << 3 | wire_type) + payload


class WireTest(unittest.TestCase):
    """The fields for per-workspace users, runtimes, caps and truncation
    reasons, at the numbers the protos give them: what the client sends is
    checked byte for byte, what it reads is decoded from hand-made bytes,
    so a renumbered field or an option the client drops fails here."""

    def test_open_sends_runtime_and_local_bash_caps(self):
        from workspaced.client import _open_request

        req = _open_request("docker", image="busybox", runtime="runsc")
        self.assertEqual(req.docker.SerializeToString(), field(1, 2, b"busybox") + field(8, 2, b"runsc"))
        req = _open_request("local-bash", CAPS, pids_limit=64, memory_mb=512, cpus=1.5)
        self.assertEqual(
            req.local_bash.SerializeToString(),
            field(1, 0, varint(64)) + field(2, 0, varint(512)) + field(3, 1, struct.pack("<d", 1.5)),
        )
        self.assertEqual(list(req.capabilities.shell.allowed_commands), ALLOWED)
        # A ready message is sent as it is.
        cfg = workspaced.pb_common.DockerConfig(image="busybox", runtime="runsc")
        self.assertEqual(_open_request(cfg).docker.runtime, "runsc")

    def test_describe_providers_and_listings_decode(self):
        from workspaced._proto import filesystem_pb2, providers_pb2, workspaces_pb2

        d = workspaces_pb2.DescribeResponse.FromString(
            field(17, 0, varint(524289)) + field(18, 0, varint(524290)) + field(15, 2, field(23, 2, b"runsc"))
        )
        self.assertEqual((d.uid, d.gid, d.container.runtime), (524289, 524290, "runsc"))

        p = providers_pb2.ProviderInfo.FromString(
            field(1, 2, b"docker")
            + field(7, 2, field(1, 2, b"runc") + field(2, 0, varint(1)))
            + field(7, 2, field(1, 2, b"runsc") + field(3, 2, b"not registered"))
            + field(8, 2, b"cgroup-v2")
        )
        self.assertEqual(
            [(r.name, r.usable, r.reason) for r in p.runtimes],
            [("runc", True, ""), ("runsc", False, "not registered")],
        )
        self.assertEqual(p.limits_mechanism, "cgroup-v2")

        for cls in (filesystem_pb2.ListDirResponse, filesystem_pb2.GlobResponse):
            m = cls.FromString(field(2, 0, varint(1)) + field(3, 2, b"entries_budget"))
            self.assertEqual(m.truncated_reason, "entries_budget")
        g = filesystem_pb2.GrepSummary.FromString(field(5, 0, varint(1)) + field(6, 2, b"time_budget"))
        self.assertEqual(g.truncated_reason, "time_budget")


class RetryAgainstServerTest(ServerTestCase):
    def test_real_non_transient_error_is_not_retried(self):
        clock = FakeClock()
        policy = RetryPolicy(max_attempts=4, sleep=clock.sleep)
        before = len(self.client.list())
        with self.assertRaises(workspaced.CapabilityMissing):
            self.client.open("memory", {"shell": {"allowed_commands": ["true"]}}, retry=policy)
        self.assertEqual(clock.sleeps, [])
        self.assertEqual(len(self.client.list()), before)

    def test_unreachable_server_is_retried(self):
        # UNAVAILABLE from a port nobody listens on is transient: retried,
        # then raised with no ErrorInfo (reason "").
        with refused_port() as port:
            clock = FakeClock()
            with workspaced.connect("127.0.0.1:%d" % port) as dead:
                with self.assertRaises(workspaced.WorkspacedError) as cm:
                    dead.open("memory", retry=RetryPolicy(max_attempts=3, sleep=clock.sleep))
        self.assertIs(type(cm.exception), workspaced.WorkspacedError)
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(cm.exception.reason, "")
        self.assertEqual(len(clock.sleeps), 2)

    def test_missing_unix_socket_is_retried(self):
        # A socket path nobody listens on is UNAVAILABLE as well, naming the
        # path: a server that is down or not yet started.
        missing = os.path.join(tempfile.mkdtemp(prefix="nosock-", dir="/tmp"), "ws.sock")
        self.addCleanup(os.rmdir, os.path.dirname(missing))
        clock = FakeClock()
        with workspaced.connect("unix:" + missing) as dead:
            with self.assertRaises(workspaced.WorkspacedError) as cm:
                dead.open("memory", retry=RetryPolicy(max_attempts=3, sleep=clock.sleep))
        self.assertIs(type(cm.exception), workspaced.WorkspacedError)
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn(missing, cm.exception.message)
        self.assertEqual(len(clock.sleeps), 2)


class refused_port:
    """A loopback port that refuses connections for the duration of the
    with block: its socket is bound but never listens, so no other process
    can start listening there meanwhile (a port merely found free could be
    taken)."""

    def __enter__(self):
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc):
        self.sock.close()
        return False


class silent_server:
    """A unix socket address that takes connections and never answers
    (bound and listening, never accepted): a call there waits for the
    server's HTTP/2 settings until its deadline passes, so a deadline is
    the only way it can end."""

    def __enter__(self):
        import socket

        self.dir = tempfile.mkdtemp(prefix="wsd-silent-", dir="/tmp")
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(os.path.join(self.dir, "s.sock"))
        self.sock.listen(16)
        return "unix:" + os.path.join(self.dir, "s.sock")

    def __exit__(self, *exc):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False


class without_environment:
    """Removes the named environment variables for the with block."""

    def __init__(self, *names):
        self.names = names

    def __enter__(self):
        self.old = {k: os.environ.pop(k, None) for k in self.names}

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is not None:
                os.environ[k] = v
        return False


class ConnectTest(unittest.TestCase):
    def test_unix_socket_address(self):
        server = Server()
        self.addCleanup(server.stop)
        self.assertTrue(server.address.startswith("unix:/"), server.address)
        path = server.address[len("unix:") :]
        # gRPC's own spelling of an absolute path names the same socket.
        for address in (server.address, "unix://" + path):
            with self.subTest(address=address):
                with workspaced.connect(address, token="") as client:
                    self.assertEqual(client.health(), "SERVING")
                    with client.open("memory") as ws:
                        ws.write_file("f.txt", b"over a unix socket\n")
                        self.assertEqual(ws.read_file("f.txt"), b"over a unix socket\n")
                        self.assertIn(ws.id, [w.id for w in client.list()])

    def test_malformed_unix_addresses_fail_at_connect(self):
        # Without the check, "unix://tmp/ws.sock" fails only on the first
        # call, as an UNKNOWN "Failed to create ... channel", and a relative
        # path depends on the current directory.
        for address in ("unix://tmp/ws.sock", "unix:ws.sock", "unix:", "unix:/", "unix://"):
            with self.subTest(address=address):
                with self.assertRaises(ValueError) as cm:
                    workspaced.connect(address)
                self.assertIn("unix:/ABSOLUTE/PATH", str(cm.exception))

    def test_address_and_token_from_environment(self):
        server = Server()
        self.addCleanup(server.stop)
        env = {"WORKSPACED_ADDR": server.address, "WORKSPACED_TOKEN": "abc"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            client = workspaced.connect()
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        with client:
            self.assertEqual(client.address, server.address)
            self.assertEqual(client._metadata, (("authorization", "Bearer abc"),))
            self.assertEqual(client.health(), "SERVING")

    def test_default_address_is_the_servers_default_socket(self):
        self.assertEqual(workspaced.DEFAULT_ADDRESS, "unix:/run/workspaced/workspaced.sock")
        # The server's --help shows its default listener in brackets.
        out = subprocess.run([server_binary(), "--help"], capture_output=True, text=True, timeout=30)
        m = re.search(r"--listen ADDR\s.*?\[([^\]]+)\]", out.stdout + out.stderr, re.S)
        self.assertIsNotNone(m, "no default in workspaced --help:\n" + out.stdout + out.stderr)
        self.assertEqual(m.group(1), workspaced.DEFAULT_ADDRESS)
        # Connecting is lazy: no server needs to listen there.
        with without_environment("WORKSPACED_ADDR"):
            with workspaced.connect() as client:
                self.assertEqual(client.address, workspaced.DEFAULT_ADDRESS)


class ExampleTest(ServerTestCase):
    def setUp(self):
        pass  # the example opens its own workspace

    def run_example(self, address=None, env=None):
        argv = [sys.executable, EXAMPLE] + ([address] if address else [])
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(os.environ, **(env or {})))
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        return out.stdout.splitlines()

    def test_agent_loop_example_runs_commands_in_the_sandbox(self):
        lines = self.run_example(self.server.address)
        self.assertRegex(lines[0], r"^opened workspace ws_[0-9a-f]{32} \(local-sandbox\)$")
        self.assertIn("exit: cause=EXITED code=0", "\n".join(lines))
        self.assertIn("sorted.txt says: relax, ship it, write tests", lines)
        self.assertEqual(lines[-1], "workspace closed")
        # wc's output is streamed between the write and its exit record,
        # behind "[stdout] ".
        start = lines.index("wrote notes.txt") + 1
        end = [i for i, l in enumerate(lines) if l.startswith("exit:")][0]
        self.assertEqual("".join(lines[start:end]).replace("[stdout] ", "").split(), ["3", "notes.txt"])
        # It closed its workspace.
        opened = lines[0].split()[2]
        self.assertNotIn(opened, [w.id for w in self.client.list()])

    def test_agent_loop_example_takes_the_address_from_the_environment(self):
        lines = self.run_example(env={"WORKSPACED_ADDR": self.server.address})
        self.assertIn("sorted.txt says: relax, ship it, write tests", lines)

    def test_agent_loop_example_falls_back_to_files_only(self):
        # A tenant that may not open local-sandbox: ListProviders says so,
        # and the example keeps to a memory workspace.
        server = Server(["--policy-providers", "memory"])
        try:
            lines = self.run_example(server.address)
        finally:
            server.stop()
        self.assertTrue(lines[0].startswith("local-sandbox is not usable ("), lines)
        self.assertRegex(lines[1], r"^opened workspace ws_[0-9a-f]{32} \(memory\)$")
        self.assertFalse([l for l in lines if l.startswith("exit:")], lines)
        self.assertIn("sorted.txt says: relax, ship it, write tests", lines)

    def test_quickstart_never_allows_a_shell(self):
        # Once a shell is allowed, the shell guard constrains nothing: the
        # first code a user copies must not teach that.
        shells = {"sh", "bash", "dash", "zsh", "ash", "busybox", "env", "python3"}
        spec = importlib.util.spec_from_file_location("agent_loop", EXAMPLE)
        agent_loop = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(agent_loop)
        self.assertFalse(shells & set(agent_loop.SHELL["allowed_commands"]))
        with open(os.path.join(os.path.dirname(HERE), "README.md")) as f:
            readme = f.read()
        allowed = re.findall(r'"allowed_commands":\s*\[([^\]]*)\]', readme)
        self.assertTrue(allowed, "the README shows no allowed_commands")
        for entry in allowed:
            self.assertFalse(shells & set(re.findall(r'"([^"]+)"', entry)), entry)
        self.assertNotRegex(readme, r'open\("local-bash"')


if __name__ == "__main__":
    unittest.main()
