"""A user's first script against the installed package (run by
package_test.sh from a clean directory, with the venv's python).

    python package_smoke.py ADDRESS VERSION

Checks that workspaced comes from the installed wheel or sdist (not a
checkout), that its version is VERSION, a write/read round trip on a memory
workspace with the synchronous client, and one asyncio call. Prints "smoke
ok" last.
"""

import asyncio
import os
import sys

import workspaced
import workspaced.aio


def main() -> int:
    address, version = sys.argv[1], sys.argv[2]
    where = os.path.dirname(workspaced.__file__)
    assert os.sep + "site-packages" + os.sep in where + os.sep, "workspaced imported from %s" % where
    assert workspaced.__version__ == version, (workspaced.__version__, version)
    assert os.path.isfile(os.path.join(where, "py.typed")), "no py.typed in %s" % where
    outside = [m for m in sys.modules if m.split(".")[0] == "workspace" or m.startswith(("google.rpc", "grpc.health"))]
    assert not outside, "imported outside the package: %s" % outside

    with workspaced.connect(address, timeout=30) as client:
        with client.open("memory", {"fs": {}}) as ws:
            ws.write_file("hello.txt", b"hello from the wheel\n")
            assert ws.read_file("hello.txt") == b"hello from the wheel\n"
        print("sync round trip ok, server", client.server_info().version)

    async def one_aio_call() -> None:
        async with workspaced.aio.connect(address, timeout=30) as client:
            async with await client.open("memory", {"fs": {}}) as ws:
                await ws.write_file("a.txt", "async")
                assert await ws.read_file("a.txt") == b"async"
                try:
                    await ws.read_file("missing")
                except workspaced.NoSuchFile:
                    pass
                else:
                    raise AssertionError("no NoSuchFile")

    asyncio.run(one_aio_call())
    print("aio round trip ok")
    print("smoke ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
