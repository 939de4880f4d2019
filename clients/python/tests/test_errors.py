"""The typed errors: one class for every workspace.v1.ErrorReason, and
the decoding of a status trailer into them (no server needed: the trailer
is built here exactly as the server sends it)."""

import os
import unittest

import grpc

import workspaced
from workspaced import errors
from workspaced._proto import common_pb2, error_details_pb2, status_pb2


class FakeRpcError(grpc.RpcError):
    """What grpc raises for a failed call: a code, details and the
    trailing metadata with the serialized google.rpc.Status."""

    def __init__(self, code, reason=None, metadata=None, message="refused"):
        self._code = code
        self._message = message
        self._trailers = ()
        if reason is not None:
            status = status_pb2.Status(code=code.value[0], message=message)
            info = error_details_pb2.ErrorInfo(reason=reason, domain="workspaced", metadata=metadata or {})
            status.details.add().Pack(info)
            self._trailers = ((errors.DETAILS_KEY, status.SerializeToString()),)

    def code(self):
        return self._code

    def details(self):
        return self._message

    def trailing_metadata(self):
        return self._trailers


class ReasonCoverageTest(unittest.TestCase):
    def test_every_reason_of_the_generated_enum_has_a_class(self):
        reasons = [n for n in common_pb2.ErrorReason.keys() if n != "ERROR_REASON_UNSPECIFIED"]
        self.assertGreaterEqual(len(reasons), 47)
        missing = [r for r in reasons if r not in errors.BY_REASON]
        self.assertEqual(missing, [], "reasons without an error class in workspaced.errors")
        stray = sorted(set(errors.BY_REASON) - set(reasons))
        self.assertEqual(stray, [], "error classes for reasons not in workspace.v1.ErrorReason")

    def test_each_class_is_exported_and_raised_for_its_reason(self):
        for reason, cls in errors.BY_REASON.items():
            with self.subTest(reason=reason):
                self.assertIs(getattr(workspaced, cls.__name__), cls, "not exported from workspaced")
                self.assertTrue(issubclass(cls, workspaced.WorkspacedError))
                err = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, reason, {"k": "v"}))
                self.assertIs(type(err), cls)
                self.assertEqual((err.reason, err.metadata, err.message), (reason, {"k": "v"}, "refused"))

    def test_unknown_reason_keeps_code_and_reason(self):
        err = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.ABORTED, "REASON_FROM_A_NEWER_SERVER", {"x": "1"}))
        self.assertIs(type(err), workspaced.WorkspacedError)
        self.assertEqual(err.code, grpc.StatusCode.ABORTED)
        self.assertEqual(err.reason, "REASON_FROM_A_NEWER_SERVER")
        self.assertEqual(err.metadata, {"x": "1"})
        self.assertIn("REASON_FROM_A_NEWER_SERVER", str(err))

    def test_bare_codes(self):
        cases = {
            grpc.StatusCode.UNAUTHENTICATED: workspaced.Unauthenticated,
            grpc.StatusCode.DEADLINE_EXCEEDED: workspaced.DeadlineExceeded,
            grpc.StatusCode.CANCELLED: workspaced.Cancelled,
            grpc.StatusCode.UNAVAILABLE: workspaced.WorkspacedError,
        }
        for code, cls in cases.items():
            err = errors.from_rpc_error(FakeRpcError(code))
            self.assertIs(type(err), cls)
            self.assertEqual((err.code, err.reason), (code, ""))

    def test_shell_guard_refusals_share_a_base(self):
        for cls in (workspaced.CommandNotAllowed, workspaced.Metachar, workspaced.GlobDenied, workspaced.EnvDenied,
                    workspaced.CwdEscape, workspaced.ArgLimit):
            self.assertTrue(issubclass(cls, workspaced.ShellGuardError))


class PackageTest(unittest.TestCase):
    def test_version_is_the_repositorys(self):
        with open(os.environ["WORKSPACED_VERSION_FILE"]) as f:
            self.assertEqual(workspaced.__version__, f.read().strip())

    def test_stubs_live_inside_the_package(self):
        import sys

        import workspaced.aio  # noqa: F401  (imported for what it imports)

        self.assertTrue(common_pb2.__name__.startswith("workspaced._pb."), common_pb2.__name__)
        outside = [m for m in sys.modules if m.split(".")[0] == "workspace" or m.startswith(("google.rpc", "grpc.health"))]
        self.assertEqual(outside, [])


if __name__ == "__main__":
    unittest.main()
