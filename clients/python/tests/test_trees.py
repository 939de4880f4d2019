"""Watch, archives and snapshots through the Python client (sync and
asyncio), against the real server."""

import io
import os
import shutil
import tarfile
import tempfile
import unittest

import workspaced
import workspaced.aio
from workspaced import ArchiveSkipped, UnsafeArchive, WatchEventType
from workspaced._tree import extract_tar

from test_client import CAPS, LOCAL_BASH_POLICY, Server


def make_local_tree(root):
    """A small tree with a nested file, an empty directory and a relative
    symlink; returns root."""
    os.makedirs(os.path.join(root, "src", "lib"))
    os.makedirs(os.path.join(root, "empty"))
    with open(os.path.join(root, "src", "lib", "a.txt"), "wb") as f:
        f.write(b"alpha\n")
    with open(os.path.join(root, "README"), "wb") as f:
        f.write(b"read me\n")
    os.chmod(os.path.join(root, "README"), 0o640)
    os.symlink("src/lib/a.txt", os.path.join(root, "link"))
    return root


def hostile_tar(name="../evil", data=b"x"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_of(*members):
    """A tar of TarInfo members (regular files get empty content)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for m in members:
            tf.addfile(m, io.BytesIO(b"") if m.isreg() else None)
    return buf.getvalue()


def member(name, kind=tarfile.REGTYPE, linkname=""):
    m = tarfile.TarInfo(name)
    m.type = kind
    m.linkname = linkname
    return m


class TreesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # A host directory the operator lets Open(from_path) copy.
        cls.source = os.path.realpath(tempfile.mkdtemp(prefix="src-", dir=os.environ.get("TEST_TMPDIR")))
        os.chmod(cls.source, 0o755)
        make_local_tree(os.path.join(cls.source, "repo"))
        cls.server = Server(LOCAL_BASH_POLICY + ["--source-path-allow", cls.source])
        cls.client = workspaced.connect(cls.server.address, token="test-token")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()
        shutil.rmtree(cls.source, ignore_errors=True)

    def tmpdir(self):
        d = tempfile.mkdtemp(prefix="trees-", dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def open(self, provider="local-bash", **kw):
        ws = self.client.open(provider, CAPS if provider != "memory" else {"fs": {}}, **kw)
        self.addCleanup(ws.close)
        return ws

    # -- archives

    def test_upload_download_round_trip(self):
        for provider in ("memory", "local-bash"):
            with self.subTest(provider=provider):
                ws = self.open(provider)
                src = make_local_tree(os.path.join(self.tmpdir(), "src"))
                up = ws.upload_tree(src, "proj")
                self.assertEqual((up.files, up.directories, up.symlinks), (2, 3, 1))
                # The symlink arrived as a link, not as a copy of its target.
                self.assertEqual(ws.stat("proj/link").type, workspaced.client.common_pb2.FILE_TYPE_SYMLINK)
                self.assertEqual(ws.read_file("proj/src/lib/a.txt"), b"alpha\n")

                out = os.path.join(self.tmpdir(), "out")
                down = ws.download_tree("proj", out)
                self.assertEqual((down.files, down.symlinks), (2, 1))
                self.assertEqual(os.readlink(os.path.join(out, "link")), "src/lib/a.txt")
                with open(os.path.join(out, "src", "lib", "a.txt"), "rb") as f:
                    self.assertEqual(f.read(), b"alpha\n")
                self.assertEqual(os.stat(os.path.join(out, "README")).st_mode & 0o777, 0o640)
                self.assertTrue(os.path.isdir(os.path.join(out, "empty")))

                # Without overwrite an existing path is refused; merge goes in.
                with self.assertRaises(workspaced.AlreadyExists):
                    ws.upload_tree(src, "proj")
                ws.write_archive("proj", hostile_tar("extra.txt", b"more"), overwrite="merge")
                self.assertEqual(ws.read_file("proj/extra.txt"), b"more")
                self.assertEqual(ws.read_file("proj/README"), b"read me\n")

    def test_hostile_archive_is_refused_with_the_entry(self):
        ws = self.open()
        with self.assertRaises(workspaced.BadArchive) as cm:
            ws.write_archive("dst", hostile_tar("../evil"), create_parents=True)
        self.assertEqual(cm.exception.problem, "dotdot")
        self.assertEqual(cm.exception.entry, "../evil")
        self.assertFalse(ws.exists("dst"))
        self.assertFalse(ws.exists("evil"))

    def test_read_archive_lists_a_fifo_as_special(self):
        ws = self.open("local-bash")
        ws.write_file("f.txt", b"content")
        os.mkfifo(os.path.join(self.server.state, "workspaces", ws.id, "pipe"))
        stream = ws.read_archive(".", format="tar.gz")
        data = stream.read_all()
        self.assertEqual(stream.trailer.skipped, (ArchiveSkipped("pipe", "special"),))
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
            self.assertEqual(tf.getnames(), ["f.txt"])
            self.assertEqual(tf.extractfile("f.txt").read(), b"content")

    def test_extraction_never_leaves_the_directory(self):
        cases = [
            ([member("../x")], "dotdot"),
            ([member("/etc/x")], "absolute"),
            ([member("up", tarfile.SYMTYPE, "../../outside")], "link_outside"),
            ([member("abs", tarfile.SYMTYPE, "/etc")], "link_outside"),
            ([member("d", tarfile.SYMTYPE, "."), member("d/x")], "through_symlink"),
            ([member("h", tarfile.LNKTYPE, "etc/passwd")], "link_outside"),
            ([member("p", tarfile.FIFOTYPE)], "special"),
        ]
        for members, problem in cases:
            with self.subTest(first=members[0].name):
                base = self.tmpdir()
                dest = os.path.join(base, "dest")
                with self.assertRaises(UnsafeArchive) as cm:
                    extract_tar(io.BytesIO(tar_of(*members)), dest)
                self.assertEqual(cm.exception.problem, problem)
                self.assertEqual(os.listdir(base), ["dest"])
                self.assertFalse(os.path.exists(os.path.join(dest, "x")))

    # -- watch

    def test_watch_reports_ready_then_created(self):
        for provider in ("memory", "local-bash"):
            with self.subTest(provider=provider):
                ws = self.open(provider)
                with ws.watch(".", recursive=True, timeout=30) as w:
                    events = iter(w)
                    self.assertEqual(next(events).type, WatchEventType.READY)
                    ws.write_file("new.txt", b"hello")
                    ev = next(events)
                    self.assertEqual((ev.type, ev.path), (WatchEventType.CREATED, "new.txt"))
                    self.assertEqual(ev.file_type, workspaced.client.common_pb2.FILE_TYPE_REGULAR)
                # Closed: the iteration is over.
                self.assertEqual(list(events), [])

    def test_watch_of_a_missing_path_fails_typed(self):
        ws = self.open()
        with self.assertRaises(workspaced.NoSuchFile):
            next(iter(ws.watch("missing", timeout=30)))

    # -- snapshots

    def test_snapshot_restore_fork_delete(self):
        ws = self.open()
        ws.write_file("a.txt", b"v1")
        snap = ws.snapshot(name="py-snap", labels={"k": "v"})
        self.assertTrue(snap.id.startswith("snap-"), snap.id)
        self.assertEqual((snap.name, snap.workspace_id, snap.files), ("py-snap", ws.id, 1))

        ws.write_file("a.txt", b"v2")
        ws.write_file("b.txt", b"later")
        restored = ws.restore(snap)
        self.assertEqual(restored.snapshot.id, snap.id)
        self.assertEqual(restored.processes_ended, 0)
        self.assertEqual(ws.read_file("a.txt"), b"v1")
        self.assertFalse(ws.exists("b.txt"))

        fork = self.open("memory", from_snapshot=snap.id)
        self.assertEqual(fork.read_file("a.txt"), b"v1")

        page = self.client.list_snapshots(workspace_id=ws.id)
        self.assertEqual([s.id for s in page], [snap.id])
        self.assertEqual([s.id for s in self.client.iter_snapshots(label_selector="k=v", page_size=1)], [snap.id])

        self.assertGreaterEqual(self.client.delete_snapshot(snap.id), 0)
        with self.assertRaises(workspaced.NoSuchSnapshot):
            self.client.delete_snapshot(snap.id)
        with self.assertRaises(workspaced.NoSuchSnapshot):
            self.client.open("memory", {"fs": {}}, from_snapshot=snap.id)

    def test_open_from_path_shadows_an_allowed_directory(self):
        ws = self.open("memory", from_path=os.path.join(self.source, "repo"))
        self.assertEqual(ws.read_file("src/lib/a.txt"), b"alpha\n")
        self.assertEqual(ws.stat("link").type, workspaced.client.common_pb2.FILE_TYPE_SYMLINK)
        outside = self.tmpdir()
        with self.assertRaises(workspaced.SourcePathDenied):
            self.client.open("memory", {"fs": {}}, from_path=os.path.realpath(outside))


class AioTreesTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(LOCAL_BASH_POLICY)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    async def asyncSetUp(self):
        self.client = workspaced.aio.connect(self.server.address, token="test-token")
        self.ws = await self.client.open("local-bash", CAPS)

    async def asyncTearDown(self):
        await self.ws.close()
        await self.client.close()

    def tmpdir(self):
        d = tempfile.mkdtemp(prefix="trees-", dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(shutil.rmtree, d, True)
        return d

    async def test_round_trip_and_hostile(self):
        src = make_local_tree(os.path.join(self.tmpdir(), "src"))
        up = await self.ws.upload_tree(src, "proj")
        self.assertEqual(up.symlinks, 1)
        out = os.path.join(self.tmpdir(), "out")
        down = await self.ws.download_tree("proj", out)
        self.assertEqual(down.files, 2)
        self.assertEqual(os.readlink(os.path.join(out, "link")), "src/lib/a.txt")

        async def chunks():
            yield hostile_tar("../evil")

        with self.assertRaises(workspaced.BadArchive) as cm:
            await self.ws.write_archive("dst", chunks())
        self.assertEqual((cm.exception.problem, cm.exception.entry), ("dotdot", "../evil"))

        stream = self.ws.read_archive("proj", include=["src/**"])
        data = b"".join([c async for c in stream])
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            self.assertIn("src/lib/a.txt", tf.getnames())
            self.assertNotIn("README", tf.getnames())
        self.assertEqual(stream.trailer.files, 1)

    async def test_watch(self):
        w = self.ws.watch(".", timeout=30)
        events = w.__aiter__()
        self.assertEqual((await events.__anext__()).type, WatchEventType.READY)
        await self.ws.write_file("new.txt", b"hello")
        ev = await events.__anext__()
        self.assertEqual((ev.type, ev.path), (WatchEventType.CREATED, "new.txt"))
        w.cancel()
        self.assertEqual([e async for e in events], [])

    async def test_snapshots(self):
        await self.ws.write_file("a.txt", b"v1")
        snap = await self.ws.snapshot()
        await self.ws.write_file("a.txt", b"v2")
        await self.ws.restore(snap.id)
        self.assertEqual(await self.ws.read_file("a.txt"), b"v1")
        fork = await self.client.open("memory", {"fs": {}}, from_snapshot=snap)
        try:
            self.assertEqual(await fork.read_file("a.txt"), b"v1")
        finally:
            await fork.close()
        self.assertEqual([s.id async for s in self.client.iter_snapshots(workspace_id=self.ws.id)], [snap.id])
        await self.client.delete_snapshot(snap.id)
        with self.assertRaises(workspaced.NoSuchSnapshot):
            await self.client.delete_snapshot(snap.id)


if __name__ == "__main__":
    unittest.main()
