"""End-to-end tests of workspace lifetimes, labels, names, env and secrets,
idempotent Open, List filters and pages, the unary stdin/terminal calls
(SendInput, CloseInput, Resize) and the re-resolve on eviction, against a
real workspaced started as in test_client (nothing is mocked)."""

import asyncio
import datetime
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import grpc

import workspaced
import workspaced.aio
from test_client import ALLOWED, CAPS, LOCAL_BASH_POLICY, Server
from workspaced import ExitCause

# stty prints a terminal's size; the rest as in test_client.
TTY_CAPS = {"fs": {}, "shell": {"allowed_commands": ALLOWED + ["stty"]}}

# How long a test waits for something the server does on its own (an
# expiry): a bound that only a broken server reaches, never a timing
# assertion.
PATIENCE = 60.0


def wait_for(predicate, what):
    """Polls predicate() until it returns a true value; fails after PATIENCE."""
    deadline = time.monotonic() + PATIENCE
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("gave up waiting for " + what)
        time.sleep(0.1)


class Hooked:
    """An on_eviction_retry hook that keeps every EvictionRetry."""

    def __init__(self):
        self.events = []

    def __call__(self, event):
        self.events.append(event)


class LifecycleCase(unittest.TestCase):
    """One server per class; a client whose eviction hook is recorded."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(LOCAL_BASH_POLICY)
        cls.hook = Hooked()
        cls.client = workspaced.connect(cls.server.address, on_eviction_retry=cls.hook)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def setUp(self):
        self.hook.events.clear()

    def open(self, provider="local-bash", caps=CAPS, **kwargs):
        ws = self.client.open(provider, caps, **kwargs)
        self.addCleanup(ws.close)
        return ws

    def restart(self):
        """Restarts the server and waits until the client's channel is
        connected again (its first call after the restart may otherwise
        meet the old, broken connection: UNAVAILABLE)."""
        self.server.restart()
        wait_for(self._serving, "the client to reconnect")

    def _serving(self):
        try:
            return self.client.health(timeout=5) == "SERVING"
        except workspaced.WorkspacedError as e:
            if e.code != grpc.StatusCode.UNAVAILABLE:
                raise
            return False

    def evict_storage(self, ws):
        """Removes a local-bash workspace's directory behind the server's
        back: its next call finds the storage gone (WORKSPACE_EVICTED)."""
        path = os.path.join(self.server.state, "workspaces", ws.id)
        self.assertTrue(os.path.isdir(path), path)
        shutil.rmtree(path)


class OpenTest(LifecycleCase):
    def test_open_takes_lifetime_labels_name_env_and_secrets(self):
        # Environment names are free in a sandbox; on the host (local-bash)
        # only an allowlist may be set.
        ws = self.open(
            "local-sandbox",
            ttl=600,
            idle_timeout=datetime.timedelta(minutes=5),
            labels={"team": "search", "example.com/run": "r-1"},
            name="open-options",
            env={"GREETING": "hello"},
            secrets={"API_KEY": "s3cret", "DB_PASSWORD": "hunter2"},
        )
        self.assertEqual(ws.name, "open-options")
        self.assertEqual(ws.labels, {"team": "search", "example.com/run": "r-1"})
        self.assertEqual(ws.lifetime, workspaced.Lifetime(ttl=600.0, idle_timeout=300.0))
        now = datetime.datetime.now(datetime.timezone.utc)
        self.assertIsNotNone(ws.expires_at)
        # The earlier of the two, the idle timeout, decides: within 5 min.
        self.assertGreater(ws.expires_at, now)
        self.assertLessEqual(ws.expires_at, now + datetime.timedelta(minutes=5, seconds=5))

        d = ws.describe()
        self.assertEqual((d.name, dict(d.labels)), ("open-options", ws.labels))
        self.assertEqual((d.lifetime.ttl_ms, d.lifetime.idle_timeout_ms), (600000, 300000))
        self.assertEqual(d.expires_at_unix_ms, int(ws.expires_at.timestamp() * 1000))
        self.assertGreater(d.last_activity_at_unix_ms, 0)
        self.assertEqual(dict(d.env), {"GREETING": "hello"})
        self.assertEqual(sorted(d.secret_names), ["API_KEY", "DB_PASSWORD"])
        self.assertFalse(d.secrets_missing)
        # Never a value.
        self.assertNotIn(b"s3cret", d.SerializeToString())

    def test_without_a_lifetime_the_servers_defaults_apply(self):
        # No ttl of its own; the server's default idle timeout (a day).
        ws = self.open("memory", {"fs": {}})
        self.assertEqual(ws.lifetime, workspaced.Lifetime(ttl=None, idle_timeout=86400.0))
        self.assertIsNotNone(ws.expires_at)
        self.assertEqual((ws.name, ws.labels), ("", {}))
        with self.assertRaises(workspaced.Malformed):
            self.client.open("memory", {"fs": {}}, secrets={"K": "v"})  # no commands, no secrets

    def test_same_request_id_returns_the_same_workspace(self):
        rid = workspaced.new_request_id()
        first = self.open("memory", {"fs": {}}, labels={"k": "v"}, request_id=rid)
        # What a retry after a lost answer sends: the same request, again.
        again = self.client.open("memory", {"fs": {}}, labels={"k": "v"}, request_id=rid)
        self.assertEqual(again.id, first.id)
        self.assertEqual(len([w for w in self.client.iter_workspaces(label_selector="k=v")]), 1)
        # The same id for another request is refused, naming the workspace.
        with self.assertRaises(workspaced.RequestIdReused) as cm:
            self.client.open("memory", {"fs": {}}, labels={"k": "other"}, request_id=rid)
        self.assertEqual(cm.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(cm.exception.workspace_id, first.id)
        self.assertEqual(cm.exception.metadata.get("request_id"), rid)

    def test_every_open_sends_a_fresh_request_id_kept_across_its_retries(self):
        one = self.client._open_request_for("memory", None, None)
        two = self.client._open_request_for("memory", None, None)
        self.assertTrue(one.request_id and two.request_id)
        self.assertNotEqual(one.request_id, two.request_id)
        self.assertEqual(self.client._open_request_for("memory", None, "mine").request_id, "mine")
        # Two opens without a request_id are two workspaces.
        a = self.open("memory", {"fs": {}})
        b = self.open("memory", {"fs": {}})
        self.assertNotEqual(a.id, b.id)
        with self.assertRaises(ValueError):
            self.client.open("memory", request_id="not allowed here")

    def test_a_name_is_unique_among_open_workspaces(self):
        ws = self.open("memory", {"fs": {}}, name="only-one")
        with self.assertRaises(workspaced.AlreadyExists) as cm:
            self.client.open("memory", {"fs": {}}, name="only-one")
        self.assertEqual(cm.exception.metadata.get("workspace_id"), ws.id)
        with self.assertRaises(workspaced.Malformed):
            self.client.open("memory", {"fs": {}}, name="Not_A_Name")
        ws.close()
        self.open("memory", {"fs": {}}, name="only-one")


class ListTest(LifecycleCase):
    def test_label_selector_name_and_pages(self):
        a = [self.open("memory", {"fs": {}}, labels={"suite": "list", "team": "a"}) for _ in range(3)]
        b = self.open("memory", {"fs": {}}, labels={"suite": "list", "team": "b"}, name="list-b")
        other = self.open("memory", {"fs": {}})
        ids_a = sorted(w.id for w in a)

        self.assertEqual([w.id for w in self.client.list(label_selector="suite=list,team=a")], ids_a)
        self.assertEqual([w.id for w in self.client.list(label_selector="suite=list,team!=a")], [b.id])
        self.assertNotIn(other.id, [w.id for w in self.client.list(label_selector="suite")])
        self.assertIn(other.id, [w.id for w in self.client.list(label_selector="!suite")])
        named = self.client.list(name="list-b")
        self.assertEqual([(w.id, w.name, dict(w.labels)) for w in named], [(b.id, "list-b", b.labels)])

        first = self.client.list(label_selector="suite=list", page_size=2)
        self.assertEqual(len(first), 2)
        self.assertTrue(first.next_page_token)
        second = self.client.list(label_selector="suite=list", page_size=2, page_token=first.next_page_token)
        self.assertEqual(second.next_page_token, "")
        self.assertEqual([w.id for w in first + second], sorted(ids_a + [b.id]))

        walked = [w.id for w in self.client.iter_workspaces(label_selector="suite=list", page_size=1)]
        self.assertEqual(walked, sorted(ids_a + [b.id]))
        with self.assertRaises(workspaced.Malformed):
            self.client.list(label_selector="=x")


class ExtendTest(LifecycleCase):
    def test_extend_moves_the_expiry(self):
        ws = self.open("memory", {"fs": {}}, ttl=60)
        before = ws.expires_at
        lifetime = ws.extend(ttl=3600)
        self.assertEqual(lifetime.ttl, 3600.0)
        self.assertGreater(ws.expires_at, before)
        self.assertEqual(ws.describe().lifetime.ttl_ms, 3600000)
        ws.extend(idle_timeout=datetime.timedelta(minutes=10))
        self.assertEqual(ws.lifetime.idle_timeout, 600.0)
        with self.assertRaises(ValueError):
            ws.extend()


class SecretsTest(LifecycleCase):
    def test_a_command_gets_only_the_secrets_it_names(self):
        ws = self.open("local-sandbox", env={"GREETING": "hello"}, secrets={"API_KEY": "s3cret", "OTHER": "x"})
        show = ["sh", "-c", 'echo "$GREETING ${API_KEY:-none} ${OTHER:-none}"']
        self.assertEqual(ws.run(show).stdout, b"hello none none\n")
        self.assertEqual(ws.run(show, secrets=["API_KEY"]).stdout, b"hello s3cret none\n")
        proc = ws.exec(show, secrets=["API_KEY", "OTHER"])
        self.assertEqual(proc.communicate()[0], b"hello s3cret x\n")
        # A command's own env overrides the workspace's.
        self.assertEqual(ws.run(show, env={"GREETING": "hi"}).stdout, b"hi none none\n")
        with self.assertRaises(workspaced.Malformed) as cm:
            ws.run(show, secrets=["NOT_A_SECRET"])
        self.assertEqual(cm.exception.metadata.get("name"), "NOT_A_SECRET")

    def test_set_secrets_merges_or_replaces(self):
        ws = self.open("local-sandbox", secrets={"A": "1"})
        resp = ws.set_secrets({"B": "2"})
        self.assertEqual(sorted(resp.secret_names), ["A", "B"])
        self.assertFalse(resp.secrets_missing)
        self.assertEqual(ws.run(["sh", "-c", 'echo "$A$B"'], secrets=["A", "B"]).stdout, b"12\n")
        resp = ws.set_secrets({"C": "3"}, replace=True)
        self.assertEqual(list(resp.secret_names), ["C"])
        self.assertEqual(sorted(ws.describe().secret_names), ["C"])

    def test_secrets_are_missing_after_a_restart_until_given_again(self):
        ws = self.client.open("local-sandbox", CAPS, secrets={"API_KEY": "s3cret"}, labels={"kept": "yes"})
        try:
            ws.write_file("kept.txt", b"kept\n")
            self.restart()
            # The record survives, the values do not.
            d = ws.describe()
            self.assertTrue(d.secrets_missing)
            self.assertEqual(list(d.secret_names), ["API_KEY"])
            self.assertEqual(dict(d.labels), {"kept": "yes"})
            with self.assertRaises(workspaced.SecretsMissing) as cm:
                ws.run(["true"])
            self.assertEqual(cm.exception.names, ["API_KEY"])
            resp = ws.set_secrets({"API_KEY": "s3cret"})
            self.assertFalse(resp.secrets_missing)
            self.assertEqual(ws.run(["sh", "-c", "echo $API_KEY"], secrets=["API_KEY"]).stdout, b"s3cret\n")
            self.assertEqual(ws.read_file("kept.txt"), b"kept\n")
        finally:
            ws.close()
        # The server re-attached the workspace by itself: nothing was evicted.
        self.assertEqual(self.hook.events, [])


class ExpiryTest(LifecycleCase):
    def test_an_expired_workspace_raises_evicted_with_cause_expired_once(self):
        ws = self.open(ttl=2)
        proc = ws.exec(["sleep", "120"])
        # The command ends with the workspace.
        self.assertEqual(proc.wait().cause, ExitCause.EXPIRED)

        def evicted():
            try:
                ws.stat(".")
            except workspaced.WorkspaceEvicted as e:
                return e
            return None

        err = wait_for(evicted, "the workspace to expire")
        self.assertEqual(err.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(err.eviction_cause, "expired")
        # One Resolve for the call that met the eviction, and it failed too.
        last = self.hook.events[-1]
        self.assertEqual((last.workspace_id, last.recovered), (ws.id, False))
        self.assertIs(last.error, err)
        self.assertIsInstance(last.resolve_error, workspaced.WorkspaceEvicted)
        self.assertEqual(last.resolve_error.eviction_cause, "expired")
        # Every later call: raised again after exactly one Resolve, no loop.
        self.hook.events.clear()
        for call in (lambda: ws.read_file("x"), ws.describe, lambda: ws.run(["true"])):
            with self.assertRaises(workspaced.WorkspaceEvicted) as cm:
                call()
            self.assertEqual(cm.exception.eviction_cause, "expired")
        self.assertEqual([e.recovered for e in self.hook.events], [False, False, False])
        with self.assertRaises(workspaced.WorkspaceEvicted) as cm:
            self.client.resolve(ws.ref)
        self.assertEqual(cm.exception.eviction_cause, "expired")
        self.assertNotIn(ws.id, [w.id for w in self.client.iter_workspaces()])

    def test_idle_timeout_expires_an_idle_workspace(self):
        ws = self.open("memory", {"fs": {}}, idle_timeout=1)

        def gone():
            return ws.id not in [w.id for w in self.client.iter_workspaces()]

        wait_for(gone, "the idle workspace to expire")
        with self.assertRaises(workspaced.WorkspaceEvicted) as cm:
            ws.describe()
        self.assertEqual(cm.exception.eviction_cause, "expired")


class EvictionTest(LifecycleCase):
    def test_evicted_and_unresolvable_raises_after_one_resolve(self):
        ws = self.open()
        self.evict_storage(ws)
        with self.assertRaises(workspaced.WorkspaceEvicted):
            ws.stat(".")
        self.assertEqual(len(self.hook.events), 1)
        self.assertFalse(self.hook.events[0].recovered)
        self.assertIsInstance(self.hook.events[0].resolve_error, workspaced.WorkspaceEvicted)

    def test_resolve_that_succeeds_retries_the_call_once(self):
        # The server answers WORKSPACE_EVICTED only for a workspace whose
        # Resolve fails as well, so the handle of an evicted workspace is
        # given the ref of a live one: every answer below is the real
        # server's (the eviction, the Resolve, the retried call).
        gone = self.open()
        live = self.open()
        live.write_file("seen.txt", b"from the live workspace\n")
        self.evict_storage(gone)
        gone.ref = live.ref
        self.assertEqual(gone.read_file("seen.txt"), b"from the live workspace\n")
        self.assertEqual(gone.id, live.id)
        self.assertEqual(len(self.hook.events), 1)
        event = self.hook.events[0]
        self.assertTrue(event.recovered)
        self.assertIsNone(event.resolve_error)
        self.assertEqual(event.error.reason, "WORKSPACE_EVICTED")
        # Later calls go to the resolved workspace directly.
        gone.write_file("again.txt", b"x")
        self.assertEqual(live.read_file("again.txt"), b"x")
        self.assertEqual(len(self.hook.events), 1)

    def test_a_start_refused_as_evicted_is_made_again(self):
        gone, live = self.open(), self.open()
        self.evict_storage(gone)
        gone.ref = live.ref
        proc = gone.exec(["echo", "started again"])
        self.assertEqual(proc.communicate()[0], b"started again\n")
        self.assertEqual([e.recovered for e in self.hook.events], [True])

    def test_an_unsafe_call_is_not_retried(self):
        # An upload from an iterator is consumed by its first attempt.
        gone, live = self.open(), self.open()
        self.evict_storage(gone)
        gone.ref = live.ref
        with self.assertRaises(workspaced.WorkspaceEvicted):
            gone.write_file("f", iter([b"one chunk"]))
        self.assertEqual(self.hook.events, [])

    def test_re_resolve_can_be_turned_off(self):
        with workspaced.connect(self.server.address, resolve_on_eviction=False, on_eviction_retry=self.hook) as c:
            ws = c.open("local-bash", CAPS)
            self.assertFalse(ws.resolve_on_eviction)
            live = self.open()
            self.evict_storage(ws)
            ws.ref = live.ref
            with self.assertRaises(workspaced.WorkspaceEvicted):
                ws.stat(".")
            self.assertEqual(self.hook.events, [])
            # Per workspace, too.
            ws.resolve_on_eviction = True
            self.assertEqual(ws.stat(".").path, ".")
            self.assertEqual(ws.id, live.id)
            ws.close()

    def test_a_restart_keeps_a_local_bash_workspace_usable(self):
        ws = self.open()
        ws.write_file("kept.txt", b"kept\n")
        self.restart()
        # The server re-attaches it on the first call: no eviction.
        self.assertEqual(ws.read_file("kept.txt"), b"kept\n")
        self.assertEqual(ws.run(["cat", "kept.txt"]).stdout, b"kept\n")
        self.assertEqual(self.hook.events, [])


class InputTest(LifecycleCase):
    def test_send_input_to_a_process_this_handle_did_not_start(self):
        ws = self.open()
        proc = ws.exec(["cat"], stdin=True, tag="feed", background=True)
        proc.cancel()  # the Start stream is gone; the process is not
        h = ws.process(tag="feed")
        self.assertEqual(h.send_input(b"abc", offset=0), 3)
        # A retry of the same bytes at the same offset delivers nothing twice.
        self.assertEqual(h.send_input(b"abc", offset=0), 3)
        with self.assertRaises(workspaced.InputGap) as cm:
            h.send_input(b"xyz", offset=10)
        self.assertEqual(cm.exception.code, grpc.StatusCode.OUT_OF_RANGE)
        self.assertEqual(cm.exception.expected_offset, 3)
        self.assertEqual(h.send_input(b"def\n"), 7)  # appended
        info = h.info()
        self.assertTrue(info.stdin_open)
        self.assertEqual(info.stdin_offset, 7)
        self.assertEqual(h.close_input(), 7)
        self.assertEqual(h.close_input(), 7)  # idempotent
        with self.assertRaises(workspaced.StdinClosed):
            h.send_input(b"late")
        out, _, result = h.attach().communicate()
        self.assertEqual(out, b"abcdef\n")
        self.assertEqual(result.cause, ExitCause.EXITED)
        self.assertFalse(ws.process(id=proc.id).info().stdin_open)

    def test_send_input_needs_stdin(self):
        ws = self.open()
        proc = ws.exec(["sleep", "60"], tag="no-stdin")
        with self.assertRaises(workspaced.StdinClosed):
            ws.process(tag="no-stdin").send_input(b"x")
        with self.assertRaises(workspaced.NoPty):
            ws.process(id=proc.id).resize(30, 100)
        proc.cancel()
        with self.assertRaises(workspaced.NoSuchProcess):
            ws.process(tag="never-started").send_input(b"x")
        with self.assertRaises(ValueError):
            ws.process()

    def test_resize_and_input_through_an_attached_handle(self):
        ws = self.open(caps=TTY_CAPS)
        proc = ws.exec(["sh", "-c", "read line; stty size"], pty=(24, 80), tag="tty")
        attached = ws.attach("tty")
        attached.resize(40, 100)
        self.assertEqual(ws.process(tag="tty").info().pty.rows, 40)
        attached.send_input(b"go\n")
        out, _, result = attached.communicate()
        self.assertIn(b"40 100", out)
        self.assertEqual(result.cause, ExitCause.EXITED)
        proc.wait()

    def test_started_process_takes_unary_input_in_the_same_offsets(self):
        ws = self.open()
        proc = ws.exec(["cat"], stdin=True)
        proc.write_stdin(b"on the stream\n")
        self.assertEqual(next(iter(proc)).data, b"on the stream\n")
        self.assertEqual(proc.send_input(b"by SendInput\n"), 27)
        self.assertEqual(proc.close_input(), 27)
        out, _, result = proc.communicate()
        self.assertEqual(out, b"by SendInput\n")
        self.assertEqual(result.stdout.bytes_total, 27)


class SessionExampleTest(LifecycleCase):
    def run_example(self, address, env=None):
        import subprocess
        import sys

        example = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "agent_session.py")
        env = dict(os.environ, AGENT_API_TOKEN="tok-123456", **(env or {}))
        out = subprocess.run([sys.executable, example, address], capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertNotIn("tok-123456", out.stdout + out.stderr)
        return out.stdout.splitlines()

    def test_agent_session_example(self):
        lines = self.run_example(self.server.address)
        self.assertRegex(lines[0], r"^opened (ws_[0-9a-f]{32}) \(local-sandbox\), expires at \d{4}-\d\d-\d\dT")
        self.assertIn("found by label: yes", lines)
        self.assertIn("without the secret: exit 1", lines)
        self.assertIn("with the secret: the command saw 10 bytes, the right token: True", lines)
        self.assertIn("extended: ttl 900s, secrets API_TOKEN", lines)
        self.assertEqual(lines[-1], "workspace closed")
        self.assertNotIn(lines[0].split()[1], [w.id for w in self.client.iter_workspaces()])

    def test_agent_session_example_files_only(self):
        server = Server(["--policy-providers", "memory"])
        try:
            lines = self.run_example(server.address)
        finally:
            server.stop()
        self.assertRegex(lines[0], r"^opened ws_[0-9a-f]{32} \(memory\)")
        self.assertIn("no local-sandbox on this server: files only", lines)
        self.assertIn("extended: ttl 900s, secrets none", lines)


class EnumTest(unittest.TestCase):
    def test_exit_cause_knows_expired(self):
        from workspaced._proto import exec_pb2

        self.assertEqual(ExitCause.EXPIRED, exec_pb2.EXIT_CAUSE_EXPIRED)
        names = {n[len("EXIT_CAUSE_") :]: v for n, v in exec_pb2.ExitCause.items()}
        self.assertEqual(names, {c.name: c.value for c in ExitCause})


class OpenWireTest(unittest.TestCase):
    def test_open_fields_at_their_numbers(self):
        from test_client import field, varint
        from workspaced.client import _open_request

        req = _open_request(
            "memory", ttl=1.5, idle_timeout=datetime.timedelta(minutes=1), labels={"a": "b"}, name="n",
            env={"E": "e"}, secrets={"S": "s"}, request_id="r-1",
        )
        entry = lambda k, v: field(1, 2, k) + field(2, 2, v)  # noqa: E731
        self.assertEqual(
            req.SerializeToString(deterministic=True),
            field(1, 2, b"")
            + field(6, 2, field(1, 0, varint(1500)) + field(2, 0, varint(60000)))
            + field(7, 2, entry(b"a", b"b"))
            + field(8, 2, b"n")
            + field(9, 2, b"r-1")
            + field(10, 2, entry(b"E", b"e"))
            + field(11, 2, entry(b"S", b"s")),
        )
        with self.assertRaises(ValueError):
            _open_request("memory", request_id="a b")
        with self.assertRaises(ValueError):
            _open_request("memory", ttl=-1)


# The image the test suite's setup builds (tests/fixtures/image/build.sh)
# from Debian's busybox-static.
DOCKER_IMAGE = "workspaced-test:busybox"


def require_docker_image():
    """Fails the test, naming the fix, unless a Docker daemon answers and
    has DOCKER_IMAGE."""
    try:
        out = subprocess.run(["docker", "image", "inspect", DOCKER_IMAGE], capture_output=True, text=True)
    except FileNotFoundError:
        raise AssertionError("the docker command is missing: the test needs a Docker daemon") from None
    if out.returncode != 0:
        raise AssertionError(
            "docker image inspect %s failed:\n%s\nstart the daemon with bash tests/fixtures/dockerd.sh "
            "and build the image with bash tests/fixtures/image/build.sh" % (DOCKER_IMAGE, out.stderr)
        )


def remove_container(workspace_id):
    """Removes the container of docker workspace `workspace_id` behind the
    server's back (the server labels it dev.workspaced.workspace=<id>), and
    only that one."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=dev.workspaced.workspace=" + workspace_id],
        capture_output=True,
        text=True,
        check=True,
    )
    ids = out.stdout.split()
    if len(ids) != 1:
        raise AssertionError("containers of %s: %r, want one" % (workspace_id, ids))
    subprocess.run(["docker", "rm", "-f", ids[0]], capture_output=True, check=True)


