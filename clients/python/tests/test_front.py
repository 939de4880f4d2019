"""The Python client behind a real front proxy over two real nodes.

The front is nginx from the fixture shared by the clients' suites
($WORKSPACED_TEST_FRONT, clients/testdata/front.sh): round robin for calls
without `x-workspace-node`, the named node for calls with it. A workspace
lives on one node, so every call about it must be pinned; an unpinned
call lands on the other node every second time and fails NO_SUCH_WORKSPACE.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import grpc

import workspaced
from test_client import CAPS, LOCAL_BASH_POLICY, Server, describe_returncode, refused_port, stop_all, stop_cleanly
from workspaced import ExitCause, RetryPolicy
from workspaced._proto import filesystem_pb2

NODES = ("node-1", "node-2")


class Front:
    """front.sh in front of `addresses` (named node-1, node-2, ... in order),
    stopped with SIGTERM. front.sh exits with nginx's status, so stop()
    raises AssertionError unless nginx shut down cleanly."""

    def __init__(self, addresses):
        script = os.environ.get("WORKSPACED_TEST_FRONT")
        if not script:
            raise RuntimeError("WORKSPACED_TEST_FRONT is not set: it must name clients/testdata/front.sh")
        self.tmp = tempfile.mkdtemp(prefix="front-", dir=os.environ.get("TEST_TMPDIR"))
        self.stopped = False
        self.log_path = os.path.join(self.tmp, "front.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [script, self.tmp, *addresses], stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        found = {}

        def read_banner():
            try:
                for line in self.proc.stdout:
                    m = re.match(r"front listening on (\S+)", line)
                    if m:
                        found["addr"] = m.group(1)
                        break
                for _ in self.proc.stdout:
                    pass
            except (ValueError, OSError):
                pass

        threading.Thread(target=read_banner, daemon=True).start()
        deadline = time.monotonic() + 30
        while "addr" not in found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                if self.proc.poll() is None:
                    self.proc.terminate()
                self.proc.wait()
                self.stopped = True
                self.proc.stdout.close()
                self.log.close()
                with open(self.log_path) as f:
                    raise RuntimeError(
                        "front.sh did not start (%s):\n%s" % (describe_returncode(self.proc.returncode), f.read())
                    )
            time.sleep(0.02)
        self.address = found["addr"]

    def stop(self):
        if self.stopped:
            return
        self.stopped = True
        problem = stop_cleanly(self.proc, "the front (front.sh, nginx)", self.log_path)
        self.proc.stdout.close()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if problem:
            raise AssertionError(problem)


def write_through_front(ws, path, data, **kwargs):
    """ws.write_file through the front, checked by reading the file back."""
    ws.write_file(path, data, **kwargs)
    assert ws.read_file(path) == data, "%s: not written" % path


def finish_through_front(ws, proc, seen=b""):
    """(stdout, ExitResult) of an Exec.Start stream through the front;
    `seen`: stdout already taken from it."""
    out = bytearray(seen)
    for ev in proc:
        if isinstance(ev, workspaced.Output):
            out += ev.data
    return bytes(out), proc.wait()


def close_quietly(ws):
    # A failed test may leave the workspace unreachable; its server's end
    # removes it anyway.
    try:
        ws.close()
    except workspaced.WorkspacedError:
        pass


class FrontTest(unittest.TestCase):
    """Two nodes behind one front; the client only knows the front. The
    nodes listen on unix sockets, which the front reaches as the server's
    own user; the client reaches the front over TCP."""

    @classmethod
    def setUpClass(cls):
        cls.servers = [Server(LOCAL_BASH_POLICY), Server(LOCAL_BASH_POLICY)]
        try:
            cls.front = Front([s.address for s in cls.servers])
        except BaseException:
            # tearDownClass does not run after a failed setUpClass.
            for s in cls.servers:
                try:
                    s.stop()
                except AssertionError:
                    pass
            raise
        cls.client = workspaced.connect(cls.front.address, token="test-token")

    @classmethod
    def tearDownClass(cls):
        # Raises when the front or a node did not exit cleanly.
        cls.client.close()
        stop_all(cls.front, *cls.servers)

    def open(self, *args, **kwargs):
        ws = self.client.open(*args, **kwargs)
        self.addCleanup(close_quietly, ws)
        return ws

    def raw_stat(self, ws, metadata):
        """Stat through the bare stub: no pinning but what `metadata` says."""
        req = filesystem_pb2.StatRequest(workspace_id=ws.id, path=".")
        return self.client._fs.Stat(req, metadata=metadata)

    def test_open_names_the_node_that_holds_the_workspace(self):
        seen = set()
        for _ in range(4):
            ws = self.open("memory")
            self.assertIn(ws.node, NODES)
            seen.add(ws.node)
            # The named node is the one that really holds it.
            server = self.servers[NODES.index(ws.node)]
            with workspaced.connect(server.address, token="test-token") as direct:
                self.assertIn(ws.id, [w.id for w in direct.list()])
            self.assertIn("node=%r" % ws.node, repr(ws))
        self.assertEqual(seen, set(NODES), "round robin should have used both nodes")

    def test_every_call_about_the_workspace_is_pinned(self):
        ws = self.open("local-bash", CAPS)
        self.assertIn(ws.node, NODES)
        with self.assertRaises(AttributeError):
            ws.node = "node-1"  # read-only
        # Several rounds: round robin would send every other unpinned call
        # to the node that does not have the workspace.
        for i in range(3):
            name = "dir/f%d.txt" % i
            write_through_front(ws, name, b"line %d\n" % i, create_parents=True)
            self.assertEqual(ws.stat(name).size, 7)
            self.assertEqual(ws.edit_file(name, "line", "LINE").replacements, 1)
            self.assertEqual(ws.read_text(name), "LINE %d\n" % i)
            self.assertEqual(len(ws.list_dir("dir")), i + 1)
            self.assertEqual(len(ws.glob("dir/*.txt")), i + 1)
            self.assertEqual(len(list(ws.grep("LINE", path="dir"))), i + 1)
        self.assertEqual(b"".join(ws.read_file_stream("dir/f0.txt")), b"LINE 0\n")
        ws.make_dir("sub")
        ws.move("dir/f0.txt", "sub/f0.txt")
        self.assertTrue(ws.exists("sub/f0.txt"))
        self.assertEqual(ws.remove("sub", recursive=True), 2)

        # Streamed output and stdin over the Exec.Start stream.
        proc = ws.exec(["sh", "-c", "echo ready; cat"], stdin=True)
        first = next(iter(proc))
        self.assertEqual(first.data, b"ready\n")
        proc.write_stdin(b"through the front\n")
        proc.close_stdin()
        out, result = finish_through_front(ws, proc, first.data)
        self.assertEqual(out, b"ready\nthrough the front\n")
        self.assertEqual(result.cause, ExitCause.EXITED)

        res = ws.run(["wc", "-c"], stdin_data=b"12345")
        self.assertEqual(res.stdout.strip(), b"5")

        # Signals on the stream, a background process, ps, attach, kill,
        # and a cancel whose wait() re-attaches.
        sig = ws.exec(["sleep", "30"], stdin=True)
        sig.signal(signal.SIGTERM)
        self.assertEqual(finish_through_front(ws, sig)[1].cause, ExitCause.SIGNALED)
        bg = ws.exec(["sh", "-c", "echo bg; sleep 30"], tag="bg", background=True)
        self.assertTrue([p for p in ws.ps() if p.tag == "bg" and p.running])
        att = ws.attach("bg")
        self.assertEqual(next(iter(att)).data, b"bg\n")
        ws.kill("bg")
        self.assertEqual(att.wait().signal, signal.SIGKILL)
        self.assertEqual(finish_through_front(ws, bg)[1].signal, signal.SIGKILL)
        cancelled = ws.exec(["sleep", "30"])
        cancelled.cancel()
        self.assertEqual(cancelled.wait().cause, ExitCause.CANCELLED)

        self.assertEqual(ws.describe().id, ws.id)
        self.assertFalse(ws.close())
        self.assertTrue(ws.close())

    def test_the_front_really_balances_unpinned_calls(self):
        # The negative control: without the header, a call about the
        # workspace goes to the other node on some of a few tries.
        ws = self.open("memory")
        codes = []
        for _ in range(4):
            try:
                self.raw_stat(ws, self.client._metadata)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
        self.assertIn(grpc.StatusCode.NOT_FOUND, codes)
        # With the header, the same bare call always finds it.
        pinned = self.client._metadata + (("x-workspace-node", ws.node),)
        for _ in range(4):
            self.assertEqual(self.raw_stat(ws, pinned).info.type, workspaced.pb_common.FILE_TYPE_DIRECTORY)

    def test_resolve_with_the_node_kept_alongside_the_ref(self):
        ws = self.open("local-bash", CAPS)
        write_through_front(ws, "marker", b"here")
        again = self.client.resolve(ws.ref, node=ws.node)
        self.assertEqual((again.id, again.node), (ws.id, ws.node))
        for _ in range(4):
            self.assertEqual(again.read_file("marker"), b"here")
            self.assertTrue(again.run(["true"]).ok)
        by_token = self.client.resolve(ws.ref.token, node=ws.node)
        self.assertEqual((by_token.id, by_token.node), (ws.id, ws.node))

    def test_resolve_on_a_node_that_is_not_behind_the_front(self):
        ws = self.open("memory")
        with self.assertRaises(workspaced.WorkspacedError) as cm:
            self.client.resolve(ws.ref, node="node-9")
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(cm.exception.reason, "")
        self.assertTrue(workspaced.is_transient(cm.exception))


class FrontWithADeadNodeTest(unittest.TestCase):
    """One live node and one that refuses connections: an Open that the
    front sends to the dead one fails UNAVAILABLE and is retried by the
    client, unpinned, until it lands on the live node, which the answer
    names."""

    def test_open_lands_on_the_live_node(self):
        server = Server()
        self.addCleanup(server.stop)
        with refused_port() as port:
            front = Front([server.address, "127.0.0.1:%d" % port])
            self.addCleanup(front.stop)
            policy = RetryPolicy(max_attempts=6, initial_backoff=0.01)
            with workspaced.connect(front.address, token="test-token") as client:
                # Round robin sends every other Open to the dead node.
                for _ in range(4):
                    ws = client.open("memory", retry=policy)
                    self.assertEqual(ws.node, "node-1")
                    write_through_front(ws, "f", b"x")
                    self.assertFalse(ws.close())


class DirectTest(unittest.TestCase):
    """Without a front, no node is named and nothing changes."""

    def test_no_node_on_a_direct_connection(self):
        server = Server()
        self.addCleanup(server.stop)
        with workspaced.connect(server.address, token="test-token") as client:
            ws = client.open("memory")
            self.assertIsNone(ws.node)
            self.assertEqual(repr(ws), "Workspace(id=%r, provider='memory')" % ws.id)
            ws.write_file("f", b"x")
            again = client.resolve(ws.ref)
            self.assertIsNone(again.node)
            self.assertEqual(again.read_file("f"), b"x")
            self.assertFalse(ws.close())


if __name__ == "__main__":
    unittest.main()
