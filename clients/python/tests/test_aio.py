"""End-to-end tests of workspaced.aio (the asyncio client) against a real
workspaced server, started as in test_client."""

import unittest

import grpc

import workspaced
import workspaced.aio
from test_client import CAPS, LOCAL_BASH_POLICY, Server, silent_server
from workspaced import ExitCause


class AioTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(LOCAL_BASH_POLICY)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    async def asyncSetUp(self):
        self.client = workspaced.aio.connect(self.server.address)
        self.ws = await self.client.open("local-bash", CAPS)

    async def asyncTearDown(self):
        await self.ws.close()
        await self.client.close()

    async def test_open_write_read_memory(self):
        async with await self.client.open("memory", {"fs": {}}) as ws:
            self.assertEqual(ws.provider, "memory")
            resp = await ws.write_file("dir/a.txt", b"hello\n", create_parents=True)
            self.assertEqual(resp.bytes_written, 6)
            self.assertEqual(await ws.read_file("dir/a.txt"), b"hello\n")
            self.assertEqual(await ws.read_text("dir/a.txt"), "hello\n")
            self.assertEqual([e.path for e in await ws.list_dir("dir")], ["dir/a.txt"])
            wid = ws.id
        self.assertTrue(ws.closed)
        self.assertNotIn(wid, [w.id for w in await self.client.list()])

    async def test_streamed_write_and_read(self):
        async def chunks():
            for i in range(3):
                yield bytes([65 + i]) * (1 << 20)

        await self.ws.write_file("big", chunks())
        parts = [c async for c in self.ws.read_file_stream("big")]
        self.assertGreater(len(parts), 1)
        self.assertEqual(b"".join(parts), b"A" * (1 << 20) + b"B" * (1 << 20) + b"C" * (1 << 20))

    async def test_exec_async_for_streams_output(self):
        proc = await self.ws.exec(["sh", "-c", "echo one; echo two >&2; exit 3"], command_timeout=30)
        self.assertTrue(proc.id)
        seen = []
        async for ev in proc:
            self.assertIsInstance(ev, workspaced.Output)
            seen.append((ev.stream, ev.data))
        self.assertEqual(b"".join(d for s, d in seen if s == "stdout"), b"one\n")
        self.assertEqual(b"".join(d for s, d in seen if s == "stderr"), b"two\n")
        result = await proc.wait()
        self.assertEqual((result.cause, result.exit_code), (ExitCause.EXITED, 3))

    async def test_stdin_roundtrip(self):
        async with await self.ws.exec(["cat"], stdin=True) as proc:
            out, err, result = await proc.communicate(b"through stdin\n")
        self.assertEqual((out, err), (b"through stdin\n", b""))
        self.assertTrue(result.ok)

    async def test_cancel_and_attach(self):
        proc = await self.ws.exec(["sh", "-c", "echo up; sleep 30"], tag="sleeper")
        async for ev in proc:
            self.assertEqual(ev.data, b"up\n")
            break
        again = await self.ws.attach(tag="sleeper")
        self.assertEqual(again.id, proc.id)
        proc.cancel()
        self.assertEqual((await proc.wait()).cause, ExitCause.CANCELLED)

    async def test_run_and_grep(self):
        result = await self.ws.run(["echo", "hi"])
        self.assertEqual((result.stdout, result.ok), (b"hi\n", True))
        await self.ws.write_file("g.txt", "alpha\nbeta\nalphabet\n")
        results = self.ws.grep("alpha")
        self.assertEqual([m.line_number for m in [m async for m in results]], [1, 3])
        self.assertIsNotNone(results.summary)

    async def test_typed_errors(self):
        with self.assertRaises(workspaced.NoSuchFile) as cm:
            await self.ws.read_file("missing.txt")
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(workspaced.PathEscape):
            await self.ws.write_file("../out", b"x")
        with self.assertRaises(workspaced.CommandNotAllowed) as cm:
            await self.ws.exec(["rm", "-rf", "."])
        self.assertEqual(cm.exception.reason, "COMMAND_NOT_ALLOWED")

    async def test_deadline_is_not_the_commands_timeout(self):
        # The call's deadline passes long before the command's own limit:
        # DEADLINE_EXCEEDED, for the unary Run and for the Start stream.
        with self.assertRaises(workspaced.DeadlineExceeded) as cm:
            await self.ws.run(["sleep", "30"], command_timeout=60, timeout=0.3)
        self.assertEqual(cm.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        proc = await self.ws.exec(["sleep", "30"], command_timeout=60, timeout=0.3)
        with self.assertRaises(workspaced.DeadlineExceeded):
            async for _ in proc:
                pass
        # The command's own limit, with no deadline, ends in a result.
        result = await self.ws.run(["sleep", "30"], command_timeout=0.2)
        self.assertEqual(result.exited.cause, ExitCause.TIMEOUT)

    async def test_client_default_deadline(self):
        with silent_server() as address:
            silent = workspaced.aio.connect(address, timeout=0.2)
            try:
                with self.assertRaises(workspaced.DeadlineExceeded):
                    await silent.list()
                with self.assertRaises(workspaced.DeadlineExceeded):
                    await silent.health(timeout=0.1)
            finally:
                await silent.close()
        # A command outlives the default: exec and run do not take it.
        client = workspaced.aio.connect(self.server.address, timeout=0.2)
        try:
            ws = await client.resolve(self.ws.ref)
            self.assertTrue((await ws.run(["sleep", "0.6"])).ok)
            proc = await ws.exec(["sleep", "0.6"])
            self.assertTrue((await proc.wait()).ok)
        finally:
            await client.close()

    async def test_server_info_and_health(self):
        info = await self.client.server_info()
        self.assertEqual(info.version, workspaced.__version__)
        self.assertEqual(await self.client.health(), "SERVING")
        kinds = [p.kind for p in await self.client.providers()]
        self.assertEqual(kinds, ["memory", "local-bash", "local-sandbox", "docker"])

    async def test_resolve(self):
        await self.ws.write_file("marker", b"here")
        again = await self.client.resolve(self.ws.ref.token)
        self.assertEqual(again.id, self.ws.id)
        self.assertEqual(await again.read_file("marker"), b"here")


if __name__ == "__main__":
    unittest.main()