class BackendLostTest(unittest.TestCase):
    """The re-resolve fires on WORKSPACE_FAILED only when the server marks
    it resolve="true" (a box or container that ended or lost its agent):
    real failures of a real server, counted through the eviction hook."""

    @classmethod
    def setUpClass(cls):
        # A directory local-sandbox may bind (the policy names it); the
        # workspace's uid must reach it.
        cls.roots = os.path.realpath(tempfile.mkdtemp(prefix="binds-", dir=os.environ.get("TEST_TMPDIR")))
        os.chmod(cls.roots, 0o755)
        cls.server = Server(LOCAL_BASH_POLICY + ["--policy-bind-roots", cls.roots])
        cls.hook = Hooked()
        cls.client = workspaced.connect(cls.server.address, on_eviction_retry=cls.hook)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()
        shutil.rmtree(cls.roots, ignore_errors=True)

    def setUp(self):
        self.hook.events.clear()

    def open_docker(self, client):
        require_docker_image()
        ws = client.open("docker", CAPS, image=DOCKER_IMAGE)
        self.addCleanup(ws.close)
        return ws

    def test_a_removed_container_is_brought_back_by_one_resolve(self):
        ws = self.open_docker(self.client)
        ws.write_file("kept.txt", b"survives\n")
        self.assertEqual(ws.run(["cat", "kept.txt"]).stdout, b"survives\n")
        remove_container(ws.id)
        # The command fails on the lost container, the handle resolves its
        # ref (a fresh container over the same files) and runs it again.
        self.assertEqual(ws.run(["cat", "kept.txt"]).stdout, b"survives\n")
        self.assertEqual(len(self.hook.events), 1)
        event = self.hook.events[0]
        self.assertEqual((event.workspace_id, event.recovered, event.resolve_error), (ws.id, True, None))
        self.assertIsInstance(event.error, workspaced.WorkspaceFailed)
        self.assertEqual(event.error.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(event.error.metadata.get("resolve"), "true")
        # A stream start (exec) recovers the same way.
        remove_container(ws.id)
        self.assertEqual(ws.exec(["cat", "kept.txt"]).communicate()[0], b"survives\n")
        self.assertEqual([e.recovered for e in self.hook.events], [True, True])
        self.assertEqual(self.hook.events[1].error.reason, "WORKSPACE_FAILED")

    def test_with_the_retry_off_a_removed_container_raises_workspace_failed(self):
        ws = self.open_docker(self.client)
        with workspaced.connect(self.server.address, resolve_on_eviction=False, on_eviction_retry=self.hook) as off:
            h = off.resolve(ws.ref)
            remove_container(ws.id)
            with self.assertRaises(workspaced.WorkspaceFailed) as cm:
                h.run(["true"])
        err = cm.exception
        self.assertEqual(err.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(err.metadata.get("resolve"), "true")
        self.assertFalse(err.transient)
        self.assertEqual(self.hook.events, [])

    def test_a_failure_a_resolve_does_not_repair_is_raised_without_one(self):
        # A local-sandbox workspace whose read-only bind is removed: each
        # command (a fresh bubblewrap) then fails with WORKSPACE_FAILED, not
        # transient, and without resolve="true": the bind stays gone.
        bind = tempfile.mkdtemp(dir=self.roots)
        cfg = workspaced.pb_common.LocalSandboxConfig(
            read_only_paths=[bind], exec_mode=workspaced.pb_common.EXEC_MODE_PER_COMMAND
        )
        ws = self.client.open(cfg, CAPS)
        self.addCleanup(ws.close)
        self.assertEqual(ws.run(["true"]).exited.cause, ExitCause.EXITED)
        os.rmdir(bind)
        for call in (lambda: ws.run(["true"]), lambda: ws.exec(["true"])):
            with self.assertRaises(workspaced.WorkspaceFailed) as cm:
                call()
            self.assertEqual(cm.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
            self.assertEqual(cm.exception.metadata.get("transient"), "false")
            self.assertNotIn("resolve", cm.exception.metadata)
        self.assertEqual(self.hook.events, [])


class AioLifecycleTest(unittest.IsolatedAsyncioTestCase):
    """The same features through workspaced.aio."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(LOCAL_BASH_POLICY)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    async def asyncSetUp(self):
        self.hook = Hooked()
        self.client = workspaced.aio.connect(self.server.address, on_eviction_retry=self.hook)

    async def asyncTearDown(self):
        await self.client.close()

    async def test_open_options_list_extend_and_secrets(self):
        rid = workspaced.new_request_id()
        async with await self.client.open(
            "local-sandbox", CAPS, ttl=600, labels={"suite": "aio"}, name="aio-one", env={"G": "hi"},
            secrets={"K": "v"}, request_id=rid,
        ) as ws:
            again = await self.client.open("local-sandbox", CAPS, ttl=600, labels={"suite": "aio"}, name="aio-one",
                                           env={"G": "hi"}, secrets={"K": "v"}, request_id=rid)
            self.assertEqual(again.id, ws.id)
            self.assertEqual((ws.name, ws.labels, ws.lifetime.ttl), ("aio-one", {"suite": "aio"}, 600.0))
            async with await self.client.open("memory", {"fs": {}}, labels={"suite": "aio"}) as other:
                page = await self.client.list(label_selector="suite=aio", page_size=1)
                self.assertEqual(len(page), 1)
                self.assertTrue(page.next_page_token)
                walked = [w.id async for w in self.client.iter_workspaces(label_selector="suite=aio", page_size=1)]
                self.assertEqual(walked, sorted([ws.id, other.id]))
            before = ws.expires_at
            await ws.extend(ttl=3600)
            self.assertGreater(ws.expires_at, before)
            res = await ws.run(["sh", "-c", 'echo "$G ${K:-none}"'], secrets=["K"])
            self.assertEqual(res.stdout, b"hi v\n")
            resp = await ws.set_secrets({"L": "w"})
            self.assertEqual(sorted(resp.secret_names), ["K", "L"])
            d = await ws.describe()
            self.assertEqual(dict(d.env), {"G": "hi"})

    async def test_process_handle_and_eviction(self):
        async with await self.client.open("local-bash", CAPS) as live:
            proc = await live.exec(["cat"], stdin=True, tag="afeed")
            h = live.process(tag="afeed")
            self.assertEqual(await h.send_input(b"abc", offset=0), 3)
            self.assertEqual(await h.send_input(b"abc", offset=0), 3)
            with self.assertRaises(workspaced.InputGap):
                await h.send_input(b"x", offset=9)
            self.assertEqual(await proc.close_input(), 3)
            out, _, result = await proc.communicate()
            self.assertEqual((out, result.cause), (b"abc", ExitCause.EXITED))

            gone = await self.client.open("local-bash", CAPS)
            shutil.rmtree(os.path.join(self.server.state, "workspaces", gone.id))
            with self.assertRaises(workspaced.WorkspaceEvicted):
                await gone.stat(".")
            self.assertEqual([e.recovered for e in self.hook.events], [False])
            gone.ref = live.ref
            self.assertEqual((await gone.stat(".")).path, ".")
            self.assertEqual(gone.id, live.id)
            self.assertEqual([e.recovered for e in self.hook.events], [False, True])

    async def test_a_removed_container_is_brought_back_by_one_resolve(self):
        # subprocess.run blocks: off the event loop.
        await asyncio.to_thread(require_docker_image)
        async with await self.client.open("docker", CAPS, image=DOCKER_IMAGE) as ws:
            await ws.write_file("kept.txt", b"survives\n")
            await asyncio.to_thread(remove_container, ws.id)
            self.assertEqual((await ws.run(["cat", "kept.txt"])).stdout, b"survives\n")
            self.assertEqual([(e.recovered, e.error.reason) for e in self.hook.events], [(True, "WORKSPACE_FAILED")])
            self.assertEqual(self.hook.events[0].error.metadata.get("resolve"), "true")
            # With the retry off the failure reaches the caller, untouched.
            ws.resolve_on_eviction = False
            await asyncio.to_thread(remove_container, ws.id)
            with self.assertRaises(workspaced.WorkspaceFailed) as cm:
                await ws.run(["true"])
            self.assertEqual(cm.exception.metadata.get("resolve"), "true")
            self.assertEqual(len(self.hook.events), 1)

    async def test_expiry(self):
        ws = await self.client.open("memory", {"fs": {}}, ttl=1)
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                await ws.describe()
            except workspaced.WorkspaceEvicted as e:
                self.assertEqual(e.eviction_cause, "expired")
                break
            self.assertLess(time.monotonic(), deadline, "the workspace never expired")
            await asyncio.sleep(0.1)
        self.assertEqual([e.recovered for e in self.hook.events], [False])


if __name__ == "__main__":
    unittest.main()
