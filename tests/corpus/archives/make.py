#!/usr/bin/env python3
"""Writes the hostile-archive corpus into DIR: one archive per case and
DIR/cases.tsv, a line per case:

    name <TAB> format <TAB> code <TAB> reason <TAB> metadata

format is "tar" or "tgz" (what WriteArchive is told); code and reason are
the status WriteArchive must answer with (code "OK" for an archive that is
accepted); metadata is "key=value" pairs joined by ";" that the error's
metadata must hold. The archives are made here, not stored, because some
are large when unpacked (the gzip bombs) and they are cheap to make.

Usage: make.py DIR
"""
import gzip
import io
import os
import sys
import tarfile

OUT = sys.argv[1]
CASES = []


def entry(name, kind=tarfile.REGTYPE, data=b"", mode=0o644, link="", size=None):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.linkname = link
    info.size = len(data) if size is None else size
    info.mtime = 1700000000
    return info, data


def write(name, entries, fmt="tar", code="OK", reason="", meta="", raw=None,
          tar_format=tarfile.PAX_FORMAT):
    path = os.path.join(OUT, name + (".tgz" if fmt == "tgz" else ".tar"))
    if raw is None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tar_format) as tf:
            for info, data in entries:
                tf.addfile(info, io.BytesIO(data) if info.isreg() and data else None)
        raw = buf.getvalue()
        if fmt == "tgz":
            raw = gzip.compress(raw, 6)
    with open(path, "wb") as f:
        f.write(raw)
    CASES.append((os.path.basename(path), fmt, code, reason, meta))


BAD = "INVALID_ARGUMENT"

# zip-slip and its variants: nothing outside the target is ever named.
write("absolute", [entry("/tmp/evil", data=b"x")], code=BAD, reason="BAD_ARCHIVE",
      meta="problem=absolute;entry=/tmp/evil")
# A name that is a printf format: reported as it is, never interpreted.
write("format_in_name", [entry("/%n%n%s%s%x%p", data=b"x")], code=BAD, reason="BAD_ARCHIVE",
      meta="problem=absolute;entry=/%n%n%s%s%x%p")
write("dotdot", [entry("../evil", data=b"x")], code=BAD, reason="BAD_ARCHIVE",
      meta="problem=dotdot;entry=../evil")
write("dotdot_inner", [entry("a/b/../../../evil", data=b"x")], code=BAD,
      reason="BAD_ARCHIVE", meta="problem=dotdot;entry=a/b/../../../evil")
write("dot_dotdot", [entry("./../evil", data=b"x")], code=BAD, reason="BAD_ARCHIVE",
      meta="problem=dotdot")
write("dotdot_dir", [entry("..", kind=tarfile.DIRTYPE, mode=0o755)], code=BAD,
      reason="BAD_ARCHIVE", meta="problem=dotdot")
# A symlink, then a write through it (the classic link-then-write).
write("symlink_then_write", [
    entry("escape", kind=tarfile.SYMTYPE, link="/tmp"),
    entry("escape/evil", data=b"x"),
], code=BAD, reason="BAD_ARCHIVE", meta="problem=through_symlink;entry=escape/evil")
write("symlink_dotdot_then_write", [
    entry("up", kind=tarfile.SYMTYPE, link=".."),
    entry("up/evil", data=b"x"),
], code=BAD, reason="BAD_ARCHIVE", meta="problem=through_symlink;entry=up/evil")
write("symlink_deep_then_write", [
    entry("d", kind=tarfile.DIRTYPE, mode=0o755),
    entry("d/l", kind=tarfile.SYMTYPE, link="/"),
    entry("d/l/etc/passwd", data=b"root::0:0::/:/bin/sh\n"),
], code=BAD, reason="BAD_ARCHIVE", meta="problem=through_symlink;entry=d/l/etc/passwd")
# The same name as a symlink, then as a file: the file would be written
# through the link.
write("symlink_then_same_name", [
    entry("f", kind=tarfile.SYMTYPE, link="/etc/passwd"),
    entry("f", data=b"x"),
], code=BAD, reason="BAD_ARCHIVE", meta="problem=duplicate;entry=f")
write("file_then_dir_same_name", [
    entry("f", data=b"x"),
    entry("f", kind=tarfile.DIRTYPE, mode=0o755),
], code=BAD, reason="BAD_ARCHIVE", meta="problem=duplicate;entry=f/")
write("through_file", [
    entry("f", data=b"x"),
    entry("f/g", data=b"y"),
], code=BAD, reason="BAD_ARCHIVE", meta="problem=not_directory;entry=f/g")
# Hard links may only name an earlier file of the same archive.
write("hardlink_absolute", [entry("h", kind=tarfile.LNKTYPE, link="/etc/passwd")],
      code=BAD, reason="BAD_ARCHIVE", meta="problem=link_outside;entry=h")
