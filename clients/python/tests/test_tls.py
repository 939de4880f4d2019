"""The Python client over TLS, mutual TLS and bearer tokens, end to end.

The certificates and the tokens file come from the fixture shared by the
clients' suites ($WORKSPACED_TEST_PKI, clients/testdata/pki.sh); the server
is the real binary, started with them.
"""

import os
import subprocess
import tempfile
import unittest

import grpc

import workspaced
from test_client import CAPS, LOCAL_BASH_POLICY, Server

ALICE = "tok-alice-0123456789"
BOB = "tok-bob-9876543210"
# A failed handshake is retried by nobody here: the point is the error.
NO_RETRY = workspaced.RetryPolicy(max_attempts=1)


def make_pki():
    script = os.environ.get("WORKSPACED_TEST_PKI")
    if not script:
        raise RuntimeError("WORKSPACED_TEST_PKI is not set: it must name clients/testdata/pki.sh")
    d = tempfile.mkdtemp(prefix="pki-", dir=os.environ.get("TEST_TMPDIR"))
    subprocess.run([script, d], check=True)
    return d


class TLSTestCase(unittest.TestCase):
    mutual = False

    @classmethod
    def setUpClass(cls):
        cls.pki = make_pki()
        args = ["--tokens-file", cls.path("tokens"), "--tls-cert", cls.path("server.pem"),
                "--tls-key", cls.path("server.key")]
        if cls.mutual:
            args += ["--tls-client-ca", cls.path("ca.pem")]
        # TLS is about TCP; the tokens file is what lets the server open a
        # TCP listener at all.
        cls.server = Server(args + LOCAL_BASH_POLICY, tcp=True)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.pki, name)

    def connect(self, token=None, ca="ca.pem", client=None, server_name=None):
        tls = workspaced.TLSConfig(
            root_certificates=self.path(ca),
            certificate_chain=self.path(client + ".pem") if client else None,
            private_key=self.path(client + ".key") if client else None,
            server_name_override=server_name,
        )
        # "" rather than None: no token, not $WORKSPACED_TOKEN.
        c = workspaced.connect(self.server.address, token=token or "", tls=tls)
        self.addCleanup(c.close)
        return c

    def assertUnavailable(self, fn):
        with self.assertRaises(workspaced.WorkspacedError) as cm:
            fn()
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE, cm.exception)
        self.assertEqual(cm.exception.reason, "")
        self.assertTrue(workspaced.is_transient(cm.exception))


class TokenOverTLSTest(TLSTestCase):
    def test_open_write_exec_read_close(self):
        c = self.connect(ALICE)
        with c.open("local-bash", CAPS) as ws:
            ws.write_file("notes.txt", b"over tls\n")
            res = ws.run(["sh", "-c", "cat notes.txt; echo done"])
            self.assertTrue(res.ok)
            self.assertEqual(res.stdout, b"over tls\ndone\n")
            self.assertEqual(ws.read_file("notes.txt"), b"over tls\n")
            wid = ws.id
        self.assertNotIn(wid, [w.id for w in c.list()])

    def test_wrong_or_no_token_is_unauthenticated(self):
        for token in ("tok-mallory", ALICE + "x", None):
            with self.subTest(token=token):
                c = self.connect(token)
                with self.assertRaises(workspaced.Unauthenticated) as cm:
                    c.list()
                self.assertEqual(cm.exception.code, grpc.StatusCode.UNAUTHENTICATED)
                self.assertEqual(cm.exception.message, "unauthenticated")
                self.assertFalse(workspaced.is_transient(cm.exception))
                # Open does not retry a refusal.
                with self.assertRaises(workspaced.Unauthenticated):
                    c.open("memory")

    def test_wrong_ca_is_unavailable(self):
        c = self.connect(ALICE, ca="otherca.pem")
        self.assertUnavailable(c.list)
        self.assertUnavailable(lambda: c.open("memory", retry=NO_RETRY))

    def test_server_name_override(self):
        self.assertEqual(self.connect(ALICE, server_name="workspaced.test").health(), "SERVING")
        self.assertUnavailable(self.connect(ALICE, server_name="wrong.test").list)

    def test_plaintext_against_tls_is_unavailable(self):
        with workspaced.connect(self.server.address, token=ALICE) as c:
            self.assertUnavailable(c.list)

    def test_unreadable_ca_file_fails_at_connect(self):
        with self.assertRaises(FileNotFoundError):
            workspaced.connect(self.server.address, token=ALICE,
                               tls=workspaced.TLSConfig(root_certificates=self.path("missing.pem")))
        with self.assertRaises(ValueError):
            workspaced.connect(self.server.address, token=ALICE,
                               tls=workspaced.TLSConfig(root_certificates=self.path("tokens")))


class MutualTLSTest(TLSTestCase):
    mutual = True

    def test_certificate_names_the_tenant(self):
        alice = self.connect(client="alice")
        ws = alice.open("local-bash", CAPS)
        self.addCleanup(ws.close)
        ws.write_file("mine.txt", b"alice's\n")
        self.assertEqual(ws.run(["cat", "mine.txt"]).stdout, b"alice's\n")
        self.assertIn(ws.id, [w.id for w in alice.list()])

        # Bob's token decides over alice's certificate: the workspace is
        # nothing bob can see.
        bob = self.connect(BOB, client="alice")
        self.assertEqual(bob.list(), [])
        with self.assertRaises(workspaced.NoSuchWorkspace):
            bob.resolve(ws.ref)
        # Alice's own certificate still finds it.
        self.assertEqual(alice.resolve(ws.ref).read_file("mine.txt"), b"alice's\n")

    def test_no_or_untrusted_client_certificate_fails_the_handshake(self):
        self.assertUnavailable(self.connect().list)
        self.assertUnavailable(self.connect(ALICE).list)
        self.assertUnavailable(self.connect(client="stranger").list)


if __name__ == "__main__":
    unittest.main()
