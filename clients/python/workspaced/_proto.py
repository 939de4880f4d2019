"""Imports of the generated message and service modules.

The stubs are produced by the build (protoc + grpc_python_plugin) into a
directory that must be on sys.path; nothing generated is committed. Keeping
every generated import in one module gives a single, clear error when that
directory is missing.
"""

import os
import sys

import grpc

try:
    from google.rpc import error_details_pb2, status_pb2
    from workspace.v1 import common_pb2, exec_pb2, exec_pb2_grpc
    from workspace.v1 import filesystem_pb2, filesystem_pb2_grpc
    from workspace.v1 import providers_pb2, providers_pb2_grpc
    from workspace.v1 import workspaces_pb2, workspaces_pb2_grpc
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "workspaced: the generated protobuf modules are not importable (%s); "
        "put the directory the build generated them into on PYTHONPATH "
        "(bazel build //clients/python:stubs)" % e
    ) from e


def _extend_grpc_path():
    """Lets `grpc.health.v1` resolve to the generated health stubs.

    The health proto's package is `grpc.health.v1`, so protoc writes it under
    a `grpc/` directory, but the real `grpc` package (with its __init__.py)
    wins the import, and Debian ships no grpcio-health-checking. Appending
    the generated `grpc/` directories to the real package's __path__ makes
    the generated subpackage visible without shadowing anything.
    """
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "grpc")
        if os.path.isdir(os.path.join(candidate, "health")) and candidate not in grpc.__path__:
            grpc.__path__.append(candidate)


_extend_grpc_path()
try:
    from grpc.health.v1 import health_pb2, health_pb2_grpc
except ImportError:  # pragma: no cover - health is optional for the wrapper
    health_pb2 = health_pb2_grpc = None

__all__ = [
    "common_pb2",
    "error_details_pb2",
    "exec_pb2",
    "exec_pb2_grpc",
    "filesystem_pb2",
    "filesystem_pb2_grpc",
    "health_pb2",
    "health_pb2_grpc",
    "providers_pb2",
    "providers_pb2_grpc",
    "status_pb2",
    "workspaces_pb2",
    "workspaces_pb2_grpc",
]