write("hardlink_dotdot", [entry("h", kind=tarfile.LNKTYPE, link="../outside")],
      code=BAD, reason="BAD_ARCHIVE", meta="problem=link_outside;entry=h")
write("hardlink_forward", [
    entry("h", kind=tarfile.LNKTYPE, link="later"),
    entry("later", data=b"x"),
], code=BAD, reason="BAD_ARCHIVE", meta="problem=link_outside;entry=h")
write("hardlink_to_symlink", [
    entry("s", kind=tarfile.SYMTYPE, link="/etc/passwd"),
    entry("h", kind=tarfile.LNKTYPE, link="s"),
], code=BAD, reason="BAD_ARCHIVE", meta="problem=link_outside;entry=h")
# Special files are never made.
write("chardev", [entry("null", kind=tarfile.CHRTYPE, mode=0o666)], code=BAD,
      reason="BAD_ARCHIVE", meta="problem=device;entry=null")
write("blockdev", [entry("sda", kind=tarfile.BLKTYPE, mode=0o660)], code=BAD,
      reason="BAD_ARCHIVE", meta="problem=device;entry=sda")
write("fifo", [entry("pipe", kind=tarfile.FIFOTYPE, mode=0o644)], code=BAD,
      reason="BAD_ARCHIVE", meta="problem=fifo;entry=pipe")
write("long_component", [entry("x" * 300, data=b"x")], code=BAD, reason="BAD_ARCHIVE",
      meta="problem=bad_name")
# Sizes: a huge sparse-looking entry (the header claims a terabyte) is
# refused by the workspace's file size cap before any byte is written.
huge = entry("huge", size=1 << 40)
hdr = huge[0].tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
write("huge_entry", None, code="RESOURCE_EXHAUSTED", reason="SIZE_CAP",
      meta="entry=huge", raw=hdr + b"\0" * 4096)
# A million entries would be a million files: refused at the cap.
many = io.BytesIO()
with tarfile.open(fileobj=many, mode="w", format=tarfile.USTAR_FORMAT) as tf:
    for i in range(100001):
        tf.addfile(entry("e%06d" % i)[0])
write("too_many_entries", None, fmt="tgz", code=BAD, reason="LIMIT",
      meta="field=entries;limit=100000", raw=gzip.compress(many.getvalue(), 6))
# Broken streams.
good = io.BytesIO()
with tarfile.open(fileobj=good, mode="w", format=tarfile.PAX_FORMAT) as tf:
    info, data = entry("file", data=b"A" * 100000)
    tf.addfile(info, io.BytesIO(data))
gb = good.getvalue()
write("truncated_data", None, code=BAD, reason="BAD_ARCHIVE", meta="problem=truncated",
      raw=gb[:50000])
write("truncated_header", None, code=BAD, reason="BAD_ARCHIVE", raw=gb[:700])
write("not_tar", None, code=BAD, reason="BAD_ARCHIVE", meta="problem=malformed",
      raw=bytes(range(256)) * 40)
bad_sum = bytearray(gb)
bad_sum[148:156] = b"0000000\0"  # checksum field
write("bad_checksum", None, code=BAD, reason="BAD_ARCHIVE", raw=bytes(bad_sum))
write("gzip_not_gzip", None, fmt="tgz", code=BAD, reason="BAD_ARCHIVE", meta="problem=gzip",
      raw=gb)
write("gzip_corrupt", None, fmt="tgz", code=BAD, reason="BAD_ARCHIVE", meta="problem=gzip",
      raw=gzip.compress(gb)[:30] + b"\xff" * 200)
# gzip bombs: a small stream that unpacks to a great deal.
def bomb(size):
    info, _ = entry("zeros", size=size)
    z = io.BytesIO()
    with gzip.GzipFile(fileobj=z, mode="wb", compresslevel=9) as g:
        g.write(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        chunk = b"\0" * (1 << 20)
        for _ in range(size >> 20):
            g.write(chunk)
        g.write(b"\0" * 1024)
    return z.getvalue()
write("gzip_bomb", None, fmt="tgz", code=BAD, reason="LIMIT",
      meta="field=ratio", raw=bomb(96 << 20))
# Accepted, with what is stripped or named reported.
write("setuid_stripped", [entry("suid", data=b"#!/bin/sh\n", mode=0o4755),
                          entry("sgid", data=b"x", mode=0o2755)])
write("gnu_dot_prefix", [entry("./", kind=tarfile.DIRTYPE, mode=0o755),
                         entry("./a", kind=tarfile.DIRTYPE, mode=0o755),
                         entry("./a/b.txt", data=b"b")], tar_format=tarfile.GNU_FORMAT)

with open(os.path.join(OUT, "cases.tsv"), "w") as f:
    for c in CASES:
        f.write("\t".join(c) + "\n")
